//! Input validation of the CPU path: one test per refusal it can raise, each checking the exact
//! error (naming the offending value) and that neither the output nor the log-sum-exp was
//! touched.

use flashattn::cpu::{self, HostTensor, HostTensorMut};
use flashattn::{AttentionOptions, Error, InvalidInput, Layout, TileError, Tiles, VarLen};

const OUT_SENTINEL: f32 = 1234.5;
const LSE_SENTINEL: f32 = -777.25;

/// A call with buffers of exactly the layouts' sizes, except where `lens` overrides one.
struct Call {
    layouts: [Layout; 4],
    lens: [Option<usize>; 4],
    lse_len: Option<usize>,
    opts: AttentionOptions,
}

impl Call {
    fn new(q: Layout, k: Layout) -> Call {
        Call {
            layouts: [q, k, k, q],
            lens: [None; 4],
            lse_len: Some(q.batch * q.heads * q.seqlen),
            opts: Default::default(),
        }
    }

    /// Runs the call into sentinel-filled outputs; asserts it is refused without writing, and
    /// returns the reason.
    fn refused(&self) -> InvalidInput {
        let len = |i: usize| self.lens[i].unwrap_or_else(|| self.layouts[i].required_len().unwrap_or(0));
        let (q, k, v) = (vec![0.5f32; len(0)], vec![0.25f32; len(1)], vec![-0.5f32; len(2)]);
        let mut out = vec![OUT_SENTINEL; len(3)];
        let mut lse = self.lse_len.map(|n| vec![LSE_SENTINEL; n]);
        let [lq, lk, lv, lo] = self.layouts;
        let result = cpu::attention(
            HostTensor { data: &q, layout: lq },
            HostTensor { data: &k, layout: lk },
            HostTensor { data: &v, layout: lv },
            HostTensorMut { data: &mut out, layout: lo },
            lse.as_deref_mut(),
            &self.opts,
        );
        assert!(out.iter().all(|&x| x == OUT_SENTINEL), "output written on error");
        assert!(lse.iter().flatten().all(|&x| x == LSE_SENTINEL), "lse written on error");
        match result {
            Err(Error::InvalidInput(e)) => {
                // The message names the offending value and is not empty.
                assert!(!e.to_string().is_empty());
                e
            }
            other => panic!("expected an InvalidInput error, got {other:?}"),
        }
    }

    /// Asserts the call succeeds (the valid twin of a refused one).
    fn accepted(&self) {
        let len = |i: usize| self.lens[i].unwrap_or_else(|| self.layouts[i].required_len().unwrap_or(0));
        let (q, k, v) = (vec![0.5f32; len(0)], vec![0.25f32; len(1)], vec![-0.5f32; len(2)]);
        let mut out = vec![OUT_SENTINEL; len(3)];
        let mut lse = self.lse_len.map(|n| vec![LSE_SENTINEL; n]);
        let [lq, lk, lv, lo] = self.layouts;
        cpu::attention(
            HostTensor { data: &q, layout: lq },
            HostTensor { data: &k, layout: lk },
            HostTensor { data: &v, layout: lv },
            HostTensorMut { data: &mut out, layout: lo },
            lse.as_deref_mut(),
            &self.opts,
        )
        .expect("valid call");
    }
}

fn base() -> Call {
    Call::new(Layout::bshd(2, 5, 4, 8), Layout::bshd(2, 7, 2, 8))
}

fn mismatch(what: &'static str, tensor: &'static str, expected: usize, actual: usize) -> InvalidInput {
    InvalidInput::ShapeMismatch { what, tensor, expected, actual }
}

#[test]
fn the_base_call_is_valid() {
    base().accepted();
    let mut c = base();
    c.lse_len = None;
    c.accepted();
}

#[test]
fn head_dim_0_and_257() {
    for d in [0, 257] {
        let c = Call::new(Layout::bshd(1, 3, 1, d), Layout::bshd(1, 3, 1, d));
        assert_eq!(c.refused(), InvalidInput::HeadDim { head_dim: d });
    }
    Call::new(Layout::bshd(1, 3, 1, 256), Layout::bshd(1, 3, 1, 256)).accepted();
}

#[test]
fn k_mismatch() {
    let mut c = base();
    c.layouts[1] = Layout::bshd(2, 7, 2, 9);
    c.layouts[2] = Layout::bshd(2, 7, 2, 9);
    assert_eq!(c.refused(), mismatch("head_dim", "k", 8, 9));
    let mut c = base();
    c.layouts[1] = Layout::bshd(3, 7, 2, 8);
    assert_eq!(c.refused(), mismatch("batch", "k", 2, 3));
}

#[test]
fn v_mismatch() {
    let mut c = base();
    c.layouts[2] = Layout::bshd(2, 7, 2, 4);
    assert_eq!(c.refused(), mismatch("head_dim", "v", 8, 4));
    let mut c = base();
    c.layouts[2] = Layout::bshd(1, 7, 2, 8);
    assert_eq!(c.refused(), mismatch("batch", "v", 2, 1));
    let mut c = base();
    c.layouts[2] = Layout::bshd(2, 6, 2, 8);
    assert_eq!(c.refused(), mismatch("seqlen", "v", 7, 6));
    let mut c = base();
    c.layouts[2] = Layout::bshd(2, 7, 1, 8);
    assert_eq!(c.refused(), mismatch("heads", "v", 2, 1));
}

#[test]
fn o_mismatch() {
    let mut c = base();
    c.layouts[3] = Layout::bshd(1, 5, 4, 8);
    assert_eq!(c.refused(), mismatch("batch", "o", 2, 1));
    let mut c = base();
    c.layouts[3] = Layout::bshd(2, 6, 4, 8);
    assert_eq!(c.refused(), mismatch("seqlen", "o", 5, 6));
    let mut c = base();
    c.layouts[3] = Layout::bshd(2, 5, 2, 8);
    assert_eq!(c.refused(), mismatch("heads", "o", 4, 2));
    let mut c = base();
    c.layouts[3] = Layout::bshd(2, 5, 4, 16);
    assert_eq!(c.refused(), mismatch("head_dim", "o", 8, 16));
}

#[test]
fn q_mismatch() {
    // Q is the reference the others are measured against: a Q that disagrees with K/V is
    // reported on the tensor that differs from it.
    let mut c = base();
    c.layouts[0] = Layout::bshd(2, 5, 4, 16);
    c.layouts[3] = Layout::bshd(2, 5, 4, 16);
    assert_eq!(c.refused(), mismatch("head_dim", "k", 16, 8));
    let mut c = base();
    c.layouts[0] = Layout::bshd(1, 5, 4, 8);
    c.layouts[3] = Layout::bshd(1, 5, 4, 8);
    assert_eq!(c.refused(), mismatch("batch", "k", 1, 2));
}

#[test]
fn q_heads_not_a_multiple_of_kv_heads() {
    let mut c = base();
    c.layouts[0] = Layout::bshd(2, 5, 3, 8);
    c.layouts[3] = Layout::bshd(2, 5, 3, 8);
    assert_eq!(c.refused(), InvalidInput::HeadGroups { q_heads: 3, kv_heads: 2 });
    let mut c = base();
    c.layouts[1] = Layout::bshd(2, 7, 0, 8);
    c.layouts[2] = Layout::bshd(2, 7, 0, 8);
    assert_eq!(c.refused(), InvalidInput::HeadGroups { q_heads: 4, kv_heads: 0 });
}

#[test]
fn buffer_too_small() {
    for (i, name) in ["q", "k", "v", "o"].into_iter().enumerate() {
        let mut c = base();
        let needed = c.layouts[i].required_len().unwrap();
        c.lens[i] = Some(needed - 1);
        assert_eq!(c.refused(), InvalidInput::BufferTooSmall { tensor: name, needed, len: needed - 1 });
    }
    // Strides count: a padded layout needs more than its elements.
    let mut c = base();
    c.layouts[3].head_stride = 9;
    c.layouts[3].seq_stride = 40;
    c.layouts[3].batch_stride = 200;
    c.lens[3] = Some(2 * 5 * 4 * 8);
    assert_eq!(
        c.refused(),
        InvalidInput::BufferTooSmall { tensor: "o", needed: 200 + 4 * 40 + 3 * 9 + 8, len: 320 }
    );
}

#[test]
fn layout_overflow() {
    let mut c = base();
    c.layouts[1].batch_stride = usize::MAX;
    c.lens[1] = Some(16);
    assert_eq!(c.refused(), InvalidInput::LayoutOverflow { tensor: "k" });
}

#[test]
fn non_finite_and_non_positive_scale() {
    for scale in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, -0.125] {
        let mut c = base();
        c.opts.scale = Some(scale);
        match c.refused() {
            InvalidInput::Scale { scale: s } => assert!(s.to_bits() == scale.to_bits(), "{s} vs {scale}"),
            other => panic!("scale {scale}: {other:?}"),
        }
    }
    let mut c = base();
    c.opts.scale = Some(f32::MIN_POSITIVE);
    c.accepted();
}

#[test]
fn lse_too_small() {
    let mut c = base();
    c.lse_len = Some(2 * 4 * 5 - 1);
    assert_eq!(c.refused(), InvalidInput::LseTooSmall { needed: 40, len: 39 });
}

#[test]
fn zero_tiles() {
    for (m, n) in [(Some(0), None), (None, Some(0)), (Some(0), Some(0)), (Some(16), Some(0))] {
        let mut c = base();
        c.opts.tiles = Tiles { block_m: m, block_n: n };
        match c.refused() {
            InvalidInput::Tiles { block_m, block_n, reason, .. } => {
                assert_eq!((block_m, block_n, reason), (m, n, TileError::Zero));
            }
            other => panic!("{other:?}"),
        }
    }
    let mut c = base();
    c.opts.tiles = Tiles { block_m: Some(1), block_n: Some(1) };
    c.accepted();
}

fn varlen_call(q_offsets: Vec<u32>, k_offsets: Vec<u32>) -> Call {
    let mut c = Call::new(Layout::packed(10, 2, 4), Layout::packed(12, 1, 4));
    c.opts.varlen = Some(VarLen { cu_seqlens_q: q_offsets, cu_seqlens_k: k_offsets });
    c
}

#[test]
fn varlen_valid() {
    varlen_call(vec![0, 4, 4, 10], vec![0, 0, 5, 12]).accepted();
    varlen_call(vec![0, 1], vec![0, 2]).accepted();
}

#[test]
fn varlen_batch_not_1() {
    let mut c = varlen_call(vec![0, 2], vec![0, 2]);
    c.layouts = [
        Layout::bshd(2, 5, 2, 4),
        Layout::bshd(2, 6, 1, 4),
        Layout::bshd(2, 6, 1, 4),
        Layout::bshd(2, 5, 2, 4),
    ];
    c.lse_len = Some(20);
    assert_eq!(c.refused(), InvalidInput::VarLenBatch { batch: 2 });
}

#[test]
fn varlen_count_mismatch() {
    assert_eq!(varlen_call(vec![0, 4, 10], vec![0, 12]).refused(), InvalidInput::VarLenCounts { q: 3, k: 2 });
    assert_eq!(varlen_call(vec![], vec![]).refused(), InvalidInput::VarLenCounts { q: 0, k: 0 });
}

#[test]
fn varlen_offsets_not_starting_at_0() {
    assert_eq!(
        varlen_call(vec![1, 4, 10], vec![0, 5, 12]).refused(),
        InvalidInput::VarLenOffsets { tensor: "q", index: 0, value: 1, limit: 0 }
    );
    assert_eq!(
        varlen_call(vec![0, 4, 10], vec![2, 5, 12]).refused(),
        InvalidInput::VarLenOffsets { tensor: "k", index: 0, value: 2, limit: 0 }
    );
}

#[test]
fn varlen_offsets_not_monotone() {
    assert_eq!(
        varlen_call(vec![0, 6, 4, 10], vec![0, 1, 5, 12]).refused(),
        InvalidInput::VarLenOffsets { tensor: "q", index: 2, value: 4, limit: 6 }
    );
    assert_eq!(
        varlen_call(vec![0, 4, 10], vec![0, 8, 7]).refused(),
        InvalidInput::VarLenOffsets { tensor: "k", index: 2, value: 7, limit: 8 }
    );
}

#[test]
fn varlen_offsets_beyond_the_buffer() {
    assert_eq!(
        varlen_call(vec![0, 4, 11], vec![0, 5, 12]).refused(),
        InvalidInput::VarLenTotal { tensor: "q", last: 11, tokens: 10 }
    );
    assert_eq!(
        varlen_call(vec![0, 4, 10], vec![0, 5, 13]).refused(),
        InvalidInput::VarLenTotal { tensor: "k", last: 13, tokens: 12 }
    );
}

#[test]
fn split_counts_outside_one_to_max_are_refused() {
    let l = Layout::bshd(1, 8, 1, 16);
    for splits in [0, flashattn::MAX_SPLITS + 1] {
        let mut call = Call::new(l, l);
        call.opts.splits = Some(splits);
        assert!(
            matches!(call.refused(), InvalidInput::Tiles { reason: TileError::Splits { splits: s }, .. } if s == splits),
            "{splits}"
        );
    }
}

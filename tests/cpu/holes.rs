//! Regression tests for the holes an adversarial review found (named after what they pin), on
//! the CPU path and the shared validation. Their GPU twins are in `tests/gpu/holes.rs`.

use flashattn::cpu::{self, HostTensor, HostTensorMut};
use flashattn::kernels::config::CPU_TILES;
use flashattn::{AttentionOptions, Error, InvalidInput, Layout, MAX_TOKENS, Problem, Tiles, VarLen};
use flashattn_testkit::oracle::{attention_f64, widen};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn run_cpu(
    layouts: [Layout; 4],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    opts: &AttentionOptions,
) -> flashattn::Result<(Vec<f32>, Vec<f32>)> {
    let [lq, lk, lv, lo] = layouts;
    let mut out = vec![f32::NAN; lo.required_len().unwrap_or(0)];
    let mut lse = vec![f32::NAN; lq.batch * lq.heads * lq.seqlen];
    cpu::attention(
        HostTensor { data: q, layout: lq },
        HostTensor { data: k, layout: lk },
        HostTensor { data: v, layout: lv },
        HostTensorMut { data: &mut out, layout: lo },
        Some(&mut lse),
        opts,
    )?;
    Ok((out, lse))
}

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `Layout::bshd(16, 2^30, 2^30, 256)` used to wrap its batch stride to 0 (a valid-looking
/// layout that aliases every batch entry); now it saturates and validation says it overflows.
#[test]
fn layout_constructors_do_not_wrap() {
    let l = Layout::bshd(16, 1 << 30, 1 << 30, 256);
    assert_eq!(l.batch_stride, usize::MAX);
    assert_eq!(l.required_len(), None);
    let r = Problem::new(l, l, l, l, [usize::MAX; 4], &AttentionOptions::default());
    assert_eq!(r, Err(InvalidInput::LayoutOverflow { tensor: "q" }));
    assert_eq!(Layout::bhsd(16, 1 << 30, 1 << 30, 256).required_len(), None);
}

/// `VarLen::from_lengths(&[u32::MAX, 5])` used to saturate into offsets that silently dropped
/// the second sequence's tokens.
#[test]
fn varlen_lengths_overflow_is_an_error() {
    let r = VarLen::from_lengths(&[u32::MAX, 5], &[1, 1]);
    assert_eq!(r, Err(InvalidInput::VarLenOverflow { tensor: "q", index: 1 }));
    let r = VarLen::from_lengths(&[1, 1], &[3, u32::MAX]);
    assert_eq!(r, Err(InvalidInput::VarLenOverflow { tensor: "k", index: 1 }));
    assert_eq!(VarLen::from_lengths(&[2, 3], &[4, 0]).unwrap().cu_seqlens_q, vec![0, 2, 5]);
}

#[test]
fn token_counts_are_capped_where_kernels_count_in_32_bits() {
    let q = Layout {
        batch: 1,
        seqlen: MAX_TOKENS + 1,
        heads: 1,
        head_dim: 8,
        batch_stride: 0,
        seq_stride: 0,
        head_stride: 0,
    };
    let k = Layout::bshd(1, 4, 1, 8);
    let o = q;
    let r = Problem::new(q, k, k, o, [usize::MAX; 4], &AttentionOptions::default());
    assert!(matches!(r, Err(InvalidInput::TooManyTokens { tensor: "q", .. })), "{r:?}");
}

/// Output layouts whose elements overlap (here: every head written to the same place) used to be
/// accepted, giving run-to-run different results on the GPU. Refused on every path.
#[test]
fn overlapping_outputs_are_refused() {
    let q = Layout::bshd(1, 8, 2, 16);
    let mut o = q;
    o.head_stride = 0;
    let r = run_cpu([q, q, q, o], &vec![0.5; 256], &vec![0.5; 256], &vec![0.5; 256], &Default::default());
    assert!(matches!(r, Err(Error::InvalidInput(InvalidInput::OverlappingOutput { .. }))), "{r:?}");
    // Rows that overlap by part of the head dim.
    let mut o = q;
    o.seq_stride = 24;
    o.head_stride = 16;
    assert!(o.overlaps());
    // Interleaved but disjoint (heads inside tokens, tokens inside batches) is fine, and a
    // dimension of extent 1 has no stride to check.
    assert!(!Layout::bhsd(3, 5, 4, 16).overlaps());
    let mut one = Layout::bshd(1, 1, 1, 16);
    one.seq_stride = 0;
    one.head_stride = 0;
    assert!(!one.overlaps());
}

/// Zero query heads with K/V heads present is an empty problem (a no-op), on every path; K/V
/// without heads for queries that have some is refused.
#[test]
fn zero_heads_are_consistent() {
    let q = Layout::bshd(2, 4, 0, 8);
    let k = Layout::bshd(2, 4, 2, 8);
    let (out, lse) =
        run_cpu([q, k, k, q], &[], &vec![0.5; 128], &vec![0.5; 128], &Default::default()).unwrap();
    assert!(out.is_empty() && lse.is_empty());
    let q = Layout::bshd(2, 4, 2, 8);
    let k = Layout::bshd(2, 4, 0, 8);
    let r = run_cpu([q, k, k, q], &vec![0.5; 128], &[], &[], &Default::default());
    assert!(
        matches!(r, Err(Error::InvalidInput(InvalidInput::HeadGroups { q_heads: 2, kv_heads: 0 }))),
        "{r:?}"
    );
}

/// A finite but huge scale (1e35): the largest score's probability used to be computed as
/// 2^(m·c − round(m·c)), i.e. 2^(±10^28): `inf` (NaN output) or `0` (the "no visible key"
/// result). Now every path gives the right answer: the average of V over the arg-max keys.
#[test]
fn huge_scales_are_exact() {
    let mut rng = StdRng::seed_from_u64(7);
    let l = Layout::bshd(2, 37, 3, 16);
    let n = l.required_len().unwrap();
    let (q, k, v) = (random(&mut rng, n), random(&mut rng, n), random(&mut rng, n));
    for scale in [1e10f32, 1e35, 2e38] {
        for causal in [false, true] {
            let opts = AttentionOptions { scale: Some(scale), causal, ..Default::default() };
            let (out, lse) = run_cpu([l; 4], &q, &k, &v, &opts).unwrap();
            let p = Problem::new(l, l, l, l, [n; 4], &opts).unwrap();
            let r = attention_f64(&p, &widen(&q), &widen(&k), &widen(&v));
            for (i, (&o, &want)) in out.iter().zip(&r.out).enumerate() {
                assert!(
                    (o as f64 - want).abs() <= 1e-6,
                    "scale {scale} causal {causal}: out[{i}] {o} vs {want}"
                );
            }
            for (i, (&x, &want)) in lse.iter().zip(&r.lse).enumerate() {
                let ok = if want.abs() > f32::MAX as f64 {
                    x == want as f32
                } else {
                    ((x as f64 - want) / want).abs() < 1e-5
                };
                assert!(ok, "scale {scale} causal {causal}: lse[{i}] {x} vs {want}");
            }
        }
    }
}

/// A NaN in a query row used to give that row the log-sum-exp `-inf` (the value that means "no
/// visible key"); now its output and log-sum-exp are NaN, and other rows are untouched by it.
#[test]
fn nan_query_row_gives_nan() {
    let mut rng = StdRng::seed_from_u64(8);
    let l = Layout::bshd(1, 8, 1, 16);
    let (mut q, k, v) = (random(&mut rng, 128), random(&mut rng, 128), random(&mut rng, 128));
    q[3 * 16..4 * 16].fill(f32::NAN);
    let (out, lse) = run_cpu([l; 4], &q, &k, &v, &Default::default()).unwrap();
    assert!(lse[3].is_nan(), "{lse:?}");
    assert!(out[3 * 16..4 * 16].iter().all(|x| x.is_nan()));
    for t in (0..8).filter(|&t| t != 3) {
        assert!(lse[t].is_finite() && out[t * 16..(t + 1) * 16].iter().all(|x| x.is_finite()), "row {t}");
    }
}

/// A scale whose `scale·log2(e)` overflows f32 is refused, not computed as NaN.
#[test]
fn scales_beyond_the_kernels_range_are_refused() {
    let l = Layout::bshd(1, 4, 1, 8);
    let opts = AttentionOptions { scale: Some(3e38), ..Default::default() };
    assert_eq!(Problem::new(l, l, l, l, [32; 4], &opts), Err(InvalidInput::Scale { scale: 3e38 }));
}

/// Non-finite values in V: a row's output is NaN when it sees the value, and also when the value
/// sits in a key tile that the row's query tile visits (exactly as the GPU kernels do with the
/// same tiles); rows whose query tiles never visit it are unaffected.
#[test]
fn nan_in_v_follows_the_tile_rule() {
    let mut rng = StdRng::seed_from_u64(9);
    let l = Layout::bshd(1, 100, 1, 16);
    let (q, k, mut v) = (random(&mut rng, 1600), random(&mut rng, 1600), random(&mut rng, 1600));
    v[90 * 16] = f32::NAN; // key 90: seen by queries ≥ 90 under the causal mask
    let tiles = Tiles { block_m: Some(32), block_n: Some(16) };
    let opts = AttentionOptions { causal: true, tiles, ..Default::default() };
    let (out, lse) = run_cpu([l; 4], &q, &k, &v, &opts).unwrap();
    for t in 0..100 {
        let nan = out[t * 16].is_nan();
        // Query tile 64..96 visits key tile 80..96 (its last row, 95, sees key 90); tile
        // 96..100 too. Rows before 64 never visit it.
        assert_eq!(nan, t >= 64, "row {t}");
        assert!(!lse[t].is_nan(), "V does not enter the log-sum-exp (row {t})");
    }
    assert_eq!(CPU_TILES, (cpu::DEFAULT_BLOCK_M, cpu::DEFAULT_BLOCK_N));
}

/// `fn main() -> Result<(), flashattn::Error>` prints the `Debug` form: it must carry the
/// actionable message, not only the variant's name (`Error: NoDriver`).
#[test]
fn error_debug_carries_the_message() {
    let debug = format!("{:?}", Error::NoDriver);
    assert!(debug.starts_with("NoDriver: ") && debug.contains("install the NVIDIA driver"), "{debug}");
    let e: Error = InvalidInput::HeadDim { head_dim: 0 }.into();
    assert!(format!("{e:?}").contains("supported head dimensions are 1..=256"), "{e:?}");
}

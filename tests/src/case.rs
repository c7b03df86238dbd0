//! Test cases: a problem, its inputs, and both references ([`crate::oracle`]), built from a
//! [`Spec`] with fresh random inputs ([`Case::random`]) or from given data ([`Case::from_data`]).

use std::fmt;

use flashattn::cpu::{HostTensor, HostTensorMut};
use flashattn::{AttentionOptions, Element, InvalidInput, Layout, Problem, Tiles, VarLen};
use rand::Rng;
use rand_distr::StandardNormal;

use crate::oracle::{self, Reference};

/// How the sequences of a case are arranged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sequences {
    /// `batch` entries of `seqlen_q` queries and `seqlen_k` keys each.
    Batch {
        /// Batch entries.
        batch: usize,
        /// Queries per entry.
        seqlen_q: usize,
        /// Keys (and values) per entry.
        seqlen_k: usize,
    },
    /// Variable-length sequences packed along the token axis (batch 1), with `spare_q` query and
    /// `spare_k` key tokens after the last sequence that no sequence addresses.
    VarLen {
        /// Query tokens of each sequence (zero allowed).
        q_lens: Vec<u32>,
        /// Key tokens of each sequence (zero allowed).
        k_lens: Vec<u32>,
        /// Packed query tokens beyond the last sequence.
        spare_q: usize,
        /// Packed key tokens beyond the last sequence.
        spare_k: usize,
    },
}

/// Memory order of the four tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayoutKind {
    /// [`Layout::bshd`] for Q, K, V and O.
    Bshd,
    /// [`Layout::bhsd`] for Q, K, V and O.
    Bhsd,
    /// `(batch, seqlen, heads, head_dim)` order with gaps: 3 elements after each head, 5 after
    /// each token, 7 after each batch entry ([`padded_layout`]).
    Padded,
    /// A different layout per tensor: Q `bhsd`, K padded, V `bshd`, O padded.
    Mixed,
    /// `(batch, seqlen, heads, head_dim)` order with gaps, every stride a multiple of 8 elements
    /// (16-byte rows, what the tensor-core kernel needs) for any head dim ([`aligned_layout`]):
    /// the gap after each head's `head_dim` elements is at least 1, so a kernel that reads or
    /// writes past `head_dim` meets the gap.
    Aligned,
}

/// The distribution of the inputs. Input values are drawn in f32 and rounded to the element
/// type; the references use the rounded values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Values {
    /// Q, K, V uniform in [-1, 1).
    Uniform,
    /// Q, K, V standard normal.
    Normal,
    /// Logits in the thousands: Q and K uniform in [-8, 8) and the scale set to
    /// `1000 / (√d·64/3)` (overriding the spec's), so that the scaled scores have a standard
    /// deviation near 1000 and the softmax is nearly one-hot. V uniform in [-1, 1).
    /// (|q·k| ≤ 64·d ≤ 16384 stays inside f16's range.)
    LargeLogits,
    /// Every key of a (sequence, kv head) is the same vector, so every row's scores are all
    /// equal (in every precision) and the output is the mean of the visible values.
    EqualScores,
    /// Q, K uniform in [-1, 1), V uniform in [-1000, 1000): outputs far from magnitude 1.
    LargeValues,
}

impl Values {
    /// Every kind.
    pub const ALL: [Values; 5] =
        [Values::Uniform, Values::Normal, Values::LargeLogits, Values::EqualScores, Values::LargeValues];
}

/// The shape and options of a case, everything but the input values.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Batch or packed variable-length sequences.
    pub sequences: Sequences,
    /// Query heads (a multiple of `heads_k`).
    pub heads_q: usize,
    /// Key/value heads.
    pub heads_k: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Causal masking (bottom-right aligned).
    pub causal: bool,
    /// Softmax scale (`None`: `1/√d`); [`Values::LargeLogits`] replaces it.
    pub scale: Option<f32>,
    /// Tile-size override.
    pub tiles: Tiles,
    /// Split-KV override (`None`: the planner's choice).
    pub splits: Option<usize>,
    /// Sliding window (`Window::default()`: none).
    pub window: flashattn::Window,
    /// Logit softcap (`None`: none).
    pub softcap: Option<f32>,
    /// ALiBi slopes, one per query head (`None`: none).
    pub alibi_slopes: Option<Vec<f32>>,
    /// K/V cache lengths per batch entry (`None`: all of K/V).
    pub cache_seqlens: Option<Vec<u32>>,
    /// Memory order.
    pub layout: LayoutKind,
    /// Input distribution.
    pub values: Values,
}

impl Spec {
    /// A plain batched spec: `bshd`, uniform inputs, default scale and tiles, not causal.
    pub fn batch(batch: usize, seqlen_q: usize, seqlen_k: usize, heads: usize, head_dim: usize) -> Spec {
        Spec {
            sequences: Sequences::Batch { batch, seqlen_q, seqlen_k },
            heads_q: heads,
            heads_k: heads,
            head_dim,
            causal: false,
            scale: None,
            tiles: Tiles::default(),
            splits: None,
            window: flashattn::Window::default(),
            softcap: None,
            alibi_slopes: None,
            cache_seqlens: None,
            layout: LayoutKind::Bshd,
            values: Values::Uniform,
        }
    }

    /// The Q, K, V and O layouts.
    pub fn layouts(&self) -> [Layout; 4] {
        let (batch, sq, sk) = match &self.sequences {
            Sequences::Batch { batch, seqlen_q, seqlen_k } => (*batch, *seqlen_q, *seqlen_k),
            Sequences::VarLen { q_lens, k_lens, spare_q, spare_k } => {
                let total = |l: &[u32]| l.iter().map(|&x| x as usize).sum::<usize>();
                (1, total(q_lens) + spare_q, total(k_lens) + spare_k)
            }
        };
        let (d, hq, hk) = (self.head_dim, self.heads_q, self.heads_k);
        let make = |kind: LayoutKind, s: usize, h: usize| match kind {
            LayoutKind::Bshd => Layout::bshd(batch, s, h, d),
            LayoutKind::Bhsd => Layout::bhsd(batch, s, h, d),
            LayoutKind::Aligned => aligned_layout(batch, s, h, d),
            _ => padded_layout(batch, s, h, d),
        };
        match self.layout {
            LayoutKind::Mixed => [
                make(LayoutKind::Bhsd, sq, hq),
                make(LayoutKind::Padded, sk, hk),
                make(LayoutKind::Bshd, sk, hk),
                make(LayoutKind::Padded, sq, hq),
            ],
            kind => [make(kind, sq, hq), make(kind, sk, hk), make(kind, sk, hk), make(kind, sq, hq)],
        }
    }

    /// The attention options (method `Auto`); the scale is the spec's, which
    /// [`Values::LargeLogits`] replaces in [`Case::random`].
    pub fn options(&self) -> AttentionOptions {
        AttentionOptions {
            scale: self.scale,
            causal: self.causal,
            varlen: match &self.sequences {
                Sequences::Batch { .. } => None,
                Sequences::VarLen { q_lens, k_lens, .. } => {
                    Some(VarLen::from_lengths(q_lens, k_lens).expect("strategy lengths fit in u32"))
                }
            },
            method: flashattn::Method::Auto,
            tiles: self.tiles,
            splits: self.splits,
            window: self.window,
            deterministic: false,
            softcap: self.softcap,
            alibi_slopes: self.alibi_slopes.clone(),
            cache_seqlens: self.cache_seqlens.clone(),
            block_table: None,
        }
    }

    /// Multiply-adds of one pass over the problem (`Σ Nq·Nk · heads_q · d`), a cost measure for
    /// keeping random cases cheap.
    pub fn work(&self) -> usize {
        let pairs = match &self.sequences {
            Sequences::Batch { batch, seqlen_q, seqlen_k } => batch * seqlen_q * seqlen_k,
            Sequences::VarLen { q_lens, k_lens, .. } => {
                q_lens.iter().zip(k_lens).map(|(&a, &b)| a as usize * b as usize).sum()
            }
        };
        pairs * self.heads_q * self.head_dim
    }
}

/// `(batch, seqlen, heads, head_dim)` order with gaps between heads (3), tokens (5) and batch
/// entries (7), so that an implementation that ignores a stride reads or writes the gaps.
pub const fn padded_layout(batch: usize, seqlen: usize, heads: usize, head_dim: usize) -> Layout {
    let head_stride = head_dim + 3;
    let seq_stride = heads * head_stride + 5;
    Layout { batch, seqlen, heads, head_dim, batch_stride: seqlen * seq_stride + 7, seq_stride, head_stride }
}

/// `(batch, seqlen, heads, head_dim)` order whose strides are multiples of 8 elements, with a gap
/// of at least one element after each head (and 8 after each token and batch entry).
pub const fn aligned_layout(batch: usize, seqlen: usize, heads: usize, head_dim: usize) -> Layout {
    let head_stride = (head_dim + 1).div_ceil(8) * 8;
    let seq_stride = heads * head_stride + 8;
    Layout { batch, seqlen, heads, head_dim, batch_stride: seqlen * seq_stride + 8, seq_stride, head_stride }
}

/// Position of one output element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coord {
    /// Sequence (batch entry, or varlen sequence).
    pub seq: usize,
    /// Query within the sequence.
    pub t: usize,
    /// Batch index into the layout.
    pub b: usize,
    /// Token index into the layout.
    pub s: usize,
    /// Head.
    pub h: usize,
    /// Element of the head dimension (for output elements; 0 for log-sum-exp rows).
    pub x: usize,
}

/// Calls `f(coord, index)` for every output element `problem.o` addresses for some query of
/// some sequence (index into the O buffer).
pub fn for_each_output(problem: &Problem, mut f: impl FnMut(Coord, usize)) {
    for_each_row(problem, |c, _| {
        let base = problem.o().offset(c.b, c.s, c.h);
        for x in 0..problem.o().head_dim {
            f(Coord { x, ..c }, base + x);
        }
    });
}

/// Calls `f(coord, lse_index)` for every query row (sequence, head, query) of `problem`.
pub fn for_each_row(problem: &Problem, mut f: impl FnMut(Coord, usize)) {
    for seq in 0..problem.batch() {
        let sq = problem.sequence(seq);
        for h in 0..problem.q().heads {
            for t in 0..sq.len_q {
                let c = Coord { seq, t, b: sq.batch_index, s: sq.q_start + t, h, x: 0 };
                f(c, problem.lse_index(seq, h, t));
            }
        }
    }
}

/// Fills the addressed elements of a tensor with `value()`: for each `(batch index, first token,
/// tokens)` range, every head and element of those tokens. Everything else keeps what it had.
fn fill_rows<T: Element>(
    buf: &mut [T],
    layout: &Layout,
    rows: &[(usize, usize, usize)],
    mut value: impl FnMut() -> f32,
) {
    for &(b, start, len) in rows {
        for s in start..start + len {
            for h in 0..layout.heads {
                let o = layout.offset(b, s, h);
                for e in &mut buf[o..o + layout.head_dim] {
                    *e = T::from_f32(value());
                }
            }
        }
    }
}

/// One input value of the distribution `values` (amplitude `amp` for the uniform ones).
fn draw(rng: &mut impl Rng, values: Values, amp: f32) -> f32 {
    match values {
        Values::Normal => rng.sample::<f32, _>(StandardNormal),
        _ => rng.random_range(-amp..amp),
    }
}

/// A problem with its inputs and both references.
#[derive(Clone, Debug)]
pub struct Case<T> {
    /// The validated problem (layouts, scale, masking, sequences).
    pub problem: Problem,
    /// The options the problem was validated with (tiles, method) — what an implementation is
    /// called with.
    pub opts: AttentionOptions,
    /// What the inputs are (for reports).
    pub values: Values,
    /// Q buffer, addressed by `problem.q`; elements the layout does not address are NaN.
    pub q: Vec<T>,
    /// K buffer (NaN outside the layout and outside every sequence).
    pub k: Vec<T>,
    /// V buffer (NaN outside the layout and outside every sequence).
    pub v: Vec<T>,
    /// The f64 oracle's output and log-sum-exp.
    pub reference: Reference,
    /// Standard attention in `T` ([`oracle::baseline`]), laid out like the output.
    pub baseline: Vec<T>,
}

fn nan<T: Element>() -> T {
    T::from_f32(f32::NAN)
}

impl<T: Element> Case<T> {
    /// A case with fresh random inputs drawn from `rng` as `spec.values` says. Buffer elements
    /// that the layouts do not address (padding, packed tokens beyond the last sequence) are NaN,
    /// so an implementation that reads them produces NaN.
    ///
    /// Panics if the spec is invalid (the strategies in [`crate::strategy`] produce valid ones).
    pub fn random(rng: &mut impl Rng, spec: &Spec) -> Case<T> {
        let [lq, lk, lv, lo] = spec.layouts();
        let mut opts = spec.options();
        let d = spec.head_dim;
        if spec.values == Values::LargeLogits {
            opts.scale = Some(1000.0 / ((d as f32).sqrt() * 64.0 / 3.0));
        }
        // Token ranges (batch index, first token, tokens) of Q and of K/V that sequences address.
        // A K/V cache's entries address only their first `cache_seqlens[b]` keys: the slots
        // past them stay NaN, so an implementation that reads one shows it.
        let k_len = |b: usize| opts.cache_seqlens.as_ref().map_or(lk.seqlen, |l| l[b] as usize);
        let (q_rows, k_rows): (Vec<_>, Vec<_>) = match &opts.varlen {
            None => (0..lq.batch).map(|b| ((b, 0, lq.seqlen), (b, 0, k_len(b)))).unzip(),
            Some(vl) => (0..vl.batch())
                .map(|i| {
                    let (nq, nk) = vl.lens(i);
                    ((0, vl.cu_seqlens_q[i] as usize, nq), (0, vl.cu_seqlens_k[i] as usize, nk))
                })
                .unzip(),
        };
        let alloc = |l: &Layout| vec![nan::<T>(); l.required_len().expect("spec layouts do not overflow")];
        let (mut q, mut k, mut v) = (alloc(&lq), alloc(&lk), alloc(&lv));
        let qk_amp = if spec.values == Values::LargeLogits { 8.0 } else { 1.0 };
        let v_amp = if spec.values == Values::LargeValues { 1000.0 } else { 1.0 };
        fill_rows(&mut q, &lq, &q_rows, || draw(rng, spec.values, qk_amp));
        fill_rows(&mut v, &lv, &k_rows, || draw(rng, spec.values, v_amp));
        if spec.values == Values::EqualScores {
            // One key vector per (sequence, kv head), repeated over the sequence's tokens.
            for &(b, start, len) in &k_rows {
                for h in 0..lk.heads {
                    let key: Vec<T> = (0..d).map(|_| T::from_f32(draw(rng, spec.values, 1.0))).collect();
                    for s in start..start + len {
                        let o = lk.offset(b, s, h);
                        k[o..o + d].copy_from_slice(&key);
                    }
                }
            }
        } else {
            fill_rows(&mut k, &lk, &k_rows, || draw(rng, spec.values, qk_amp));
        }
        Case::from_data([lq, lk, lv, lo], opts, spec.values, q, k, v)
            .unwrap_or_else(|e| panic!("invalid case spec {spec:?}: {e}"))
    }

    /// A case from given inputs: validates the problem (the O buffer is taken to be exactly as
    /// long as its layout needs) and computes both references.
    pub fn from_data(
        layouts: [Layout; 4],
        opts: AttentionOptions,
        values: Values,
        q: Vec<T>,
        k: Vec<T>,
        v: Vec<T>,
    ) -> Result<Case<T>, InvalidInput> {
        let [lq, lk, lv, lo] = layouts;
        let o_len = lo.required_len().ok_or(InvalidInput::LayoutOverflow { tensor: "o" })?;
        let problem = Problem::new(lq, lk, lv, lo, [q.len(), k.len(), v.len(), o_len], &opts)?;
        let (reference, baseline) = oracle::references(&problem, &q, &k, &v);
        Ok(Case { problem, opts, values, q, k, v, reference, baseline })
    }

    /// The same problem and data with K and V moved into a pool of `pool_pages` pages read
    /// through `table` (a paged cache, [`AttentionOptions::block_table`]): entry `b`'s token `j`
    /// goes to row `j % page_size` of page `table.pages[b·pages_per_entry + j / page_size]`.
    /// Pages no entry names, and rows past each entry's keys, are NaN. The case must be a
    /// fixed-length batch whose K/V capacity is the table's (`pages_per_entry · page_size`).
    pub fn paged(&self, table: flashattn::BlockTable, pool_pages: usize) -> Result<Case<T>, InvalidInput> {
        let p = &self.problem;
        let (k, v) = (*p.k(), *p.v());
        let pool = Layout::bshd(pool_pages, table.page_size, k.heads, k.head_dim);
        let mut kp =
            vec![nan::<T>(); pool.required_len().ok_or(InvalidInput::LayoutOverflow { tensor: "k" })?];
        let mut vp = kp.clone();
        let d = k.head_dim;
        for s in p.sequences() {
            for j in 0..s.len_k {
                let (page, row) = table.locate(s.batch_index, j);
                for h in 0..k.heads {
                    let dst = pool.offset(page, row, h);
                    let (ks, vs) = (k.offset(s.batch_index, j, h), v.offset(s.batch_index, j, h));
                    kp[dst..dst + d].copy_from_slice(&self.k[ks..ks + d]);
                    vp[dst..dst + d].copy_from_slice(&self.v[vs..vs + d]);
                }
            }
        }
        let opts = AttentionOptions { block_table: Some(table), ..self.opts.clone() };
        Case::from_data([*p.q(), pool, pool, *p.o()], opts, self.values, self.q.clone(), kp, vp)
    }

    /// Elements of the output buffer.
    pub fn out_len(&self) -> usize {
        self.reference.out.len()
    }

    /// Elements of the log-sum-exp output.
    pub fn lse_len(&self) -> usize {
        self.problem.lse_len()
    }

    /// An output buffer filled with NaN, so that an element an implementation does not write
    /// fails the check.
    pub fn poisoned_out(&self) -> Vec<T> {
        vec![nan::<T>(); self.out_len()]
    }

    /// A log-sum-exp buffer filled with NaN.
    pub fn poisoned_lse(&self) -> Vec<f32> {
        vec![f32::NAN; self.lse_len()]
    }

    /// Runs [`flashattn::cpu::attention`] on this case into NaN-poisoned buffers and returns the
    /// output and log-sum-exp.
    pub fn run_cpu(&self) -> flashattn::Result<(Vec<T>, Vec<f32>)> {
        let mut out = self.poisoned_out();
        let mut lse = self.poisoned_lse();
        let p = &self.problem;
        flashattn::cpu::attention(
            HostTensor { data: &self.q, layout: *p.q() },
            HostTensor { data: &self.k, layout: *p.k() },
            HostTensor { data: &self.v, layout: *p.v() },
            HostTensorMut { data: &mut out, layout: *p.o() },
            Some(&mut lse),
            &self.opts,
        )?;
        Ok((out, lse))
    }
}

/// One line per fact: dtype, the four layouts (extents and strides), masking, sequences, heads,
/// scale, tiles, method, inputs.
impl<T: Element> fmt::Display for Case<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.problem;
        writeln!(f, "dtype {}, inputs {:?}", T::DTYPE, self.values)?;
        for (name, l) in [("q", &p.q()), ("k", &p.k()), ("v", &p.v()), ("o", &p.o())] {
            writeln!(
                f,
                "  {name}: batch {} seqlen {} heads {} head_dim {}; strides batch {} seq {} head {}",
                l.batch, l.seqlen, l.heads, l.head_dim, l.batch_stride, l.seq_stride, l.head_stride
            )?;
        }
        let attn = match p.k().heads {
            1 if p.q().heads > 1 => "MQA",
            _ if p.q().heads > p.k().heads => "GQA",
            _ => "MHA",
        };
        writeln!(
            f,
            "  causal {}, {attn} ({} q heads : {} kv heads), scale {}, tiles block_m {:?} block_n {:?}, method {}",
            p.causal(),
            p.q().heads,
            p.k().heads,
            p.scale(),
            self.opts.tiles.block_m,
            self.opts.tiles.block_n,
            self.opts.method
        )?;
        if !p.window().is_none() {
            let w = p.window();
            writeln!(f, "  window left {:?} right {:?}, splits {:?}", w.left, w.right, self.opts.splits)?;
        }
        if p.has_score_mod() {
            writeln!(f, "  softcap {:?}, alibi slopes {:?}", self.opts.softcap, self.opts.alibi_slopes)?;
        }
        match &p.varlen() {
            None => write!(f, "  batched: {} entries", p.q().batch),
            Some(vl) => {
                write!(f, "  varlen: cu_seqlens_q {:?}, cu_seqlens_k {:?}", vl.cu_seqlens_q, vl.cu_seqlens_k)
            }
        }
    }
}

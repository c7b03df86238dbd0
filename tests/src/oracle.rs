//! The two references every implementation is measured against, both written the standard way
//! (materialise the scores of a row, then softmax, then the weighted sum of V) and neither using
//! the online-softmax recurrence of `flashattn_kernels::softmax`, so that they check it
//! independently:
//!
//! - [`attention_f64`]: the oracle, in f64 from the exact input values. Its own rounding error
//!   (about 1e-16 relative) is negligible next to any f32, f16 or bf16 result.
//! - [`baseline`]: standard attention in the input precision `T` (scores and probabilities
//!   rounded to `T`, f32 accumulation), the low-precision reference of the tolerance rule in
//!   [`crate::tolerance`]: an implementation may be at most twice as far from the oracle as it.
//!
//! For problems too large to compute whole (the benchmark's), [`sample_rows`] picks query rows
//! within a FLOP budget and [`reference_rows`] computes both references on those rows only, with
//! the same row computations. [`baseline_materialized`] is the baseline in standard attention's
//! order, holding every score at once.

use flashattn::{Element, Problem};

use crate::case::{Coord, for_each_row};

/// The oracle's answer for one problem.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    /// The output, laid out as `problem.o` says (length `o.required_len()`); positions the
    /// layout does not address are 0.
    pub out: Vec<f64>,
    /// Natural-log log-sum-exp of the scaled scores, `ln Σ_j exp(scale·q·k_j)` over the visible
    /// keys, laid out as [`Problem::lse_index`] says; `-inf` for a row that sees no key (and for
    /// positions no row addresses).
    pub lse: Vec<f64>,
    /// Per log-sum-exp row: the largest `scale·Σ_i |q_i·k_ji|` over the visible keys `j` (0 for a
    /// fully masked row). This bounds the magnitude of every scaled score and of every partial
    /// sum in its dot products, so it sets the size of their rounding errors in any precision.
    pub row_magnitude: Vec<f64>,
    /// Per log-sum-exp row: how many keys the row sees.
    pub row_keys: Vec<usize>,
}

/// Widens a buffer of any element type to f64, exactly.
pub fn widen<T: Element>(x: &[T]) -> Vec<f64> {
    x.iter().map(|&e| f64::from(e.to_f32())).collect()
}

/// Panics unless the buffers cover the layouts of `problem` (a test bug, not an input error).
fn assert_covers(problem: &Problem, lens: [usize; 3]) {
    for ((name, layout), len) in
        [("q", &problem.q()), ("k", &problem.k()), ("v", &problem.v())].into_iter().zip(lens)
    {
        let need = layout.required_len().expect("a validated layout does not overflow");
        assert!(len >= need, "oracle: {name} has {len} elements, its layout needs {need}");
    }
}

/// What the oracle found for one query row besides its output.
struct RowFacts {
    lse: f64,
    magnitude: f64,
    keys: usize,
}

/// The score modifiers in f64, written from their definition (FlashAttention-2's softcap and
/// ALiBi), independently of the library's [`flashattn::ScoreMod`]: for scaled score `s` of query
/// `t` and key `j` of head `h`, `(logit, ∂logit/∂s)` with
/// `logit = c·tanh(s/c) − slope_h·|t + len_k − len_q − j|`.
pub fn logit_f64(
    problem: &Problem,
    h: usize,
    t: usize,
    j: usize,
    len_q: usize,
    len_k: usize,
    s: f64,
) -> (f64, f64) {
    let sm = problem.score_mod(h);
    let (c, slope) = (f64::from(sm.softcap), f64::from(sm.alibi_slope));
    let (capped, deriv) = if c > 0.0 {
        let th = (s / c).tanh();
        (c * th, 1.0 - th * th)
    } else {
        (s, 1.0)
    };
    let dist = (t as f64 + len_k as f64 - len_q as f64 - j as f64).abs();
    (capped - slope * dist, deriv)
}

/// Reusable buffers of [`oracle_row`].
#[derive(Default)]
struct OracleScratch {
    q_row: Vec<f64>,
    /// (key index, scaled score) of the visible keys of one row.
    scores: Vec<(usize, f64)>,
}

/// The oracle on one query row `c`: materialise the scaled scores `scale·q_t·k_j` of the visible
/// keys (in f64, from the inputs widened exactly by `wide`), subtract their maximum,
/// exponentiate, normalise, and take the weighted sum of the value rows into `o_row` (`d`
/// values; 0 for a row that sees no key, whose log-sum-exp is `-inf`).
fn oracle_row<X: Copy>(
    problem: &Problem,
    [q, k, v]: [&[X]; 3],
    wide: impl Fn(X) -> f64,
    c: &Coord,
    scratch: &mut OracleScratch,
    o_row: &mut [f64],
) -> RowFacts {
    let d = problem.q().head_dim;
    let scale = f64::from(problem.scale());
    let seq = problem.sequence(c.seq);
    let (b, t, kh) = (c.b, c.t, c.h / problem.group_size());
    let qo = problem.q().offset(b, c.s, c.h);
    scratch.q_row.clear();
    scratch.q_row.extend(q[qo..qo + d].iter().map(|&x| wide(x)));
    scratch.scores.clear();
    let mut magnitude = 0.0f64;
    for j in 0..seq.len_k {
        if !problem.visible(t, j, seq.len_q, seq.len_k) {
            continue;
        }
        let ko = problem.kv_offset(false, b, seq.k_start + j, kh);
        let k_row = &k[ko..ko + d];
        // Sequential f64 dot products: Σ q_i·k_i and Σ |q_i·k_i|.
        let dot: f64 = scratch.q_row.iter().zip(k_row).map(|(x, &y)| x * wide(y)).sum();
        let dot_abs: f64 = scratch.q_row.iter().zip(k_row).map(|(x, &y)| (x * wide(y)).abs()).sum();
        let (logit, _) = logit_f64(problem, c.h, t, j, seq.len_q, seq.len_k, scale * dot);
        scratch.scores.push((j, logit));
        // With score modifiers the f32 exponent is formed at the logit's size too.
        magnitude =
            magnitude.max(scale * dot_abs).max(if problem.has_score_mod() { logit.abs() } else { 0.0 });
    }
    o_row.fill(0.0);
    let keys = scratch.scores.len();
    if keys == 0 {
        return RowFacts { lse: f64::NEG_INFINITY, magnitude, keys };
    }
    let max = scratch.scores.iter().fold(f64::NEG_INFINITY, |m, &(_, s)| m.max(s));
    let mut norm = 0.0f64;
    for &(j, s) in &scratch.scores {
        let w = (s - max).exp();
        norm += w;
        let vo = problem.kv_offset(true, b, seq.k_start + j, kh);
        for (o, &x) in o_row.iter_mut().zip(&v[vo..vo + d]) {
            *o += w * wide(x);
        }
    }
    o_row.iter_mut().for_each(|o| *o /= norm);
    RowFacts { lse: max + norm.ln(), magnitude, keys }
}

/// Standard attention in f64: for every sequence, query head `h` (reading key/value head
/// `h / group_size`) and query `t`, materialise the scaled scores `scale·q_t·k_j` of the visible
/// keys, subtract their maximum, exponentiate, normalise, and take the weighted sum of the value
/// rows. Rows that see no key get output 0 and log-sum-exp `-inf`.
///
/// `q`, `k`, `v` are the input buffers (widened with [`widen`]) addressed by `problem.q`,
/// `problem.k`, `problem.v`; the scale is `problem.scale` (the f32 value the implementations
/// use), taken exactly.
pub fn attention_f64(problem: &Problem, q: &[f64], k: &[f64], v: &[f64]) -> Reference {
    assert_covers(problem, [q.len(), k.len(), v.len()]);
    let d = problem.q().head_dim;
    let out_len = problem.o().required_len().expect("a validated layout does not overflow");
    let mut out = vec![0.0f64; out_len];
    let mut lse = vec![f64::NEG_INFINITY; problem.lse_len()];
    let mut row_magnitude = vec![0.0f64; problem.lse_len()];
    let mut row_keys = vec![0usize; problem.lse_len()];
    let mut scratch = OracleScratch::default();
    for_each_row(problem, |c, row| {
        let oo = problem.o().offset(c.b, c.s, c.h);
        let facts = oracle_row(problem, [q, k, v], |x| x, &c, &mut scratch, &mut out[oo..oo + d]);
        (lse[row], row_magnitude[row], row_keys[row]) = (facts.lse, facts.magnitude, facts.keys);
    });
    Reference { out, lse, row_magnitude, row_keys }
}

/// Sequential f32 dot product of two rows widened from `T`.
fn dot_f32<T: Element>(a: &[T], b: &[T]) -> f32 {
    a.iter().zip(b).fold(0.0f32, |acc, (x, y)| acc + x.to_f32() * y.to_f32())
}

/// Rounds an f32 to `T` and back.
fn round<T: Element>(x: f32) -> f32 {
    T::from_f32(x).to_f32()
}

/// The first half of the baseline on row `c`: its scaled scores `scale·round_T(q·k_j)` into
/// `scores` (one per key of the sequence; `-inf` for a masked key).
fn baseline_scores<T: Element>(problem: &Problem, q: &[T], k: &[T], c: &Coord, scores: &mut [f32]) {
    let d = problem.q().head_dim;
    let seq = problem.sequence(c.seq);
    let kh = c.h / problem.group_size();
    let qo = problem.q().offset(c.b, c.s, c.h);
    let q_row = &q[qo..qo + d];
    let sm = problem.score_mod(c.h);
    for (j, s) in scores.iter_mut().enumerate() {
        *s = if problem.visible(c.t, j, seq.len_q, seq.len_k) {
            let ko = problem.kv_offset(false, c.b, seq.k_start + j, kh);
            let scaled = problem.scale() * round::<T>(dot_f32(q_row, &k[ko..ko + d]));
            if problem.has_score_mod() {
                // The modifiers in the input precision, as PyTorch applies them to the scores.
                round::<T>(sm.logit(scaled, c.t as u32, j as u32, seq.len_q as u32, seq.len_k as u32))
            } else {
                scaled
            }
        } else {
            f32::NEG_INFINITY
        };
    }
}

/// The second half of the baseline on row `c`: the softmax of its `scores` in f32 (max
/// subtracted), `P = round_T(p)`, and `round_T(Σ_j P_j·v_j)` into `out_row` (0 when every key is
/// masked). `scores` is overwritten; `acc` is scratch.
fn baseline_finish<T: Element>(
    problem: &Problem,
    v: &[T],
    c: &Coord,
    scores: &mut [f32],
    acc: &mut Vec<f32>,
    out_row: &mut [T],
) {
    let d = problem.q().head_dim;
    let seq = problem.sequence(c.seq);
    let kh = c.h / problem.group_size();
    let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
    if max == f32::NEG_INFINITY {
        out_row.fill(T::from_f32(0.0));
        return;
    }
    let mut norm = 0.0f32;
    for s in scores.iter_mut().filter(|s| **s != f32::NEG_INFINITY) {
        *s = (*s - max).exp();
        norm += *s;
    }
    acc.clear();
    acc.resize(d, 0.0);
    for (j, &e) in scores.iter().enumerate().filter(|(_, s)| **s != f32::NEG_INFINITY) {
        let p = round::<T>(e / norm);
        let vo = problem.kv_offset(true, c.b, seq.k_start + j, kh);
        for (o, x) in acc.iter_mut().zip(&v[vo..vo + d]) {
            *o += p * x.to_f32();
        }
    }
    for (dst, &o) in out_row.iter_mut().zip(acc.iter()) {
        *dst = T::from_f32(o);
    }
}

/// Standard attention in the input precision `T`, as a framework computes it without a fused
/// kernel: `S = round_T(q·k)` (f32 dot products), softmax of `scale·S` in f32 (max subtracted),
/// `P = round_T(p)`, `O = round_T(Σ_j P_j·v_j)` (f32 accumulation). Masked keys are left out;
/// rows that see no key get 0. The output is laid out as `problem.o` says; positions the layout
/// does not address are 0.
///
/// This is the low-precision reference of the tolerance rule: its distance from the oracle is the
/// error that plain attention in `T` makes, which a correct tiled implementation should not
/// exceed by more than a small factor.
pub fn baseline<T: Element>(problem: &Problem, q: &[T], k: &[T], v: &[T]) -> Vec<T> {
    assert_covers(problem, [q.len(), k.len(), v.len()]);
    let d = problem.q().head_dim;
    let out_len = problem.o().required_len().expect("a validated layout does not overflow");
    let mut out = vec![T::from_f32(0.0); out_len];
    let (mut scores, mut acc) = (Vec::new(), Vec::new());
    for_each_row(problem, |c, _| {
        scores.clear();
        scores.resize(problem.sequence(c.seq).len_k, 0.0f32);
        baseline_scores(problem, q, k, &c, &mut scores);
        let oo = problem.o().offset(c.b, c.s, c.h);
        baseline_finish(problem, v, &c, &mut scores, &mut acc, &mut out[oo..oo + d]);
    });
    out
}

/// [`baseline`] computed in standard attention's order, with standard attention's memory: first
/// every score of every row (`S`, f32, `heads·Σ Nq·Nk` of them, held at once), then the softmax of
/// each row in place and `O = P·V`, written into the positions of `out` (laid out as
/// `problem.o`) that the layout addresses, which then hold [`baseline`]'s values. Returns the
/// bytes of `S`. (The benchmark times this as CPU standard attention.)
pub fn baseline_materialized<T: Element>(problem: &Problem, q: &[T], k: &[T], v: &[T], out: &mut [T]) -> u64 {
    assert_covers(problem, [q.len(), k.len(), v.len()]);
    let d = problem.q().head_dim;
    let total: usize = problem.sequences().map(|s| s.len_q * s.len_k).sum::<usize>() * problem.q().heads;
    let mut s = vec![0.0f32; total];
    let mut at = 0;
    for_each_row(problem, |c, _| {
        let n = problem.sequence(c.seq).len_k;
        baseline_scores(problem, q, k, &c, &mut s[at..at + n]);
        at += n;
    });
    let (mut at, mut acc) = (0, Vec::new());
    for_each_row(problem, |c, _| {
        let n = problem.sequence(c.seq).len_k;
        let oo = problem.o().offset(c.b, c.s, c.h);
        baseline_finish(problem, v, &c, &mut s[at..at + n], &mut acc, &mut out[oo..oo + d]);
        at += n;
    });
    4 * total as u64
}

/// Which query rows a sampled check covers: see [`sample_rows`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowSample {
    /// The rows (`x` is 0), in order.
    pub rows: Vec<Coord>,
    /// Whether every row of the chosen `(sequence, head)` slices is in `rows`.
    pub complete: bool,
}

/// Query rows for checking a problem too large for [`attention_f64`] within about `budget` FLOPs
/// of oracle work (`4·Nk·d` per row): the first sequence's first head and the last sequence's
/// last head, every row of both when that fits, else evenly spaced rows of each (always the
/// first and the last; at least 8).
pub fn sample_rows(problem: &Problem, budget: f64) -> RowSample {
    let (batch, heads) = (problem.batch(), problem.q().heads);
    let mut picks = if batch == 0 || heads == 0 { vec![] } else { vec![(0, 0)] };
    if batch * heads > 1 {
        picks.push((batch - 1, heads - 1));
    }
    let d = problem.q().head_dim as f64;
    let row_cost = |i: usize| 4.0 * problem.sequence(i).len_k.max(1) as f64 * d;
    let full: f64 = picks.iter().map(|&(i, _)| problem.sequence(i).len_q as f64 * row_cost(i)).sum();
    let complete = full <= budget;
    let mut rows = Vec::new();
    for (i, h) in picks {
        let seq = problem.sequence(i);
        let n = seq.len_q;
        let ts: Vec<usize> = if complete || n <= 8 {
            (0..n).collect()
        } else {
            let r = ((budget / 2.0 / row_cost(i)) as usize).clamp(8, n);
            let mut v: Vec<usize> =
                (0..r).map(|j| (j as f64 * (n - 1) as f64 / (r - 1) as f64).round() as usize).collect();
            v.dedup();
            v
        };
        rows.extend(ts.into_iter().map(|t| Coord {
            seq: i,
            t,
            b: seq.batch_index,
            s: seq.q_start + t,
            h,
            x: 0,
        }));
    }
    RowSample { rows, complete }
}

/// The oracle and the baseline on some query rows only (a problem too large for
/// [`attention_f64`] and [`baseline`]): what [`crate::tolerance::output_errors_rows`] measures an
/// output against.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsReference<T> {
    /// The rows, in order.
    pub rows: Vec<Coord>,
    /// The oracle's outputs, `d` per row, row after row.
    pub out: Vec<f64>,
    /// The oracle's log-sum-exp per row (as [`Reference::lse`]).
    pub lse: Vec<f64>,
    /// Per row, as [`Reference::row_magnitude`].
    pub row_magnitude: Vec<f64>,
    /// Per row, as [`Reference::row_keys`].
    pub row_keys: Vec<usize>,
    /// [`baseline`]'s outputs on the same rows, `d` per row.
    pub baseline: Vec<T>,
}

/// The oracle ([`attention_f64`]'s row computation, on the inputs widened exactly) and the
/// baseline ([`baseline`]'s) on `rows` of `problem`, spread over the machine's cores.
pub fn reference_rows<T: Element>(
    problem: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    rows: &[Coord],
) -> RowsReference<T> {
    assert_covers(problem, [q.len(), k.len(), v.len()]);
    let d = problem.q().head_dim;
    let n = rows.len();
    let mut r = RowsReference {
        rows: rows.to_vec(),
        out: vec![0.0; n * d],
        lse: vec![0.0; n],
        row_magnitude: vec![0.0; n],
        row_keys: vec![0; n],
        baseline: vec![T::from_f32(0.0); n * d],
    };
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, 32);
    let per = n.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let chunks = rows
            .chunks(per)
            .zip(r.out.chunks_mut(per * d.max(1)))
            .zip(r.baseline.chunks_mut(per * d.max(1)))
            .zip(r.lse.chunks_mut(per).zip(r.row_magnitude.chunks_mut(per)).zip(r.row_keys.chunks_mut(per)));
        for (((coords, out), base), ((lse, magnitude), keys)) in chunks {
            scope.spawn(move || {
                let mut scratch = OracleScratch::default();
                let (mut scores, mut acc) = (Vec::new(), Vec::new());
                for (i, c) in coords.iter().enumerate() {
                    let o_row = &mut out[i * d..(i + 1) * d];
                    let f = oracle_row(problem, [q, k, v], |x| f64::from(x.to_f32()), c, &mut scratch, o_row);
                    (lse[i], magnitude[i], keys[i]) = (f.lse, f.magnitude, f.keys);
                    scores.clear();
                    scores.resize(problem.sequence(c.seq).len_k, 0.0f32);
                    baseline_scores(problem, q, k, c, &mut scores);
                    baseline_finish(problem, v, c, &mut scores, &mut acc, &mut base[i * d..(i + 1) * d]);
                }
            });
        }
    });
    r
}

/// [`attention_f64`] and [`baseline`] of the whole problem at once, their rows spread over the
/// machine's cores ([`reference_rows`]'s row computations, so bit-identical to the two
/// sequential functions): what a test case needs, in a fraction of the time on a many-core
/// machine (the GPU suite spends most of its time here).
pub fn references<T: Element>(problem: &Problem, q: &[T], k: &[T], v: &[T]) -> (Reference, Vec<T>) {
    let d = problem.q().head_dim;
    let (mut coords, mut lse_rows) = (Vec::new(), Vec::new());
    for_each_row(problem, |c, row| {
        coords.push(c);
        lse_rows.push(row);
    });
    let rows = reference_rows(problem, q, k, v, &coords);
    let out_len = problem.o().required_len().expect("a validated layout does not overflow");
    let mut reference = Reference {
        out: vec![0.0f64; out_len],
        lse: vec![f64::NEG_INFINITY; problem.lse_len()],
        row_magnitude: vec![0.0f64; problem.lse_len()],
        row_keys: vec![0usize; problem.lse_len()],
    };
    let mut baseline = vec![T::from_f32(0.0); out_len];
    for (i, (c, &row)) in coords.iter().zip(&lse_rows).enumerate() {
        let oo = problem.o().offset(c.b, c.s, c.h);
        reference.out[oo..oo + d].copy_from_slice(&rows.out[i * d..(i + 1) * d]);
        baseline[oo..oo + d].copy_from_slice(&rows.baseline[i * d..(i + 1) * d]);
        reference.lse[row] = rows.lse[i];
        reference.row_magnitude[row] = rows.row_magnitude[i];
        reference.row_keys[row] = rows.row_keys[i];
    }
    (reference, baseline)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashattn::{AttentionOptions, Layout, VarLen, bf16};

    fn problem(q: Layout, k: Layout, opts: &AttentionOptions) -> Problem {
        let lens = [q, k, k, q].map(|l| l.required_len().unwrap());
        Problem::new(q, k, k, q, lens, opts).unwrap()
    }

    #[test]
    fn one_key_returns_its_value_and_its_logit() {
        let l = Layout::bshd(1, 1, 1, 2);
        let p = problem(l, l, &AttentionOptions { scale: Some(0.5), ..Default::default() });
        let r = attention_f64(&p, &[1.0, 2.0], &[3.0, -1.0], &[0.25, -4.0]);
        assert_eq!(r.out, vec![0.25, -4.0]);
        assert_eq!(r.lse, vec![0.5]);
        assert_eq!(r.row_magnitude, vec![2.5]);
    }

    #[test]
    fn two_keys_by_hand() {
        // Scores 0 and ln 3 → weights 1/4, 3/4; lse = ln(1 + 3).
        let l = Layout::bshd(1, 1, 1, 1);
        let lk = Layout::bshd(1, 2, 1, 1);
        let s = 3.0f64.ln();
        let p = problem(l, lk, &AttentionOptions { scale: Some(1.0), ..Default::default() });
        let q = [1.0];
        let k = [0.0, s as f32 as f64];
        let r = attention_f64(&p, &q, &k, &[4.0, 8.0]);
        let w = (s as f32 as f64).exp();
        assert!((r.out[0] - (4.0 + 8.0 * w) / (1.0 + w)).abs() < 1e-12);
        assert!((r.lse[0] - (1.0 + w).ln()).abs() < 1e-12);
    }

    #[test]
    fn causal_bottom_right_and_fully_masked_rows() {
        // 3 queries, 2 keys, causal: query t sees key j iff j + 3 <= t + 2, so row 0 sees nothing,
        // row 1 sees key 0, row 2 sees keys 0 and 1.
        let lq = Layout::bshd(1, 3, 1, 1);
        let lk = Layout::bshd(1, 2, 1, 1);
        let p = problem(lq, lk, &AttentionOptions { scale: Some(1.0), causal: true, ..Default::default() });
        let r = attention_f64(&p, &[1.0, 1.0, 1.0], &[0.0, 0.0], &[2.0, 4.0]);
        assert_eq!(r.out, vec![0.0, 2.0, 3.0]);
        assert_eq!(r.lse[0], f64::NEG_INFINITY);
        assert_eq!(r.lse[1], 0.0);
        assert!((r.lse[2] - 2.0f64.ln()).abs() < 1e-15);
        assert_eq!(r.row_keys, vec![0, 1, 2]);
        let b = baseline::<f32>(&p, &[1.0; 3], &[0.0; 2], &[2.0, 4.0]);
        assert_eq!(b, vec![0.0, 2.0, 3.0]);
    }

    #[test]
    fn varlen_and_gqa_address_the_right_rows() {
        // Two sequences (q lens 1, 2; k lens 2, 1), 2 query heads sharing one kv head.
        let vl = VarLen::from_lengths(&[1, 2], &[2, 1]).unwrap();
        let lq = Layout::packed(3, 2, 1);
        let lk = Layout::packed(3, 1, 1);
        let p =
            problem(lq, lk, &AttentionOptions { scale: Some(1.0), varlen: Some(vl), ..Default::default() });
        let q = [1.0; 6];
        let k = [0.0; 3];
        let v = [1.0, 3.0, 10.0];
        let r = attention_f64(&p, &q, &k, &v);
        // Sequence 0 averages v[0], v[1]; sequence 1 sees only v[2]; both heads alike.
        assert_eq!(r.out, vec![2.0, 2.0, 10.0, 10.0, 10.0, 10.0]);
        // lse is (heads, total_q): head 0 rows 0..3, head 1 rows 3..6.
        let ln2 = 2.0f64.ln();
        assert_eq!(r.lse, vec![ln2, 0.0, 0.0, ln2, 0.0, 0.0]);
    }

    fn every_row(p: &Problem) -> Vec<Coord> {
        let mut rows = Vec::new();
        for_each_row(p, |c, _| rows.push(c));
        rows
    }

    fn ragged_case() -> crate::Case<bf16> {
        use crate::case::{LayoutKind, Sequences, Spec};
        use rand::SeedableRng;
        let spec = Spec {
            sequences: Sequences::VarLen {
                q_lens: vec![3, 0, 5],
                k_lens: vec![4, 2, 6],
                spare_q: 1,
                spare_k: 2,
            },
            heads_q: 4,
            heads_k: 2,
            causal: true,
            layout: LayoutKind::Padded,
            ..Spec::batch(1, 1, 1, 1, 8)
        };
        crate::Case::random(&mut rand::rngs::StdRng::seed_from_u64(7), &spec)
    }

    #[test]
    fn rows_reference_is_the_whole_references_on_those_rows() {
        let case = ragged_case();
        let p = &case.problem;
        let rows = every_row(p);
        let r = reference_rows(p, &case.q, &case.k, &case.v, &rows);
        let d = p.q().head_dim;
        assert_eq!(r.rows, rows);
        for (i, c) in rows.iter().enumerate() {
            let oo = p.o().offset(c.b, c.s, c.h);
            let row = p.lse_index(c.seq, c.h, c.t);
            assert_eq!(r.out[i * d..(i + 1) * d], case.reference.out[oo..oo + d]);
            assert_eq!(r.baseline[i * d..(i + 1) * d], case.baseline[oo..oo + d]);
            assert_eq!(
                (r.lse[i], r.row_magnitude[i], r.row_keys[i]),
                (case.reference.lse[row], case.reference.row_magnitude[row], case.reference.row_keys[row])
            );
        }
    }

    #[test]
    fn parallel_references_equal_the_sequential_ones() {
        // (Cases build theirs with `references`; the two sequential functions are the definition.)
        let case = ragged_case();
        let p = &case.problem;
        let (r, b) = references(p, &case.q, &case.k, &case.v);
        assert_eq!(r, attention_f64(p, &widen(&case.q), &widen(&case.k), &widen(&case.v)));
        assert_eq!(b, baseline(p, &case.q, &case.k, &case.v));
    }

    #[test]
    fn materialized_baseline_equals_the_baseline() {
        let case = ragged_case();
        let p = &case.problem;
        let mut out = vec![bf16::ZERO; case.out_len()];
        let bytes = baseline_materialized(p, &case.q, &case.k, &case.v, &mut out);
        assert_eq!(out, case.baseline);
        // 4 heads × (3·4 + 0·2 + 5·6) scores of 4 bytes.
        assert_eq!(bytes, 4 * 4 * (12 + 30));
    }

    #[test]
    fn samples_are_whole_slices_when_cheap_and_spaced_rows_when_not() {
        let opts = AttentionOptions::default();
        let s = sample_rows(&problem(Layout::bshd(2, 64, 4, 32), Layout::bshd(2, 64, 4, 32), &opts), 1e9);
        assert!(s.complete);
        assert_eq!(s.rows.len(), 128);
        assert_eq!((s.rows[64].seq, s.rows[64].h, s.rows[64].t), (1, 3, 0));
        let big = Layout::bshd(1, 4096, 1, 128);
        let causal = AttentionOptions { causal: true, ..Default::default() };
        let s = sample_rows(&problem(big, big, &causal), 1e8);
        assert!(!s.complete);
        assert_eq!((s.rows[0].t, s.rows.last().unwrap().t), (0, 4095));
        assert!(s.rows.len() >= 8 && s.rows.len() < 4096);
        assert!(s.rows.iter().all(|c| (c.seq, c.h, c.s) == (0, 0, c.t)));
    }
}

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

use flashattn::{Element, Problem};

use crate::case::for_each_row;

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

/// Sequential f64 dot product.
fn dot_f64(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Sum of `|a_i·b_i|` in f64.
fn dot_abs_f64(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x * y).abs()).sum()
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
    let group = problem.group_size();
    let scale = f64::from(problem.scale());
    let out_len = problem.o().required_len().expect("a validated layout does not overflow");
    let mut out = vec![0.0f64; out_len];
    let mut lse = vec![f64::NEG_INFINITY; problem.lse_len()];
    let mut row_magnitude = vec![0.0f64; problem.lse_len()];
    let mut row_keys = vec![0usize; problem.lse_len()];

    // (key index, scaled score) of the visible keys of one row.
    let mut scores: Vec<(usize, f64)> = Vec::new();
    let mut o_row = vec![0.0f64; d];
    for_each_row(problem, |c, row| {
        let seq = problem.sequence(c.seq);
        let (b, t, h, kh) = (c.b, c.t, c.h, c.h / group);
        let qo = problem.q().offset(b, c.s, h);
        let q_row = &q[qo..qo + d];
        scores.clear();
        let mut magnitude = 0.0f64;
        for j in 0..seq.len_k {
            if !problem.visible(t, j, seq.len_q, seq.len_k) {
                continue;
            }
            let ko = problem.k().offset(b, seq.k_start + j, kh);
            let k_row = &k[ko..ko + d];
            scores.push((j, scale * dot_f64(q_row, k_row)));
            magnitude = magnitude.max(scale * dot_abs_f64(q_row, k_row));
        }
        row_magnitude[row] = magnitude;
        row_keys[row] = scores.len();
        let oo = problem.o().offset(b, c.s, h);
        if scores.is_empty() {
            out[oo..oo + d].fill(0.0);
            lse[row] = f64::NEG_INFINITY;
            return;
        }
        let max = scores.iter().fold(f64::NEG_INFINITY, |m, &(_, s)| m.max(s));
        let mut norm = 0.0f64;
        o_row.fill(0.0);
        for &(j, s) in &scores {
            let w = (s - max).exp();
            norm += w;
            let vo = problem.v().offset(b, seq.k_start + j, kh);
            for (o, &x) in o_row.iter_mut().zip(&v[vo..vo + d]) {
                *o += w * x;
            }
        }
        for (dst, &o) in out[oo..oo + d].iter_mut().zip(&o_row) {
            *dst = o / norm;
        }
        lse[row] = max + norm.ln();
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
    let group = problem.group_size();
    let scale = problem.scale();
    let out_len = problem.o().required_len().expect("a validated layout does not overflow");
    let mut out = vec![T::from_f32(0.0); out_len];

    let mut scores: Vec<(usize, f32)> = Vec::new();
    let mut o_row = vec![0.0f32; d];
    for_each_row(problem, |c, _| {
        let seq = problem.sequence(c.seq);
        let (b, t, h, kh) = (c.b, c.t, c.h, c.h / group);
        let qo = problem.q().offset(b, c.s, h);
        let q_row = &q[qo..qo + d];
        scores.clear();
        for j in 0..seq.len_k {
            if problem.visible(t, j, seq.len_q, seq.len_k) {
                let ko = problem.k().offset(b, seq.k_start + j, kh);
                let s = round::<T>(dot_f32(q_row, &k[ko..ko + d]));
                scores.push((j, scale * s));
            }
        }
        let oo = problem.o().offset(b, c.s, h);
        if scores.is_empty() {
            out[oo..oo + d].fill(T::from_f32(0.0));
            return;
        }
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &(_, s)| m.max(s));
        let mut norm = 0.0f32;
        for (_, s) in scores.iter_mut() {
            *s = (*s - max).exp();
            norm += *s;
        }
        o_row.fill(0.0);
        for &(j, e) in &scores {
            let p = round::<T>(e / norm);
            let vo = problem.v().offset(b, seq.k_start + j, kh);
            for (o, x) in o_row.iter_mut().zip(&v[vo..vo + d]) {
                *o += p * x.to_f32();
            }
        }
        for (dst, &o) in out[oo..oo + d].iter_mut().zip(&o_row) {
            *dst = T::from_f32(o);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashattn::{AttentionOptions, Layout, VarLen};

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
}

//! The f64 reference the error columns are measured against, and the comparisons.
//!
//! The oracle is the textbook formula in f64, independent of the library's online softmax:
//! `o = Σ_j softmax(scale·q·k_j) v_j` over the keys the mask lets the query see (a query that
//! sees no key gets 0, as the library defines). It runs on one or two `(sequence, head)` slices:
//! whole when that fits the FLOP budget, else on evenly spaced query rows (always the first and
//! the last).

use flashattn::{Element, Problem};

/// Which query rows of which `(sequence, head)` slices the oracle checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checks {
    /// `(sequence, head, rows)`.
    pub slices: Vec<(usize, usize, Vec<usize>)>,
    /// Whether every row of every listed slice is checked.
    pub complete: bool,
}

impl Checks {
    /// Query rows checked in all.
    pub fn rows(&self) -> usize {
        self.slices.iter().map(|s| s.2.len()).sum()
    }
}

/// Picks the slices (the first sequence's first head, the last sequence's last head) and rows so
/// that the oracle costs at most about `budget` FLOPs (`4·Nk·d` per row).
pub fn plan(problem: &Problem, budget: f64) -> Checks {
    let last_seq = problem.batch().saturating_sub(1);
    let last_head = problem.q.heads.saturating_sub(1);
    let mut picks = vec![(0, 0)];
    if (last_seq, last_head) != (0, 0) {
        picks.push((last_seq, last_head));
    }
    let d = problem.q.head_dim as f64;
    let row_cost = |i: usize| 4.0 * problem.sequence(i).len_k.max(1) as f64 * d;
    let full: f64 = picks.iter().map(|&(i, _)| problem.sequence(i).len_q as f64 * row_cost(i)).sum();
    let complete = full <= budget;
    let slices = picks
        .into_iter()
        .map(|(i, h)| {
            let len_q = problem.sequence(i).len_q;
            let rows = if complete {
                (0..len_q).collect()
            } else {
                let r = ((budget / 2.0 / row_cost(i)) as usize).clamp(8, len_q.max(1));
                spaced(len_q, r)
            };
            (i, h, rows)
        })
        .collect();
    Checks { slices, complete }
}

/// `r` indices evenly spaced over `0..n`, including both ends.
fn spaced(n: usize, r: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    if r >= n || r < 2 {
        return (0..n.min(r.max(1))).collect();
    }
    let mut v: Vec<usize> =
        (0..r).map(|i| (i as f64 * (n - 1) as f64 / (r - 1) as f64).round() as usize).collect();
    v.dedup();
    v
}

/// The f64 outputs of `rows` of sequence `seq`, head `head`: `rows.len() × d` values.
pub fn reference<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    seq: usize,
    head: usize,
    rows: &[usize],
) -> Vec<f64> {
    let d = p.q.head_dim;
    let mut out = vec![0.0f64; rows.len() * d];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 32);
    let per = rows.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (chunk_rows, chunk_out) in rows.chunks(per).zip(out.chunks_mut(per * d)) {
            s.spawn(move || {
                let mut scores = Vec::new();
                for (&t, o) in chunk_rows.iter().zip(chunk_out.chunks_mut(d)) {
                    row(p, q, k, v, seq, head, t, &mut scores, o);
                }
            });
        }
    });
    out
}

#[allow(clippy::too_many_arguments)]
fn row<T: Element>(
    p: &Problem,
    q: &[T],
    k: &[T],
    v: &[T],
    seq: usize,
    head: usize,
    t: usize,
    scores: &mut Vec<f64>,
    out: &mut [f64],
) {
    let s = p.sequence(seq);
    let d = p.q.head_dim;
    let kh = head / p.group_size();
    let qo = p.q.offset(s.batch_index, s.q_start + t, head);
    let qrow: Vec<f64> = q[qo..qo + d].iter().map(|x| x.to_f32() as f64).collect();
    scores.clear();
    let mut max = f64::NEG_INFINITY;
    for j in 0..s.len_k {
        if !p.visible(t, j, s.len_q, s.len_k) {
            scores.push(f64::NEG_INFINITY);
            continue;
        }
        let ko = p.k.offset(s.batch_index, s.k_start + j, kh);
        let dot: f64 = qrow.iter().zip(&k[ko..ko + d]).map(|(a, b)| a * b.to_f32() as f64).sum();
        let sc = dot * p.scale as f64;
        max = max.max(sc);
        scores.push(sc);
    }
    out.fill(0.0);
    if max == f64::NEG_INFINITY {
        return;
    }
    let mut sum = 0.0;
    for (j, sc) in scores.iter().enumerate() {
        if *sc == f64::NEG_INFINITY {
            continue;
        }
        let w = (sc - max).exp();
        sum += w;
        let vo = p.v.offset(s.batch_index, s.k_start + j, kh);
        for (o, x) in out.iter_mut().zip(&v[vo..vo + d]) {
            *o += w * x.to_f32() as f64;
        }
    }
    out.iter_mut().for_each(|o| *o /= sum);
}

/// Max absolute difference between an output and the oracle, the oracle's max magnitude, and the
/// count of non-finite outputs, over the checked rows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Diff {
    /// Max |out − reference| over finite outputs.
    pub max_abs: f64,
    /// Max |reference|.
    pub ref_max_abs: f64,
    /// Outputs that were NaN or infinite.
    pub nonfinite: u64,
}

impl Diff {
    fn add(&mut self, got: f64, want: f64) {
        if !got.is_finite() {
            self.nonfinite += 1;
        } else {
            self.max_abs = self.max_abs.max((got - want).abs());
        }
        self.ref_max_abs = self.ref_max_abs.max(want.abs());
    }
}

/// Compares the checked rows of `out` (laid out as `p.o`) with the oracle's `refs` (one vector
/// per slice of `checks`).
pub fn compare<T: Element>(p: &Problem, out: &[T], checks: &Checks, refs: &[Vec<f64>]) -> Diff {
    let d = p.q.head_dim;
    let mut diff = Diff::default();
    for ((seq, head, rows), r) in checks.slices.iter().zip(refs) {
        let s = p.sequence(*seq);
        for (&t, want) in rows.iter().zip(r.chunks(d)) {
            let o = p.o.offset(s.batch_index, s.q_start + t, *head);
            for (got, &w) in out[o..o + d].iter().zip(want) {
                diff.add(got.to_f32() as f64, w);
            }
        }
    }
    diff
}

/// Compares every element of `out` with a reference of the same layout and length.
pub fn compare_all<T: Element>(out: &[T], reference: &[f32]) -> Diff {
    let mut diff = Diff::default();
    for (got, &want) in out.iter().zip(reference) {
        diff.add(got.to_f32() as f64, want as f64);
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashattn::{AttentionOptions, Layout};

    fn problem(b: usize, h: usize, nq: usize, nk: usize, d: usize, causal: bool) -> Problem {
        let q = Layout::bshd(b, nq, h, d);
        let k = Layout::bshd(b, nk, h, d);
        let (lq, lk) = (q.required_len().unwrap(), k.required_len().unwrap());
        Problem::new(q, k, k, q, [lq, lk, lk, lq], &AttentionOptions { causal, ..Default::default() })
            .unwrap()
    }

    #[test]
    fn one_key_returns_its_value_and_equal_scores_average() {
        // One key: the output is that key's value.
        let p = problem(1, 1, 2, 1, 2, false);
        let out = reference(&p, &[1.0f32, 2.0, 3.0, 4.0], &[0.5, 0.5], &[7.0, -1.0], 0, 0, &[0, 1]);
        assert_eq!(out, [7.0, -1.0, 7.0, -1.0]);
        // Zero query: equal scores, the mean of the values; causal (bottom-right, Nq = Nk = 2):
        // row 0 sees key 0 only.
        let p = problem(1, 1, 2, 2, 1, true);
        let out = reference(&p, &[0.0f32, 0.0], &[1.0, 2.0], &[2.0, 4.0], 0, 0, &[0, 1]);
        assert_eq!(out, [2.0, 3.0]);
    }

    #[test]
    fn plans_are_complete_when_cheap_and_sampled_when_not() {
        let p = problem(2, 4, 64, 64, 32, false);
        let c = plan(&p, 1e9);
        assert!(c.complete);
        assert_eq!(c.slices.len(), 2);
        assert_eq!((c.slices[1].0, c.slices[1].1), (1, 3));
        assert_eq!(c.rows(), 128);
        let c = plan(&problem(1, 1, 4096, 4096, 128, true), 1e8);
        assert!(!c.complete);
        assert_eq!(c.slices.len(), 1);
        let rows = &c.slices[0].2;
        assert_eq!((rows[0], *rows.last().unwrap()), (0, 4095));
        assert!(rows.len() >= 8 && rows.len() < 4096);
    }

    #[test]
    fn compare_counts_nonfinite_and_max_error() {
        let p = problem(1, 1, 2, 2, 2, false);
        let checks = Checks { slices: vec![(0, 0, vec![1])], complete: false };
        let out = [9.0f32, 9.0, 1.5, f32::NAN];
        let d = compare(&p, &out, &checks, &[vec![1.0, 2.0]]);
        assert_eq!(d, Diff { max_abs: 0.5, ref_max_abs: 2.0, nonfinite: 1 });
        let d = compare_all(&[1.0f32, 2.0], &[1.0, 2.25]);
        assert_eq!(d.max_abs, 0.25);
    }
}

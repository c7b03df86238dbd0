//! The f64 gradient oracle: dQ, dK and dV of attention from the analytic formulas on the full
//! matrices, with none of the tiling or the recurrence of an implementation (the reference the
//! backward pass will be measured against), itself checked against finite differences of
//! [`crate::oracle::attention_f64`] on tiny cases (the tests below).
//!
//! For one query row `t` of head `h` (key/value head `h / G`) with visible keys `j`, scaled
//! scores `s_tj = scale·q_t·k_j`, probabilities `P_tj = exp(s_tj − lse_t)`, output `o_t` and
//! upstream gradient `do_t`:
//!
//! ```text
//! dv_j  += P_tj · do_t                  dP_tj = do_t · v_j
//! D_t    = Σ_j P_tj · dP_tj  (= do_t · o_t)
//! dS_tj  = P_tj · (dP_tj − D_t)
//! dq_t   = scale · Σ_j dS_tj · k_j      dk_j += scale · dS_tj · q_t
//! ```
//!
//! `dk` and `dv` sum over every query head that shares the key/value head (grouped-query
//! attention) and over every query that sees the key. A query row that sees no key contributes
//! nothing, and its `dq` is exactly 0.

use flashattn::{Element, Problem};

use crate::case::for_each_row;

/// The gradients of attention with respect to its inputs, laid out as the inputs are (`dq` as
/// `problem.q`, `dk` as `problem.k`, `dv` as `problem.v`); positions no layout addresses are 0.
/// Where a layout maps several coordinates to one element (a broadcast stride of 0), that
/// element holds the sum of their gradients, the gradient of the shared value.
#[derive(Clone, Debug, PartialEq)]
pub struct Gradients {
    /// ∂L/∂Q.
    pub dq: Vec<f64>,
    /// ∂L/∂K.
    pub dk: Vec<f64>,
    /// ∂L/∂V.
    pub dv: Vec<f64>,
}

/// The gradients of `L = Σ O ∘ dO` (so `dO` is the upstream gradient), in f64, for inputs `q`,
/// `k`, `v` and `d_o` (widened with [`crate::oracle::widen`]) addressed by `problem.q`, `.k`,
/// `.v` and `.o`. The forward quantities (`lse`, `o`) are recomputed here in f64, not taken from
/// an implementation.
pub fn attention_backward_f64(problem: &Problem, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> Gradients {
    let d = problem.head_dim();
    let scale = f64::from(problem.scale());
    let (dq, dk, dv) = accumulate_by_kv_group::<f64>(problem, |c, g| {
        let seq = problem.sequence(c.seq);
        let kh = c.h / problem.group_size();
        let qo = problem.q().offset(c.b, c.s, c.h);
        let oo = problem.o().offset(c.b, c.s, c.h);
        let (q_row, do_row) = (&q[qo..qo + d], &d_o[oo..oo + d]);
        let k_at = |j: usize| problem.kv_offset(false, c.b, seq.k_start + j, kh);
        let v_at = |j: usize| problem.kv_offset(true, c.b, seq.k_start + j, kh);
        // Scaled scores of the visible keys, then the row's log-sum-exp.
        let (mut keys, mut derivs): (Vec<(usize, f64)>, Vec<f64>) = (Vec::new(), Vec::new());
        for j in (0..seq.len_k).filter(|&j| problem.visible(c.t, j, seq.len_q, seq.len_k)) {
            let ko = k_at(j);
            let s: f64 = q_row.iter().zip(&k[ko..ko + d]).map(|(a, b)| a * b).sum();
            let (logit, deriv) =
                crate::oracle::logit_f64(problem, c.h, c.t, j, seq.len_q, seq.len_k, scale * s);
            keys.push((j, logit));
            derivs.push(deriv);
        }
        if keys.is_empty() {
            return;
        }
        let max = keys.iter().fold(f64::NEG_INFINITY, |m, &(_, s)| m.max(s));
        let lse = max + keys.iter().map(|&(_, s)| (s - max).exp()).sum::<f64>().ln();
        // P and dP for every visible key, and D = Σ P·dP.
        let mut big_d = 0.0;
        for (j, s) in keys.iter_mut() {
            let vo = v_at(*j);
            let dp: f64 = do_row.iter().zip(&v[vo..vo + d]).map(|(a, b)| a * b).sum();
            let p = (*s - lse).exp();
            big_d += p * dp;
            // Keep (P, dP) packed in the score's place: P in `s`, dP recomputed below.
            *s = p;
        }
        for (&(j, p), &deriv) in keys.iter().zip(&derivs) {
            let (ko, vo) = (k_at(j), v_at(j));
            let dp: f64 = do_row.iter().zip(&v[vo..vo + d]).map(|(a, b)| a * b).sum();
            // dS with respect to the scaled score (the softcap's derivative; 1 without one).
            let ds = p * (dp - big_d) * deriv;
            for x in 0..d {
                g.dv[j * d + x] += p * do_row[x];
                g.dq[x] += scale * ds * k[ko + x];
                g.dk[j * d + x] += scale * ds * q_row[x];
            }
        }
    });
    Gradients { dq, dk, dv }
}

/// One query row's share of the gradients while [`accumulate_by_kv_group`] walks its group: the
/// row's dQ (`d` values) and its group's dK and dV rows, indexed by key (`j·d + x`, the
/// sequence's keys of the group's key/value head).
struct RowGrads<'a, A> {
    dq: &'a mut [A],
    dk: &'a mut [A],
    dv: &'a mut [A],
}

/// Runs `row(c, grads)` for every query row of `problem`, the rows grouped by (sequence,
/// key/value head) — the rows whose dK and dV land on the same keys — and the groups spread over
/// the machine's cores. Each group accumulates into buffers of its own, in `for_each_row`'s
/// order, which are then added into the gradients (zeros, laid out as the inputs) group by group
/// in that order: every element gets the same sums in the same order as one sequential walk,
/// except elements that several groups share (broadcast strides), which get one group's sum at a
/// time.
fn accumulate_by_kv_group<A>(
    problem: &Problem,
    row: impl Fn(&crate::case::Coord, RowGrads<'_, A>) + Sync,
) -> (Vec<A>, Vec<A>, Vec<A>)
where
    A: Copy + Default + Send + std::ops::AddAssign,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    let len = |l: &flashattn::Layout| l.required_len().expect("a validated layout does not overflow");
    let d = problem.head_dim();
    let mut groups: Vec<Vec<crate::case::Coord>> = Vec::new();
    let mut last = None;
    for_each_row(problem, |c, _| {
        let key = (c.seq, c.h / problem.group_size());
        if last != Some(key) {
            groups.push(Vec::new());
            last = Some(key);
        }
        if let Some(g) = groups.last_mut() {
            g.push(c);
        }
    });
    // Per group: dQ of its rows (`rows·d`), dK and dV of its keys (`len_k·d`).
    type Sums<A> = (Vec<A>, Vec<A>, Vec<A>);
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get()).clamp(1, 32);
    let mut done: Vec<(usize, Sums<A>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.min(groups.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(rows) = groups.get(i) else { break };
                        let keys = problem.sequence(rows[0].seq).len_k;
                        let mut dq = vec![A::default(); rows.len() * d];
                        let (mut dk, mut dv) = (vec![A::default(); keys * d], vec![A::default(); keys * d]);
                        for (r, c) in rows.iter().enumerate() {
                            row(c, RowGrads { dq: &mut dq[r * d..(r + 1) * d], dk: &mut dk, dv: &mut dv });
                        }
                        mine.push((i, (dq, dk, dv)));
                    }
                    mine
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a gradient worker panicked")).collect()
    });
    done.sort_by_key(|(i, _)| *i);
    let (mut dq, mut dk, mut dv) = (
        vec![A::default(); len(problem.q())],
        vec![A::default(); len(problem.k())],
        vec![A::default(); len(problem.v())],
    );
    for (i, (gq, gk, gv)) in done {
        let rows = &groups[i];
        for (r, c) in rows.iter().enumerate() {
            let qo = problem.q().offset(c.b, c.s, c.h);
            for x in 0..d {
                dq[qo + x] += gq[r * d + x];
            }
        }
        let c = rows[0];
        let seq = problem.sequence(c.seq);
        let kh = c.h / problem.group_size();
        for j in 0..seq.len_k {
            let ko = problem.kv_offset(false, c.b, seq.k_start + j, kh);
            let vo = problem.kv_offset(true, c.b, seq.k_start + j, kh);
            for x in 0..d {
                dk[ko + x] += gk[j * d + x];
                dv[vo + x] += gv[j * d + x];
            }
        }
    }
    (dq, dk, dv)
}

/// Standard attention's backward in the input precision `T`, the yardstick of the gradient
/// tolerance rule, as FlashAttention's tests take it: PyTorch's autograd of attention in the
/// input dtype. Per row: scores in f32 from the `T` inputs, rounded to `T`; the softmax computed
/// in f32 and its output `P` rounded to `T` (what `torch.softmax` returns in a 16-bit dtype, and
/// what its backward then reads); `dP = dO·Vᵀ` rounded to `T`; `D = Σ P·dP` in f32 and
/// `dS = P ∘ (dP − D)` rounded to `T` (PyTorch's softmax backward, from the rounded output);
/// the products `dV = Pᵀ·dO`, `dQ = scale·dS·K` and `dK = scale·dSᵀ·Q` accumulate in f32 and
/// are rounded to `T` once. Laid out like [`Gradients`].
///
/// (Until 2026-11-30 the softmax backward here used the unrounded f32 `P`, a yardstick stricter
/// than PyTorch's, which the tensor-core backward missed by up to 2.2× on 1 in 1000 adversarial
/// cases because it must round `dS` to `T` for the matrix products; see `kernels-gpu/NOTES.md`.)
pub fn baseline_backward<T: Element>(problem: &Problem, q: &[T], k: &[T], v: &[T], d_o: &[T]) -> Gradients {
    let d = problem.head_dim();
    let scale = problem.scale();
    let round = |x: f32| T::from_f32(x).to_f32();
    let row = |buf: &[T], o: usize| -> Vec<f32> { buf[o..o + d].iter().map(|x| x.to_f32()).collect() };
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0.0f32, |s, (x, y)| s + x * y);
    let (dq, dk, dv) = accumulate_by_kv_group::<f32>(problem, |c, g| {
        let seq = problem.sequence(c.seq);
        let kh = c.h / problem.group_size();
        let qo = problem.q().offset(c.b, c.s, c.h);
        let (q_row, do_row) = (row(q, qo), row(d_o, problem.o().offset(c.b, c.s, c.h)));
        let visible: Vec<usize> =
            (0..seq.len_k).filter(|&j| problem.visible(c.t, j, seq.len_q, seq.len_k)).collect();
        if visible.is_empty() {
            return;
        }
        let k_at = |j: usize| problem.kv_offset(false, c.b, seq.k_start + j, kh);
        let v_at = |j: usize| problem.kv_offset(true, c.b, seq.k_start + j, kh);
        // Scores in the input precision, then the modifiers in it too (as PyTorch applies them).
        let sm = problem.score_mod(c.h);
        let raw: Vec<f32> = visible.iter().map(|&j| scale * round(dot(&q_row, &row(k, k_at(j))))).collect();
        let scores: Vec<f32> = if problem.has_score_mod() {
            visible
                .iter()
                .zip(&raw)
                .map(|(&j, &s)| round(sm.logit(s, c.t as u32, j as u32, seq.len_q as u32, seq.len_k as u32)))
                .collect()
        } else {
            visible.iter().map(|&j| round(scale * dot(&q_row, &row(k, k_at(j))))).collect()
        };
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let e: Vec<f32> = scores.iter().map(|&x| (x - max).exp()).collect();
        let sum: f32 = e.iter().sum();
        let probs: Vec<f32> = e.iter().map(|x| round(x / sum)).collect();
        let dps: Vec<f32> = visible.iter().map(|&j| round(dot(&do_row, &row(v, v_at(j))))).collect();
        let big_d: f32 = probs.iter().zip(&dps).map(|(p, dp)| p * dp).sum();
        for (((&j, &pr), &dp), &s) in visible.iter().zip(&probs).zip(&dps).zip(&raw) {
            let ds = round(round(pr * (dp - big_d)) * sm.slope_of(s));
            let ko = k_at(j);
            for x in 0..d {
                g.dv[j * d + x] += pr * do_row[x];
                g.dq[x] += scale * ds * k[ko + x].to_f32();
                g.dk[j * d + x] += scale * ds * q_row[x];
            }
        }
    });
    let wide = |x: Vec<f32>| x.into_iter().map(|e| f64::from(round(e))).collect();
    Gradients { dq: wide(dq), dk: wide(dk), dv: wide(dv) }
}

/// Every element of the gradients that the layouts address for some sequence: dQ's query rows
/// and dK's/dV's key rows of every sequence and head (as `(tensor, index)`, tensor 0 = dQ,
/// 1 = dK, 2 = dV).
pub fn for_each_gradient(problem: &Problem, mut f: impl FnMut(usize, usize)) {
    let d = problem.head_dim();
    for_each_row(problem, |c, _| {
        let o = problem.q().offset(c.b, c.s, c.h);
        (o..o + d).for_each(|i| f(0, i));
    });
    for i in 0..problem.batch() {
        let seq = problem.sequence(i);
        for kh in 0..problem.k().heads {
            for j in 0..seq.len_k {
                let ko = problem.kv_offset(false, seq.batch_index, seq.k_start + j, kh);
                let vo = problem.kv_offset(true, seq.batch_index, seq.k_start + j, kh);
                (ko..ko + d).for_each(|x| f(1, x));
                (vo..vo + d).for_each(|x| f(2, x));
            }
        }
    }
}

/// The gradient tolerance rule, FlashAttention's for its backward tests: for each of dQ, dK and
/// dV, with `ref` the f64 oracle and `base` [`baseline_backward`] in the input precision,
///
/// ```text
/// max |x − ref| ≤ 2·max |base − ref| + atol,   atol = 2·max |round_T(ref + 0.3) − (ref + 0.3)|
/// ```
///
/// (the forward's rule, [`crate::tolerance`], on each gradient), every addressed element finite.
/// Returns the worst `err / (2·err_base + atol)` over the three, or what failed.
pub fn check_gradients<T: Element>(
    problem: &Problem,
    got: [&[T]; 3],
    reference: &Gradients,
    baseline: &Gradients,
) -> Result<f64, String> {
    let names = ["dq", "dk", "dv"];
    let refs = [&reference.dq, &reference.dk, &reference.dv];
    let bases = [&baseline.dq, &baseline.dk, &baseline.dv];
    let (mut err, mut err_base, mut atol) = ([0.0f64; 3], [0.0f64; 3], [0.0f64; 3]);
    let mut bad: Option<String> = None;
    for_each_gradient(problem, |t, i| {
        let (x, r) = (f64::from(got[t][i].to_f32()), refs[t][i]);
        if !x.is_finite() && bad.is_none() {
            bad = Some(format!("{}[{i}] = {x} (reference {r})", names[t]));
        }
        err[t] = err[t].max((x - r).abs());
        err_base[t] = err_base[t].max((bases[t][i] - r).abs());
        let shifted = r + 0.3;
        atol[t] = atol[t].max(2.0 * (f64::from(T::from_f32(shifted as f32).to_f32()) - shifted).abs());
    });
    if let Some(b) = bad {
        return Err(format!("non-finite gradient: {b}"));
    }
    let mut worst = 0.0f64;
    for t in 0..3 {
        let allowed = 2.0 * err_base[t] + atol[t];
        if err[t] > allowed {
            return Err(format!(
                "{} error {:.3e} exceeds 2·baseline error {:.3e} + atol {:.3e} = {allowed:.3e}",
                names[t], err[t], err_base[t], atol[t]
            ));
        }
        worst = worst.max(err[t] / allowed.max(f64::MIN_POSITIVE));
    }
    Ok(worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::{LayoutKind, Sequences, Spec};
    use crate::oracle::{attention_f64, widen};
    use flashattn::bf16;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// `L = Σ O ∘ dO` from the forward oracle.
    fn loss(problem: &Problem, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> f64 {
        let r = attention_f64(problem, q, k, v);
        let mut l = 0.0;
        crate::case::for_each_output(problem, |_, i| l += r.out[i] * d_o[i]);
        l
    }

    /// Central differences of the loss in every addressed element of one input against the
    /// oracle's gradient: relative to the gradient's scale, within 1e-6 (the f64 truncation
    /// error of a step of 1e-5 is about 1e-10 relative; rounding adds about 1e-16/1e-5).
    fn check_input(
        problem: &Problem,
        mut inputs: [Vec<f64>; 3],
        d_o: &[f64],
        which: usize,
        grad: &[f64],
        name: &str,
    ) {
        let h = 1e-5;
        let scale = grad.iter().fold(1e-3f64, |m, g| m.max(g.abs()));
        for i in 0..inputs[which].len() {
            let x = inputs[which][i];
            inputs[which][i] = x + h;
            let up = loss(problem, &inputs[0], &inputs[1], &inputs[2], d_o);
            inputs[which][i] = x - h;
            let down = loss(problem, &inputs[0], &inputs[1], &inputs[2], d_o);
            inputs[which][i] = x;
            let fd = (up - down) / (2.0 * h);
            assert!(
                (fd - grad[i]).abs() <= 1e-6 * scale,
                "{name}[{i}]: finite difference {fd}, oracle {}, scale {scale}",
                grad[i]
            );
        }
    }

    fn check_spec(spec: &Spec, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let case = crate::Case::<bf16>::random(&mut rng, spec);
        let (q, k, v) = (widen(&case.q), widen(&case.k), widen(&case.v));
        let d_o: Vec<f64> = (0..case.out_len()).map(|_| rng.random_range(-1.0..1.0)).collect();
        let g = attention_backward_f64(&case.problem, &q, &k, &v, &d_o);
        let inputs = [q, k, v];
        check_input(&case.problem, inputs.clone(), &d_o, 0, &g.dq, "dq");
        check_input(&case.problem, inputs.clone(), &d_o, 1, &g.dk, "dk");
        check_input(&case.problem, inputs, &d_o, 2, &g.dv, "dv");
    }

    #[test]
    fn gradients_match_finite_differences() {
        // Plain, causal with Nq > Nk (the first rows see no key: their dq must be 0), GQA with
        // Nq < Nk, and varlen with an empty sequence, on mixed layouts.
        let mut specs = vec![Spec::batch(1, 3, 4, 1, 3)];
        let mut s = Spec::batch(2, 5, 3, 2, 4);
        s.causal = true;
        specs.push(s);
        let mut s = Spec::batch(1, 2, 5, 4, 3);
        s.heads_k = 2;
        s.causal = true;
        s.layout = LayoutKind::Mixed;
        specs.push(s);
        let mut s = Spec::batch(1, 1, 1, 2, 5);
        s.sequences =
            Sequences::VarLen { q_lens: vec![2, 0, 3], k_lens: vec![3, 2, 2], spare_q: 1, spare_k: 1 };
        s.heads_k = 1;
        s.layout = LayoutKind::Padded;
        specs.push(s);
        let mut s = Spec::batch(1, 5, 6, 2, 3);
        s.window = flashattn::Window { left: Some(2), right: Some(1) };
        specs.push(s);
        for (i, s) in specs.iter().enumerate() {
            check_spec(s, 1000 + i as u64);
        }
    }

    #[test]
    fn rows_without_keys_have_zero_dq() {
        let mut s = Spec::batch(1, 6, 2, 1, 4);
        s.causal = true; // queries 0..4 see no key (bottom-right alignment)
        let mut rng = StdRng::seed_from_u64(7);
        let case = crate::Case::<bf16>::random(&mut rng, &s);
        let d_o = vec![1.0; case.out_len()];
        let g =
            attention_backward_f64(&case.problem, &widen(&case.q), &widen(&case.k), &widen(&case.v), &d_o);
        let l = case.problem.q();
        for t in 0..4 {
            let o = l.offset(0, t, 0);
            assert!(g.dq[o..o + 4].iter().all(|&x| x == 0.0), "row {t}: {:?}", &g.dq[o..o + 4]);
        }
        // Query 4 sees one key (probability 1: its dq is 0 too, exactly as the formula says);
        // query 5 sees two, and has a gradient.
        let o = l.offset(0, 5, 0);
        assert!(g.dq[o..o + 4].iter().any(|&x| x != 0.0));
    }
}

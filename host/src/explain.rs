//! A worked example of the algorithm, printed step by step (`cargo xtask explain`).
//!
//! A few query vectors attend to a few key vectors. The keys are processed a block at a time
//! with the shared online-softmax recurrence ([`flashattn_kernels::softmax::OnlineSoftmax`], in
//! f32, as the CPU implementation and the GPU kernels run it): each block's scores, the running
//! maximum and normaliser, the factor that rescales what was accumulated before, and the partial
//! (unnormalised) outputs. Then the result is set next to standard attention computed the
//! standard way (all `N_q·N_k` scores materialised, in f64), with the largest difference and how
//! many scores each method held at once.
//!
//! The inputs come from a small seeded generator, so the text is the same on every machine.

use std::fmt;

use flashattn_kernels::math::LOG2_E;
use flashattn_kernels::softmax::{GradRow, OnlineSoftmax, SplitMerge, prob_from_lse};

/// What the walkthrough computes.
#[derive(Clone, Debug, PartialEq)]
pub struct ExplainOptions {
    /// Query vectors (rows of Q).
    pub n_q: usize,
    /// Key/value vectors (rows of K and V).
    pub n_k: usize,
    /// Head dimension (at least 1; 0 is taken as 1).
    pub d: usize,
    /// Keys per block (at least 1; 0 is taken as 1).
    pub block_n: usize,
    /// Seed of the input generator.
    pub seed: u64,
    /// Softmax scale; `None` means `1/√d`.
    pub scale: Option<f32>,
}

impl Default for ExplainOptions {
    /// The curriculum's example: 4 queries, 4 keys, `d = 3`, blocks of 2 keys, seed 1.
    fn default() -> Self {
        ExplainOptions { n_q: 4, n_k: 4, d: 3, block_n: 2, seed: 1, scale: None }
    }
}

/// One key block as the recurrence saw it; every `Vec` has one entry per query row.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockTrace {
    /// First key of the block.
    pub first_key: usize,
    /// Keys in the block.
    pub keys: usize,
    /// Raw scores `q·k_j` of the block's keys (the softmax uses `scale·q·k_j`).
    pub scores: Vec<Vec<f32>>,
    /// Largest raw score seen before this block (`-inf` before the first).
    pub max_before: Vec<f32>,
    /// Largest raw score seen including this block.
    pub max_after: Vec<f32>,
    /// The factor `exp(scale·(max_before − max_after))` applied to the normaliser and to the
    /// accumulated output (0 for the first block: nothing was accumulated).
    pub rescale: Vec<f32>,
    /// The block's unnormalised probabilities `exp(scale·(s − max_after))`.
    pub probs: Vec<Vec<f32>>,
    /// The running normaliser `l` after this block.
    pub normaliser: Vec<f32>,
    /// The running unnormalised output `Σ p_j·v_j` after this block.
    pub partial: Vec<Vec<f32>>,
}

/// The walkthrough's numbers; [`fmt::Display`] prints the explanation.
#[derive(Clone, Debug, PartialEq)]
pub struct Walkthrough {
    /// The options it ran with (`d` and `block_n` at least 1).
    pub options: ExplainOptions,
    /// The softmax scale used.
    pub scale: f32,
    /// Query rows.
    pub q: Vec<Vec<f32>>,
    /// Key rows.
    pub k: Vec<Vec<f32>>,
    /// Value rows.
    pub v: Vec<Vec<f32>>,
    /// Each key block, in order.
    pub blocks: Vec<BlockTrace>,
    /// The tiled result: the last partial outputs divided by the normaliser (f32).
    pub output: Vec<Vec<f32>>,
    /// The tiled log-sum-exp `ln Σ_j exp(scale·q·k_j)` of each row (f32).
    pub lse: Vec<f32>,
    /// Standard attention's `N_q × N_k` scaled scores `scale·q·k_j` (f64).
    pub standard_scores: Vec<Vec<f64>>,
    /// Standard attention's output (f64).
    pub reference: Vec<Vec<f64>>,
    /// Standard attention's log-sum-exp (f64).
    pub reference_lse: Vec<f64>,
    /// Largest `|output − reference|` over all elements.
    pub max_difference: f64,
    /// Largest `|lse − reference_lse|`.
    pub max_lse_difference: f64,
    /// The difference that would falsify exactness (see [`exactness_threshold`]).
    pub threshold: f64,
    /// Split-KV: the keys cut in two halves (`0..N_k/2`, `N_k/2..N_k`), each finished on its
    /// own — its output rows and log-sum-exps — as the split blocks of a decode kernel do.
    pub split_halves: [(Vec<Vec<f32>>, Vec<f32>); 2],
    /// The halves merged by log-sum-exp ([`SplitMerge`]): output rows.
    pub split_output: Vec<Vec<f32>>,
    /// Largest `|split_output − reference|`.
    pub split_max_difference: f64,
    /// Scores the tiled method held at once: `N_q × min(block_n, N_k)`.
    pub scores_held: usize,
    /// Scores standard attention holds: `N_q × N_k`.
    pub scores_standard: usize,
    /// The backward pass on the same example ([`BackwardTrace`]).
    pub backward: BackwardTrace,
}

/// The backward pass of the walkthrough: the gradients of `L = Σ O ∘ dO` for a seeded `dO`,
/// tiled as the library computes them (a pass over each row's keys for its statistics, then the
/// key blocks: dV and dK of a block complete, dQ accumulated), set against standard attention's
/// gradients from the materialised matrices (f64).
#[derive(Clone, Debug, PartialEq)]
pub struct BackwardTrace {
    /// The upstream gradient dO (one row per query).
    pub d_o: Vec<Vec<f32>>,
    /// Per query row: `1/Σ P`, the pivot (dP of the most probable key) and `D − pivot`
    /// ([`GradRow`]).
    pub stats: Vec<(f32, f32, f32)>,
    /// Per query row: `D = pivot + (D − pivot)`, and the same from the materialised matrices
    /// (`Σ_j P_j·dP_j` in f64, which equals `rowsum(dO ∘ O)`).
    pub d: Vec<(f32, f64)>,
    /// The tiled gradients (f32): dQ, dK, dV rows.
    pub grads: [Vec<Vec<f32>>; 3],
    /// Standard attention's gradients (f64).
    pub reference: [Vec<Vec<f64>>; 3],
    /// Largest `|tiled − reference|` of dQ, dK and dV.
    pub max_difference: [f64; 3],
    /// Numbers the tiled backward held at once: per query row three statistics and a dQ row,
    /// and one block's P and dS.
    pub held: usize,
    /// Numbers standard attention's backward holds: P and dS, `2·N_q·N_k`.
    pub held_standard: usize,
}

/// The largest output difference between the tiled f32 result and exact attention that f32
/// rounding can explain, for inputs in [-1, 1]:
///
/// ```text
/// 4u·(2d + 2n_k + 8)·max(1, L),   u = 2⁻²⁴, L = max |scale·q·k|
/// ```
///
/// Each output element passes through about `2d + 2n_k + 8` f32 roundings (the `d` products and
/// sums of a score; the exponent's three; the normaliser's and the accumulator's `n_k` additions
/// and rescalings; the final division), each of relative size `u` at magnitudes up to
/// `max(1, L)` (scores) or 1 (values, probabilities); the factor 4 is headroom over this linear
/// worst case. For the default example it is about 5e-6, and the differences observed are near
/// 3e-8. A mistake in the method (a missing rescale, a stale maximum, a dropped block) moves the
/// outputs by around 1e-2 or more (leaving out the default example's rescale factors alone does:
/// see the CPU suite's walkthrough test): a difference above the threshold would falsify the
/// claim that the tiled computation is exact attention, not an approximation of it.
pub fn exactness_threshold(d: usize, n_k: usize, max_abs_logit: f64) -> f64 {
    4.0 * f64::powi(2.0, -24) * (2 * d + 2 * n_k + 8) as f64 * max_abs_logit.max(1.0)
}

/// A 64-bit linear congruential generator (Knuth's MMIX constants): enough for example values
/// that are the same everywhere.
struct Lcg(u64);

impl Lcg {
    /// A value in [-1, 1] with two decimals, so that the printed inputs are the inputs.
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let hundredths = ((self.0 >> 33) % 201) as i32 - 100;
        hundredths as f32 / 100.0
    }

    fn matrix(&mut self, rows: usize, cols: usize) -> Vec<Vec<f32>> {
        (0..rows).map(|_| (0..cols).map(|_| self.next()).collect()).collect()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Runs the example: the tiled computation with its trace, standard attention, and the
/// comparison.
pub fn walkthrough(opts: &ExplainOptions) -> Walkthrough {
    let options = ExplainOptions { d: opts.d.max(1), block_n: opts.block_n.max(1), ..opts.clone() };
    let (n_q, n_k, d, bn) = (options.n_q, options.n_k, options.d, options.block_n);
    let mut rng = Lcg(options.seed);
    let (q, k, v) = (rng.matrix(n_q, d), rng.matrix(n_k, d), rng.matrix(n_k, d));
    let scale = options.scale.unwrap_or(1.0 / (d as f32).sqrt());
    let scale_log2 = scale * LOG2_E;

    // The tiled computation: one running state and accumulator per query row.
    let mut state = vec![OnlineSoftmax::new(); n_q];
    let mut acc = vec![vec![0.0f32; d]; n_q];
    let mut blocks = Vec::new();
    for first_key in (0..n_k).step_by(bn) {
        let keys = bn.min(n_k - first_key);
        let mut trace = BlockTrace {
            first_key,
            keys,
            scores: Vec::new(),
            max_before: Vec::new(),
            max_after: Vec::new(),
            rescale: Vec::new(),
            probs: Vec::new(),
            normaliser: Vec::new(),
            partial: Vec::new(),
        };
        for r in 0..n_q {
            let scores: Vec<f32> = (first_key..first_key + keys).map(|j| dot(&q[r], &k[j])).collect();
            let block_max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
            trace.max_before.push(state[r].max);
            let step = state[r].step(block_max, scale_log2);
            for a in acc[r].iter_mut() {
                *a *= step.alpha;
            }
            let probs: Vec<f32> = scores.iter().map(|&s| step.prob(s, scale_log2)).collect();
            for (p, j) in probs.iter().zip(first_key..) {
                for (a, &x) in acc[r].iter_mut().zip(&v[j]) {
                    *a += p * x;
                }
            }
            state[r].add(probs.iter().sum());
            trace.max_after.push(state[r].max);
            trace.rescale.push(step.alpha);
            trace.normaliser.push(state[r].sum);
            trace.partial.push(acc[r].clone());
            trace.scores.push(scores);
            trace.probs.push(probs);
        }
        blocks.push(trace);
    }
    let mut output = Vec::with_capacity(n_q);
    let mut lse = Vec::with_capacity(n_q);
    for r in 0..n_q {
        let fin = state[r].finish(scale_log2);
        output.push(acc[r].iter().map(|a| a * fin.inv_sum).collect::<Vec<f32>>());
        lse.push(fin.lse);
    }

    // Split-KV: each half of the keys through the same recurrence, finished on its own, then
    // merged by log-sum-exp.
    let half = |keys: std::ops::Range<usize>| {
        let (mut outs, mut lses) = (Vec::new(), Vec::new());
        for qr in &q {
            let mut st = OnlineSoftmax::new();
            let mut a = vec![0.0f32; d];
            for j in keys.clone() {
                let s = dot(qr, &k[j]);
                let step = st.step(s, scale_log2);
                a.iter_mut().for_each(|x| *x *= step.alpha);
                let p = step.prob(s, scale_log2);
                a.iter_mut().zip(&v[j]).for_each(|(x, &y)| *x += p * y);
                st.add(p);
            }
            let fin = st.finish(scale_log2);
            outs.push(a.iter().map(|x| x * fin.inv_sum).collect::<Vec<f32>>());
            lses.push(fin.lse);
        }
        (outs, lses)
    };
    let split_halves = [half(0..n_k / 2), half(n_k / 2..n_k)];
    let split_output: Vec<Vec<f32>> = (0..n_q)
        .map(|r| {
            let mut merge = SplitMerge::new();
            split_halves.iter().for_each(|(_, l)| merge.see(l[r]));
            let mut out = vec![0.0f32; d];
            let mut sum = 0.0f32;
            for (o, l) in &split_halves {
                let w = merge.weight(l[r]);
                sum += w;
                out.iter_mut().zip(&o[r]).for_each(|(x, &y)| *x += w * y);
            }
            let fin = merge.finish(sum);
            out.iter().map(|x| x * fin.inv_sum).collect()
        })
        .collect();

    // Standard attention, the standard way: all N_q × N_k scores, then softmax, then P·V (f64).
    let c = f64::from(scale);
    let standard_scores: Vec<Vec<f64>> = q
        .iter()
        .map(|qr| {
            k.iter()
                .map(|kr| c * qr.iter().zip(kr).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>())
                .collect()
        })
        .collect();
    let mut reference = Vec::with_capacity(n_q);
    let mut reference_lse = Vec::with_capacity(n_q);
    for row in &standard_scores {
        let m = row.iter().fold(f64::NEG_INFINITY, |m, &s| m.max(s));
        if n_k == 0 {
            reference.push(vec![0.0; d]);
            reference_lse.push(f64::NEG_INFINITY);
            continue;
        }
        let w: Vec<f64> = row.iter().map(|&s| (s - m).exp()).collect();
        let l: f64 = w.iter().sum();
        reference.push(
            (0..d).map(|x| w.iter().zip(&v).map(|(wj, vj)| wj * f64::from(vj[x])).sum::<f64>() / l).collect(),
        );
        reference_lse.push(m + l.ln());
    }

    let max_difference = output
        .iter()
        .zip(&reference)
        .flat_map(|(o, r)| o.iter().zip(r).map(|(&a, &b)| (f64::from(a) - b).abs()))
        .fold(0.0, f64::max);
    let max_lse_difference = lse
        .iter()
        .zip(&reference_lse)
        .map(|(&a, &b)| if f64::from(a) == b { 0.0 } else { (f64::from(a) - b).abs() })
        .fold(0.0, f64::max);
    let max_abs_logit = standard_scores.iter().flatten().fold(0.0f64, |m, s| m.max(s.abs()));
    let split_max_difference = split_output
        .iter()
        .zip(&reference)
        .flat_map(|(o, r)| o.iter().zip(r).map(|(&a, &b)| (f64::from(a) - b).abs()))
        .fold(0.0, f64::max);
    let d_o = rng.matrix(n_q, d);
    let backward = backward(&BackwardInputs { q: &q, k: &k, v: &v, d_o, lse: &lse, scale, block_n: bn });
    Walkthrough {
        backward,
        split_halves,
        split_output,
        split_max_difference,
        threshold: exactness_threshold(d, n_k, max_abs_logit),
        scores_held: n_q * bn.min(n_k),
        scores_standard: n_q * n_k,
        options,
        scale,
        q,
        k,
        v,
        blocks,
        output,
        lse,
        standard_scores,
        reference,
        reference_lse,
        max_difference,
        max_lse_difference,
    }
}

/// What [`backward`] works on: the walkthrough's inputs and forward log-sum-exps.
struct BackwardInputs<'a> {
    q: &'a [Vec<f32>],
    k: &'a [Vec<f32>],
    v: &'a [Vec<f32>],
    d_o: Vec<Vec<f32>>,
    lse: &'a [f32],
    scale: f32,
    block_n: usize,
}

/// The walkthrough's backward: tiled (f32, the library's steps) and standard (f64).
fn backward(inp: &BackwardInputs<'_>) -> BackwardTrace {
    let BackwardInputs { q, k, v, ref d_o, lse, scale, block_n } = *inp;
    let (n_q, n_k, d) = (q.len(), k.len(), q.first().map_or(0, Vec::len));
    let scale_log2 = scale * LOG2_E;
    // 1. Each row's statistics, one pass over its keys (the GPU's preprocessing kernel).
    let stats: Vec<(f32, f32, f32)> = (0..n_q)
        .map(|r| {
            let mut row = GradRow::new();
            for j in 0..n_k {
                let (p, dp) = (prob_from_lse(dot(&q[r], &k[j]), scale_log2, lse[r]), dot(&d_o[r], &v[j]));
                row.see(p, dp);
                row.add(p, dp);
            }
            let (inv, d_rel) = GradRow::finish(row.sum, row.rel);
            (inv, row.pivot, d_rel)
        })
        .collect();
    // 2. Key blocks: P and dS of the block, dV and dK of its keys, dQ accumulated.
    let (mut dq, mut dk, mut dv) =
        (vec![vec![0.0f32; d]; n_q], vec![vec![0.0f32; d]; n_k], vec![vec![0.0f32; d]; n_k]);
    for j0 in (0..n_k).step_by(block_n.max(1)) {
        for j in j0..(j0 + block_n).min(n_k) {
            for r in 0..n_q {
                let (inv, pivot, d_rel) = stats[r];
                let p = prob_from_lse(dot(&q[r], &k[j]), scale_log2, lse[r]) * inv;
                let ds = scale * GradRow::ds(p, dot(&d_o[r], &v[j]), pivot, d_rel);
                for x in 0..d {
                    dv[j][x] += p * d_o[r][x];
                    dk[j][x] += ds * q[r][x];
                    dq[r][x] += ds * k[j][x];
                }
            }
        }
    }
    // Standard attention's backward in f64: P and dS materialised.
    let wide = |m: &[Vec<f32>]| -> Vec<Vec<f64>> {
        m.iter().map(|r| r.iter().map(|&x| f64::from(x)).collect()).collect()
    };
    let (qw, kw, vw, dow) = (wide(q), wide(k), wide(v), wide(d_o));
    let dot64 = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let c = f64::from(scale);
    let (mut rq, mut rk, mut rv) =
        (vec![vec![0.0f64; d]; n_q], vec![vec![0.0f64; d]; n_k], vec![vec![0.0f64; d]; n_k]);
    let mut d_ref = Vec::with_capacity(n_q);
    for r in 0..n_q {
        let s: Vec<f64> = kw.iter().map(|kr| c * dot64(&qw[r], kr)).collect();
        let m = s.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x));
        let e: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
        let l: f64 = e.iter().sum();
        let p: Vec<f64> = e.iter().map(|x| x / l).collect();
        let dp: Vec<f64> = vw.iter().map(|vr| dot64(&dow[r], vr)).collect();
        let big_d: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
        d_ref.push(big_d);
        for j in 0..n_k {
            let ds = c * p[j] * (dp[j] - big_d);
            for x in 0..d {
                rv[j][x] += p[j] * dow[r][x];
                rk[j][x] += ds * qw[r][x];
                rq[r][x] += ds * kw[j][x];
            }
        }
    }
    let diff = |a: &[Vec<f32>], b: &[Vec<f64>]| {
        a.iter()
            .zip(b)
            .flat_map(|(x, y)| x.iter().zip(y).map(|(&s, &t)| (f64::from(s) - t).abs()))
            .fold(0.0, f64::max)
    };
    let max_difference = [diff(&dq, &rq), diff(&dk, &rk), diff(&dv, &rv)];
    BackwardTrace {
        d: stats.iter().zip(&d_ref).map(|(&(_, pivot, d_rel), &r)| (pivot + d_rel, r)).collect(),
        d_o: d_o.clone(),
        stats,
        grads: [dq, dk, dv],
        reference: [rq, rk, rv],
        max_difference,
        held: n_q * (3 + d) + 2 * n_q * block_n.min(n_k),
        held_standard: 2 * n_q * n_k,
    }
}

/// `[ 0.1234, -0.5678]`.
fn vector<T: Copy + Into<f64>>(xs: &[T]) -> String {
    let parts: Vec<String> = xs.iter().map(|&x| format!("{:7.4}", x.into())).collect();
    format!("[{}]", parts.join(","))
}

fn scalar(x: f32) -> String {
    if x == f32::NEG_INFINITY { "   -inf".into() } else { format!("{x:7.4}") }
}

impl fmt::Display for Walkthrough {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "Attention, tiled: {} queries attend to {} keys (head dimension {}), the keys taken {} at a time.",
            o.n_q, o.n_k, o.d, o.block_n
        )?;
        writeln!(
            f,
            "Softmax scale c = {:.4}{}. Inputs from seed {} (values in [-1, 1]).\n",
            self.scale,
            if o.scale.is_none() { format!(" (1/√{})", o.d) } else { String::new() },
            o.seed
        )?;
        for (name, rows) in [("Q", &self.q), ("K", &self.k), ("V", &self.v)] {
            writeln!(f, "{name}:")?;
            for (i, r) in rows.iter().enumerate() {
                writeln!(f, "  {}{i} = {}", name.to_lowercase(), vector(r))?;
            }
        }
        writeln!(f)?;
        writeln!(f, "Each query row keeps three things while the key blocks stream past:")?;
        writeln!(f, "  m   the largest raw score q·k seen so far,")?;
        writeln!(f, "  l   the sum of exp(c·(s − m)) over the keys seen so far (the normaliser),")?;
        writeln!(f, "  acc the sum of exp(c·(s − m))·v over the keys seen so far (unnormalised output).")?;
        writeln!(f, "When a block raises m from m_old to m_new, l and acc are multiplied by")?;
        writeln!(f, "  α = exp(c·(m_old − m_new)),")?;
        writeln!(
            f,
            "which turns every earlier exp(c·(s − m_old)) into exp(c·(s − m_new)): nothing is approximated.\n"
        )?;

        for (b, t) in self.blocks.iter().enumerate() {
            writeln!(
                f,
                "Block {} of {}: keys {}..{}",
                b + 1,
                self.blocks.len(),
                t.first_key,
                t.first_key + t.keys
            )?;
            for r in 0..t.scores.len() {
                writeln!(f, "  q{r}: scores q·k   {}", vector(&t.scores[r]))?;
                writeln!(
                    f,
                    "      m {} → {}   α = {:.4}   p = exp(c·(s − m)) {}",
                    scalar(t.max_before[r]),
                    scalar(t.max_after[r]),
                    t.rescale[r],
                    vector(&t.probs[r])
                )?;
                writeln!(f, "      l = {:.4}   acc = {}", t.normaliser[r], vector(&t.partial[r]))?;
            }
            writeln!(f)?;
        }

        writeln!(f, "Result: output = acc / l, log-sum-exp = c·m + ln l.")?;
        writeln!(
            f,
            "Standard attention for comparison: all {} scores c·q·k materialised, softmax, times V (in f64):",
            self.scores_standard
        )?;
        for (r, row) in self.standard_scores.iter().enumerate() {
            writeln!(f, "  q{r}: {}", vector(row))?;
        }
        writeln!(f)?;
        writeln!(f, "       tiled (f32)                     standard (f64)                  |difference|")?;
        for r in 0..self.output.len() {
            let diff = self.output[r]
                .iter()
                .zip(&self.reference[r])
                .map(|(&a, &b)| (f64::from(a) - b).abs())
                .fold(0.0, f64::max);
            writeln!(f, "  o{r}: {}   {}   {diff:.1e}", vector(&self.output[r]), vector(&self.reference[r]))?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Largest difference in the outputs: {:.2e} (log-sum-exp: {:.2e}).",
            self.max_difference, self.max_lse_difference
        )?;
        writeln!(
            f,
            "Exactness would be falsified by an output difference above {:.1e}, what f32 rounding can\n\
             explain here (4u·(2d + 2n_k + 8)·max(1, |c·q·k|), u = 2⁻²⁴); a mistake in the method\n\
             (a missing rescale, a stale maximum, a dropped block) would show as differences of 1e-2 or more.",
            self.threshold
        )?;
        if self.max_difference <= self.threshold {
            writeln!(f, "It did not occur: {:.2e} ≤ {:.1e}.", self.max_difference, self.threshold)?;
        } else {
            writeln!(f, "IT OCCURRED: {:.2e} > {:.1e}.", self.max_difference, self.threshold)?;
        }
        writeln!(f)?;
        let mid = o.n_k / 2;
        writeln!(
            f,
            "Split-KV (how decoding keeps the GPU busy): keys 0..{mid} and {mid}..{} each go through the same\n\
             recurrence on their own and finish with an output o_s and a log-sum-exp lse_s; then\n\
             output = Σ_s w_s·o_s / Σ_s w_s with w_s = exp(lse_s − max lse), again exact:",
            o.n_k
        )?;
        for r in 0..self.split_output.len() {
            let (a, b) = (&self.split_halves[0], &self.split_halves[1]);
            writeln!(
                f,
                "  q{r}: o_0 {} lse_0 {}   o_1 {} lse_1 {}   merged {}",
                vector(&a.0[r]),
                scalar(a.1[r]),
                vector(&b.0[r]),
                scalar(b.1[r]),
                vector(&self.split_output[r])
            )?;
        }
        writeln!(
            f,
            "Largest difference of the merged outputs from standard attention: {:.2e} (threshold {:.1e}).",
            self.split_max_difference, self.threshold
        )?;
        writeln!(
            f,
            "Scores held at once: {} ({} queries × {} keys of a block), versus {} ({} × {}) for standard attention.",
            self.scores_held,
            o.n_q,
            o.block_n.min(o.n_k),
            self.scores_standard,
            o.n_q,
            o.n_k
        )?;
        let b = &self.backward;
        writeln!(f)?;
        writeln!(
            f,
            "Backward (training): the gradients of L = Σ O∘dO. Nothing of the forward is kept but O and the\n\
             log-sum-exps: P = exp(c·q·k − lse) is recomputed block by block. dS = P∘(dP − D) needs, per row,\n\
             D = Σ_j P_j·dP_j (dP = dO·v), before any block: a first pass over the row's keys finds it,\n\
             relative to the dP of the most probable key (the pivot), with 1/Σ P to make the recomputed P sum to 1."
        )?;
        for (r, (((inv, pivot, d_rel), (dd, dref)), d_o)) in b.stats.iter().zip(&b.d).zip(&b.d_o).enumerate()
        {
            writeln!(
                f,
                "  q{r}: dO {}   1/ΣP {inv:.4}   pivot {pivot:7.4}   D − pivot {d_rel:8.5}   D {dd:7.4} (standard {dref:7.4})",
                vector(d_o)
            )?;
        }
        writeln!(
            f,
            "Then each key block: dV_j = Σ_r P_rj·dO_r and dK_j = c·Σ_r dS_rj·q_r are complete when the block is,\n\
             dQ_r = c·Σ_j dS_rj·k_j adds up across blocks. Largest differences from standard attention's\n\
             gradients (f64, all of P and dS materialised): dQ {:.2e}, dK {:.2e}, dV {:.2e}.",
            b.max_difference[0], b.max_difference[1], b.max_difference[2]
        )?;
        let (n, dd, bn) = (4096usize, 128usize, 64usize);
        writeln!(
            f,
            "Numbers held at once: {} (per row three statistics and a dQ row, one block's P and dS), versus {} (P and dS):\n\
             more at this size, but linear in N instead of quadratic: at N_q = N_k = {n}, d = {dd}, blocks of {bn},\n\
             {} versus {}.",
            b.held,
            b.held_standard,
            n * (3 + dd) + 2 * n * bn,
            2 * n * n
        )
    }
}

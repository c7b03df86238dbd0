//! The online softmax: the recurrence that lets attention run tile by tile.
//!
//! For one query row with scores `s_j` (raw dot products `q·k_j`) and softmax scale `c > 0`,
//! attention needs `o = Σ_j p_j v_j / Σ_j p_j` with `p_j = exp(c·s_j − c·m)`, where `m` is the
//! row maximum. Seen a block of keys at a time, the maximum is only known so far; when a later
//! block raises it from `m` to `m'`, everything accumulated with the old maximum is multiplied by
//! `α = exp(c·(m − m'))`, which makes it exactly what it would have been with `m'` from the start.
//! So the running state is just `(m, l)`: the largest raw score so far and the sum of the
//! probabilities so far, and the accumulator `acc = Σ p_j v_j` is rescaled by the same `α`.
//!
//! Everything runs in base 2: `scale_log2 = c·log2(e)`, so each probability costs one FMA and one
//! `ex2` on the GPU: `p = 2^(s·scale_log2 − m·scale_log2)`.
//!
//! Masked scores are `-inf`. A row whose scores are all masked keeps `m = -inf`, `l = 0`, and
//! finishes with output 0 and log-sum-exp `-inf`, never NaN.
//!
//! **One FMA, and when it is not enough.** `2^(s·c − m·c)` as `fma(s, c, −round(m·c))` is exact
//! up to the rounding `δ` of `m·c` (|δ| ≤ ulp(m·c)/2), and `δ` is the same for every key of the
//! row, so it cancels in `o = Σ p v / Σ p`. It stops cancelling only when `2^δ` itself
//! overflows or underflows, i.e. when `|m·c|` is near `2^24·126` — a softmax scale like `1e35`
//! gets there at once (then the largest score's own probability was `2^±10^28`: `inf` or `0`).
//! [`BlockStep::fused_ok`] says whether the one-FMA form is accurate (`|m·c| < 2^30`, so
//! `|δ| ≤ 32`); when it is not, [`BlockStep::prob_exact`] computes `2^((s − m)·c)` (a subtraction
//! and a product). The GPU kernels test this once per tile (a warp-uniform branch) and the
//! common case keeps one FMA per score.
//!
//! **Non-finite inputs.** A NaN score (a NaN or infinite element of Q or K, or an overflowing
//! dot product) is not a maximum (`max` ignores NaN) but its probability is NaN, so the row's sum,
//! output and log-sum-exp are NaN — never the "no visible key" result, which is kept for rows
//! whose every score is masked (`sum == 0`).
//!
//! This module is the one implementation of the recurrence: the GPU kernels and the CPU tiled
//! implementation both call it. (The f64 test oracle does not: it is the independent check.)

use crate::math::{LN_2, LOG2_E, exp2, fma, log2, rcp};

/// How far (in `scale_log2` units, i.e. powers of 2) a block's maximum may exceed the running
/// one before [`OnlineSoftmax::step_lazy`] rescales: probabilities stay at most `2^8`, which f16
/// and bf16 hold exactly as they hold any value of their range (relative rounding), and a
/// row's sum at most `2^8` times its key count.
pub const LAZY_RESCALE_LOG2: f32 = 8.0;

/// Largest `|max·scale_log2|` for which the one-FMA probability ([`BlockStep::prob`]) is used:
/// its rounding error `δ` is then at most 2^5 in the exponent, a common factor `2^δ` that
/// cancels in the normalisation without overflowing (see the module docs).
pub const FUSED_LIMIT: f32 = (1u64 << 30) as f32;

/// Running softmax state of one query row (or, on the GPU, of one thread's share of a row: the
/// maximum is kept equal across the threads of a row and the partial sums are added at the end).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OnlineSoftmax {
    /// Largest raw score seen so far; `-inf` while every score was masked.
    pub max: f32,
    /// Σ 2^(s·scale_log2 − max·scale_log2) over the scores seen so far.
    pub sum: f32,
}

/// What a block update hands back: how to rescale the accumulator, and how to turn this block's
/// raw scores into probabilities.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockStep {
    /// Multiply the output accumulator (and nothing else: `sum` is already rescaled) by this.
    pub alpha: f32,
    /// `-max·scale_log2` for the new maximum (0 while the row is fully masked, so that masked
    /// scores give `2^-inf = 0` rather than NaN).
    pub neg_max_scaled: f32,
    /// The row maximum (raw score), `-inf` while the row is fully masked.
    pub max: f32,
}

impl BlockStep {
    /// The probability offsets for a row whose maximum is `max` (no rescaling): what
    /// [`OnlineSoftmax::step`] returned, rebuilt from the maximum alone (kernels keep only the
    /// maximum across their rescale, to save registers).
    #[inline(always)]
    pub fn for_max(max: f32, scale_log2: f32) -> BlockStep {
        let neg_max_scaled = if max == f32::NEG_INFINITY { 0.0 } else { -max * scale_log2 };
        BlockStep { alpha: 1.0, neg_max_scaled, max }
    }

    /// The unnormalised probability of a raw score: `2^(s·scale_log2 − max·scale_log2)`, one
    /// FMA and one `exp2`. Accurate when [`BlockStep::fused_ok`]. A masked score (`-inf`)
    /// gives 0.
    #[inline(always)]
    pub fn prob(&self, score: f32, scale_log2: f32) -> f32 {
        exp2(fma(score, scale_log2, self.neg_max_scaled))
    }

    /// Whether [`BlockStep::prob`] is accurate for this row: `|max·scale_log2| <` [`FUSED_LIMIT`].
    #[inline(always)]
    pub fn fused_ok(&self) -> bool {
        self.neg_max_scaled.abs() < FUSED_LIMIT
    }

    /// The same probability as `2^((s − max)·scale_log2)`: right for any scale (the score
    /// equal to the maximum gives exactly 1). Used where [`BlockStep::fused_ok`] is false (the
    /// row then has a finite maximum).
    #[inline(always)]
    pub fn prob_exact(&self, score: f32, scale_log2: f32) -> f32 {
        exp2((score - self.max) * scale_log2)
    }

    /// [`BlockStep::prob`] or [`BlockStep::prob_exact`], whichever this row needs (for code
    /// that chooses per row; the tensor-core kernel chooses once per tile).
    #[inline(always)]
    pub fn prob_any(&self, score: f32, scale_log2: f32) -> f32 {
        if self.fused_ok() { self.prob(score, scale_log2) } else { self.prob_exact(score, scale_log2) }
    }
}

/// The finished row: multiply the accumulator by `inv_sum`; `lse` is the natural-log
/// log-sum-exp of the scaled scores, `ln Σ_j exp(c·s_j)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowResult {
    /// `1/l`, or 0 for a fully masked row (so its output is 0).
    pub inv_sum: f32,
    /// `ln Σ exp(c·s)`; `-inf` for a fully masked row.
    pub lse: f32,
}

impl Default for OnlineSoftmax {
    fn default() -> Self {
        Self::new()
    }
}

impl OnlineSoftmax {
    /// The state before any key: `max = -inf`, `sum = 0`.
    #[inline(always)]
    pub const fn new() -> Self {
        OnlineSoftmax { max: f32::NEG_INFINITY, sum: 0.0 }
    }

    /// Folds in the largest raw score of the next block of keys (`-inf` if the block is fully
    /// masked). Rescales `sum`, and returns the accumulator's factor and the probability offset.
    #[inline(always)]
    pub fn step(&mut self, block_max: f32, scale_log2: f32) -> BlockStep {
        let new_max = self.max.max(block_max);
        if new_max == f32::NEG_INFINITY {
            // Everything so far is masked: nothing is accumulated, nothing to rescale.
            return BlockStep { alpha: 1.0, neg_max_scaled: 0.0, max: new_max };
        }
        // `self.max == -inf` gives 2^-inf = 0: the (empty) accumulator is cleared, not NaN.
        let alpha = exp2((self.max - new_max) * scale_log2);
        self.max = new_max;
        self.sum *= alpha;
        BlockStep { alpha, neg_max_scaled: -new_max * scale_log2, max: new_max }
    }

    /// [`OnlineSoftmax::step`] that keeps the maximum it has (no rescale, `alpha` 1) unless the
    /// block's is more than [`LAZY_RESCALE_LOG2`] above it in `scale_log2` units: the reference
    /// `max` is then a lower bound of the row's maximum, the block's probabilities are at most
    /// `2^LAZY_RESCALE_LOG2` (256), and `sum` and the accumulator stay consistent with it — the
    /// output `acc / sum` and the log-sum-exp `max·c + ln(sum)` are the same up to rounding,
    /// while most tiles after the first skip the accumulator's rescale. For inference kernels
    /// (the training forward needs a row's largest probability exactly 1).
    #[inline(always)]
    pub fn step_lazy(&mut self, block_max: f32, scale_log2: f32) -> BlockStep {
        // (The first finite block: `(m − -inf)·c = inf` takes it; a masked block: `-inf`, or NaN
        // while everything is masked, keeps the maximum.)
        if (block_max - self.max) * scale_log2 > LAZY_RESCALE_LOG2 {
            return self.step(block_max, scale_log2);
        }
        let neg_max_scaled = if self.max == f32::NEG_INFINITY { 0.0 } else { -self.max * scale_log2 };
        BlockStep { alpha: 1.0, neg_max_scaled, max: self.max }
    }

    /// The probability offset for the maximum as it stands (no rescaling): for a second pass
    /// over scores that were all folded in already.
    #[inline(always)]
    pub fn current(&self, scale_log2: f32) -> BlockStep {
        BlockStep::for_max(self.max, scale_log2)
    }

    /// Adds this block's probabilities (their sum, or this thread's part of it).
    #[inline(always)]
    pub fn add(&mut self, block_sum: f32) {
        self.sum += block_sum;
    }

    /// Combines two states of the same row that saw disjoint sets of keys (for reductions across
    /// threads). Returns the factors to apply to each side's accumulator: `(alpha_self, alpha_other)`.
    #[inline(always)]
    pub fn merge(&mut self, other: OnlineSoftmax, scale_log2: f32) -> (f32, f32) {
        let new_max = self.max.max(other.max);
        if new_max == f32::NEG_INFINITY {
            // Both sides fully masked (sums 0), or NaN scores (a NaN sum must survive the merge).
            self.sum += other.sum;
            return (1.0, 1.0);
        }
        let a = exp2((self.max - new_max) * scale_log2);
        let b = exp2((other.max - new_max) * scale_log2);
        self.sum = self.sum * a + other.sum * b;
        self.max = new_max;
        (a, b)
    }

    /// The normaliser and log-sum-exp, once every key has been seen (with `sum` complete).
    ///
    /// `sum == 0` means every score was masked: output 0, log-sum-exp `-inf`. A NaN `sum` (a
    /// NaN score) gives NaN for both. The log-sum-exp is `max·scale + ln(sum)`, with the scale in
    /// natural units so that `max·scale_log2` cannot overflow where the result does not.
    #[inline(always)]
    pub fn finish(&self, scale_log2: f32) -> RowResult {
        if self.sum == 0.0 {
            return RowResult { inv_sum: 0.0, lse: f32::NEG_INFINITY };
        }
        RowResult { inv_sum: 1.0 / self.sum, lse: self.max * (scale_log2 * LN_2) + log2(self.sum) * LN_2 }
    }
}

/// The backward pass's probability of a raw score, recomputed from its row's log-sum-exp (the
/// natural-log value the forward pass writes): `P = exp(scale·s − lse) = 2^(s·scale_log2 −
/// lse·log2 e)`, one FMA and one `exp2`. A row that saw no key (`lse = -inf`) has no
/// probabilities: 0, so its gradients are exactly 0 (never NaN). The same as
/// [`prob_from_offset`] with the row's [`lse_offset`], the branch-free form the kernels use.
#[inline(always)]
pub fn prob_from_lse(score: f32, scale_log2: f32, lse: f32) -> f32 {
    if lse == f32::NEG_INFINITY {
        return 0.0;
    }
    prob_from_offset(score, scale_log2, lse_offset(lse))
}

/// The per-row term of [`prob_from_offset`]: `−lse·log2 e`, or `-inf` for a row that saw no
/// key (`lse = -inf`), whose probabilities are then 0 for every finite score.
#[inline(always)]
pub fn lse_offset(lse: f32) -> f32 {
    if lse == f32::NEG_INFINITY { f32::NEG_INFINITY } else { -lse * LOG2_E }
}

/// `2^(score·scale_log2 + offset)` with the row's [`lse_offset`]: [`prob_from_lse`] without a
/// branch per score (the kernels compute it for every score of a tile, masked ones included,
/// and select 0 for those).
#[inline(always)]
pub fn prob_from_offset(score: f32, scale_log2: f32, offset: f32) -> f32 {
    exp2(fma(score, scale_log2, offset))
}

/// Score modifiers between `scale·q·k` and the softmax, FlashAttention-2's: logit softcapping
/// (Gemma-2) and ALiBi (BLOOM, MPT). For a scaled score `s` of query `t` (of `len_q`) and key `j`
/// (of `len_k`):
///
/// ```text
/// logit = c·tanh(s / c) − slope·|t + len_k − len_q − j|
/// ```
///
/// (the softcap `c` first, where set; the ALiBi bias with the head's slope, where set; the
/// distance is bottom-right aligned like the causal mask). The backward needs
/// `∂logit/∂s = 1 − tanh²(s/c)` ([`ScoreMod::slope_of`]); the bias does not depend on Q or K.
///
/// **The softcap's `tanh`, accurate to about an ulp.** With `x = s/c` and `e = e^(−2|x|)`
/// (one `ex2`), `|tanh x| = (1 − e)/(1 + e)` (one reciprocal) for `|x| ≥` [`TANH_SMALL`], and an
/// odd polynomial `x + x³·P(x²)` below it, where `1 − e` would cancel (fitted on
/// `[0, TANH_SMALL]`: within 1.2 ulps of tanh in f32 arithmetic). The derivative
/// `1 − tanh² = 4e/(1 + e)²` has no cancellation anywhere. `e` underflows to 0 for large `|x|`:
/// `tanh = ±1`, derivative 0. The GPU's `tanh.approx.f32` would be one instruction but is off by
/// up to about 2⁻¹¹ — as much as f16's whole rounding of the logit; and `c − 2c/(e^(2x) + 1)`
/// loses the logit's relative accuracy near 0 (an error of `c·2⁻²³`, measured against the
/// oracle's log-sum-exp bound).
///
/// The CPU implementation and the GPU kernels (forward and backward, the tensor-core kernels'
/// masked instances) call these same functions.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScoreMod {
    /// Softcap `c` (0: none).
    pub softcap: f32,
    /// ALiBi slope of the head (0: none).
    pub alibi_slope: f32,
    /// `1/c` (0 without a softcap).
    inv_cap: f32,
}

/// Below this `|s/c|`, [`ScoreMod`]'s `tanh` is a polynomial ([`TANH_POLY`]).
pub const TANH_SMALL: f32 = 0.55;

/// `P` of `tanh x ≈ x + x³·P(x²)` on `|x| <` [`TANH_SMALL`], lowest degree first (a weighted
/// least-squares fit of the relative error, refined towards minimax).
pub const TANH_POLY: [f32; 5] = [-0.333_333_2, 0.133_326_16, -0.053_855_002, 0.021_081_619, -0.006_287_09];

impl ScoreMod {
    /// No modifier.
    pub const NONE: ScoreMod = ScoreMod { softcap: 0.0, alibi_slope: 0.0, inv_cap: 0.0 };

    /// The modifiers of one head: softcap `c` (0: none) and ALiBi slope (0: none).
    #[inline(always)]
    pub fn new(softcap: f32, alibi_slope: f32) -> Self {
        let inv_cap = if softcap > 0.0 { 1.0 / softcap } else { 0.0 };
        ScoreMod { softcap, alibi_slope, inv_cap }
    }

    /// Whether this modifies nothing.
    #[inline(always)]
    pub fn is_none(&self) -> bool {
        self.softcap == 0.0 && self.alibi_slope == 0.0
    }

    /// The softcapped scaled score `c·tanh(s/c)` and its derivative `1 − tanh²(s/c)`; without a
    /// softcap `(s, 1)`.
    #[inline(always)]
    pub fn capped(&self, s: f32) -> (f32, f32) {
        if self.softcap > 0.0 { self.softcapped(s) } else { (s, 1.0) }
    }

    /// [`ScoreMod::capped`] for a modifier known to have a softcap (no test: the kernels choose
    /// once per tile). Both forms of `tanh` are computed and one selected: no branch per score.
    #[inline(always)]
    pub fn softcapped(&self, s: f32) -> (f32, f32) {
        let x = s * self.inv_cap;
        let ax = x.abs();
        let e = exp2(ax * (-2.0 * LOG2_E));
        let q = rcp(1.0 + e);
        // |tanh x| = (1 − e)/(1 + e), with x's sign (it is ≥ 0).
        let big = f32::from_bits(((1.0 - e) * q).to_bits() | (x.to_bits() & 0x8000_0000));
        let u = x * x;
        let [p0, p1, p2, p3, p4] = TANH_POLY;
        let poly = fma(fma(fma(fma(p4, u, p3), u, p2), u, p1), u, p0);
        let small = fma(x * u, poly, x);
        let t = if ax < TANH_SMALL { small } else { big };
        (self.softcap * t, 4.0 * e * q * q)
    }

    /// The position of query `t` (of `len_q`) on the key axis: `t + len_k − len_q` (the key it
    /// is aligned with; ALiBi's distances are measured from it). Exact in f32 below 2^24 tokens.
    #[inline(always)]
    pub fn row_position(t: u32, len_q: u32, len_k: u32) -> f32 {
        // (Each term and the sum are integers below 2^24: exact.)
        t as f32 + (len_k as f32 - len_q as f32)
    }

    /// The ALiBi bias of key `key` (as f32) for the query at `row_position`:
    /// `slope·|row_position − key|`.
    #[inline(always)]
    pub fn bias(&self, row_position: f32, key: f32) -> f32 {
        self.alibi_slope * (row_position - key).abs()
    }

    /// The logit of scaled score `s` for the query at `row_position` ([`ScoreMod::row_position`])
    /// and key `key`.
    #[inline(always)]
    pub fn logit_at(&self, s: f32, row_position: f32, key: f32) -> f32 {
        self.capped(s).0 - self.bias(row_position, key)
    }

    /// The logit of scaled score `s` of query `t` and key `j`.
    #[inline(always)]
    pub fn logit(&self, s: f32, t: u32, j: u32, len_q: u32, len_k: u32) -> f32 {
        self.logit_at(s, Self::row_position(t, len_q, len_k), j as f32)
    }

    /// `∂logit/∂s` at scaled score `s`: `1 − tanh²(s/c)` with a softcap, else 1.
    #[inline(always)]
    pub fn slope_of(&self, s: f32) -> f32 {
        self.capped(s).1
    }
}

/// The backward pass's per-row statistics, one pass over a row's keys with the recomputed
/// probabilities `P_j` (from the log-sum-exp) and `dP_j = dO·v_j`:
///
/// - `sum = Σ_j P_j`, so that `P_j / sum` sums to 1 exactly in f32 (an f32 log-sum-exp in the
///   thousands is off by a rounding that is common to the row's `P`: dividing removes it);
/// - a **pivot**, the `dP` of the most probable key, and `rel = Σ_j P_j·(dP_j − pivot)`: then
///   `D = Σ_j P_j·dP_j / sum = pivot + rel / sum`, and the backward forms
///   `dS_j = P_j/sum · ((dP_j − pivot) − rel/sum)`, where the dominant key of a nearly one-hot row
///   contributes exactly 0 to `rel` and `dP_j − pivot` is exact for it.
///
/// Not FlashAttention-2's `D = rowsum(dO ∘ O)`: O rounded to the storage type is off by
/// `u·|O|`, which costs dQ and dK many times the input-precision baseline's error on nearly
/// one-hot or uniform rows (`kernels-gpu/NOTES.md`, backward). The CPU backward and the GPU
/// preprocessing kernel both run this recurrence; on the GPU each lane of a quad keeps its own
/// `sum` and `rel` for the keys it holds, with the quad's common pivot ([`GradRow::see`] is
/// linear in them), and the four are added at the end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradRow {
    /// The largest probability seen (the pivot's key), 0 before any.
    pub best: f32,
    /// `dP` of that key.
    pub pivot: f32,
    /// `Σ P` (of this thread's keys).
    pub sum: f32,
    /// `Σ P·(dP − pivot)` (of this thread's keys).
    pub rel: f32,
}

impl Default for GradRow {
    fn default() -> Self {
        Self::new()
    }
}

impl GradRow {
    /// No key seen.
    #[inline(always)]
    pub const fn new() -> GradRow {
        GradRow { best: 0.0, pivot: 0.0, sum: 0.0, rel: 0.0 }
    }

    /// A candidate pivot `(p, dp)` (the most probable key of a tile, or any key): if it is more
    /// probable than the current one it becomes the pivot, and `rel` is re-based onto it:
    /// `Σ P(dP − new) = Σ P(dP − old) + (old − new)·Σ P`.
    #[inline(always)]
    pub fn see(&mut self, p: f32, dp: f32) {
        if p > self.best {
            self.rel += (self.pivot - dp) * self.sum;
            self.best = p;
            self.pivot = dp;
        }
    }

    /// Adds one key (after [`GradRow::see`] has seen it or a more probable one).
    #[inline(always)]
    pub fn add(&mut self, p: f32, dp: f32) {
        self.sum += p;
        self.rel += p * (dp - self.pivot);
    }

    /// With `sum` and `rel` complete: `(1/Σ P, rel/Σ P)`, the factor that normalises the row's
    /// probabilities and `D − pivot`; `(0, 0)` for a row without probabilities (no visible key,
    /// or every one underflowed), whose gradients are then exactly 0.
    #[inline(always)]
    pub fn finish(sum: f32, rel: f32) -> (f32, f32) {
        if sum > 0.0 {
            let inv = 1.0 / sum;
            (inv, rel * inv)
        } else {
            (0.0, 0.0)
        }
    }

    /// `dS` of one key: `P·((dP − pivot) − d_rel)`, with `p` already normalised.
    #[inline(always)]
    pub fn ds(p: f32, dp: f32, pivot: f32, d_rel: f32) -> f32 {
        p * ((dp - pivot) - d_rel)
    }
}

/// Merging split-KV partial results: each split of a row's keys finished on its own, with a
/// normalised output `o_s` and a log-sum-exp `lse_s`; the row's output is
/// `Σ_s w_s·o_s / Σ_s w_s` with `w_s = exp(lse_s − max_s lse_s)`, and its log-sum-exp is
/// `max + ln Σ_s w_s`. Two passes over the splits' log-sum-exps: [`SplitMerge::see`] each
/// (the maximum), then [`SplitMerge::weight`] each, and [`SplitMerge::finish`] with the sum.
///
/// The same rules as one pass over all keys: a split that saw no visible key (`lse_s = -inf`)
/// weighs 0; a row whose every split is empty finishes with output 0 (or NaN, if a split's
/// output is NaN, as an unsplit pass that met NaN values would) and log-sum-exp `-inf`; a NaN
/// log-sum-exp makes the row NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SplitMerge {
    /// The largest log-sum-exp seen (NaN once a NaN was seen; `-inf` while every split is empty).
    pub max: f32,
}

impl Default for SplitMerge {
    fn default() -> Self {
        Self::new()
    }
}

impl SplitMerge {
    /// Before any split.
    #[inline(always)]
    pub const fn new() -> Self {
        SplitMerge { max: f32::NEG_INFINITY }
    }

    /// Folds one split's log-sum-exp into the maximum (NaN sticks).
    #[inline(always)]
    pub fn see(&mut self, lse: f32) {
        if lse.is_nan() || lse > self.max {
            self.max = lse;
        }
    }

    /// The weight of a split with log-sum-exp `lse`, once every split was seen: 0 for an empty
    /// split and for every split of a row with no visible key, 1 for the largest.
    #[inline(always)]
    pub fn weight(&self, lse: f32) -> f32 {
        if self.max == f32::NEG_INFINITY {
            0.0
        } else if lse == self.max {
            1.0
        } else {
            exp2((lse - self.max) * LOG2_E)
        }
    }

    /// The normaliser (multiply `Σ w_s·o_s` by `inv_sum`) and the row's log-sum-exp, from the sum
    /// of the weights.
    #[inline(always)]
    pub fn finish(&self, weight_sum: f32) -> RowResult {
        if weight_sum == 0.0 {
            return RowResult { inv_sum: 0.0, lse: f32::NEG_INFINITY };
        }
        RowResult { inv_sum: 1.0 / weight_sum, lse: self.max + log2(weight_sum) * LN_2 }
    }
}

#[cfg(test)]
mod tests {

    /// The modifiers' formula on a few points: softcap bends and bounds, ALiBi's distance is
    /// bottom-right aligned and absolute, the derivative is the softcap's.
    #[test]
    fn score_mod_formula() {
        let none = ScoreMod::default();
        assert!(none.is_none());
        assert_eq!(none.logit(7.5, 3, 9, 4, 10), 7.5);
        let cap = ScoreMod::new(2.0, 0.0);
        assert!((cap.logit(100.0, 0, 0, 1, 1) - 2.0).abs() < 1e-6);
        assert_eq!(cap.logit(-1e30, 0, 0, 1, 1), -2.0);
        assert_eq!(cap.logit(f32::INFINITY, 0, 0, 1, 1), 2.0);
        assert!(cap.logit(f32::NAN, 0, 0, 1, 1).is_nan());
        // Against f64's tanh: within 2 ulps of the logit (relative), on both sides of the
        // polynomial's range, near 0 and in the saturated tails; the derivative within a few.
        for i in -40000..=40000 {
            let s = i as f32 * 0.001 + 1e-4;
            let th = (s as f64 / 2.0).tanh();
            let got = cap.logit(s, 0, 0, 1, 1) as f64;
            assert!((got - 2.0 * th).abs() <= 2.0 * f32::EPSILON as f64 * (2.0 * th).abs(), "s = {s}: {got}");
            // (1 − tanh² as 1/cosh²: f64's 1 − th² cancels in the tails.)
            let want = 1.0 / (s as f64 / 2.0).cosh().powi(2);
            // (`e^(−2|x|)` carries the rounding of its argument, `|x|·ε`, as a relative error.)
            let ulps = 4.0 + 4.0 * (s as f64 / 2.0).abs();
            assert!((cap.slope_of(s) as f64 - want).abs() <= ulps * f32::EPSILON as f64 * want, "s = {s}");
        }
        assert_eq!(cap.slope_of(1e30), 0.0);
        // Query 3 of 4 against 10 keys sits at key 9: key 9 is at distance 0, key 4 at 5, and a
        // key after the diagonal (non-causal) at its absolute distance.
        let alibi = ScoreMod::new(0.0, 0.5);
        assert_eq!(alibi.logit(1.0, 3, 9, 4, 10), 1.0);
        assert_eq!(alibi.logit(1.0, 3, 4, 4, 10), 1.0 - 2.5);
        assert_eq!(alibi.logit(1.0, 0, 9, 4, 10), 1.0 - 1.5);
        assert_eq!(alibi.slope_of(123.0), 1.0);
    }

    /// The lazy step gives the same output and log-sum-exp as the eager one (up to rounding),
    /// keeps its maximum while blocks stay within `2^8`, and takes a new one past that; masked
    /// blocks and rows stay as the eager step leaves them.
    #[test]
    fn lazy_step_matches_the_eager_one() {
        let c = 0.125 * LOG2_E;
        // Blocks of (score, value) pairs; block 3 jumps by 80 (80·c ≈ 14.4 > 8), block 4 is masked.
        let blocks: [&[(f32, f32)]; 5] = [
            &[(1.0, 2.0), (3.0, -1.0)],
            &[(20.0, 0.5), (-4.0, 7.0)],
            &[(40.0, 1.5), (2.0, -3.0)],
            &[(120.0, 0.25), (100.0, 4.0)],
            &[(f32::NEG_INFINITY, 9.0)],
        ];
        let run = |lazy: bool| {
            let (mut st, mut acc, mut maxima) = (OnlineSoftmax::new(), 0.0f32, [0.0f32; 5]);
            for (i, b) in blocks.iter().enumerate() {
                let m = b.iter().map(|x| x.0).fold(f32::NEG_INFINITY, f32::max);
                let step = if lazy { st.step_lazy(m, c) } else { st.step(m, c) };
                acc *= step.alpha;
                let mut sum = 0.0;
                for &(s, v) in b.iter() {
                    let p = step.prob(s, c);
                    assert!(p <= 2f32.powf(LAZY_RESCALE_LOG2), "{p}");
                    sum += p;
                    acc += p * v;
                }
                st.add(sum);
                maxima[i] = st.max;
            }
            let r = st.finish(c);
            (acc * r.inv_sum, r.lse, maxima)
        };
        let (eager, lazy) = (run(false), run(true));
        assert!((eager.0 - lazy.0).abs() <= 1e-5 * eager.0.abs(), "{eager:?} {lazy:?}");
        assert!((eager.1 - lazy.1).abs() <= 1e-5 * eager.1.abs(), "{eager:?} {lazy:?}");
        // The lazy maximum: 3 (first block), kept through 20 and 40 ((40 − 3)·c ≈ 6.7), 120 at the
        // jump, kept through the masked block.
        assert_eq!(lazy.2, [3.0, 3.0, 3.0, 120.0, 120.0]);
        assert_eq!(eager.2, [3.0, 20.0, 40.0, 120.0, 120.0]);
        // A fully masked row stays empty, never NaN.
        let mut st = OnlineSoftmax::new();
        let step = st.step_lazy(f32::NEG_INFINITY, c);
        assert_eq!((step.alpha, step.neg_max_scaled, st.max, st.sum), (1.0, 0.0, f32::NEG_INFINITY, 0.0));
        assert_eq!(st.finish(c), RowResult { inv_sum: 0.0, lse: f32::NEG_INFINITY });
    }

    /// The streaming pivot (re-based whenever a more probable key arrives, in any order and in
    /// any grouping) gives the same D as choosing the most probable key first.
    #[test]
    fn grad_row_streaming_matches_two_passes() {
        let keys: [(f32, f32); 6] =
            [(0.05, 3.0), (0.5, -1.0), (0.1, 2.5), (0.3, 0.25), (0.04, -7.0), (0.01, 1.0)];
        let sum: f32 = keys.iter().map(|k| k.0).sum();
        let d: f32 = keys.iter().map(|k| k.0 * k.1).sum::<f32>() / sum;
        for order in [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [1, 0, 3, 2, 5, 4]] {
            let mut row = GradRow::new();
            for &i in &order {
                row.see(keys[i].0, keys[i].1);
                row.add(keys[i].0, keys[i].1);
            }
            assert_eq!((row.best, row.pivot), (0.5, -1.0));
            let (inv, d_rel) = GradRow::finish(row.sum, row.rel);
            assert!((inv - 1.0 / sum).abs() < 1e-6);
            assert!((row.pivot + d_rel - d).abs() < 1e-5, "{order:?}");
        }
        // A row with one key: dS = 0 exactly; a row without probabilities: zeros.
        let mut one = GradRow::new();
        one.see(1.0, 4.75);
        one.add(1.0, 4.75);
        let (inv, d_rel) = GradRow::finish(one.sum, one.rel);
        assert_eq!(GradRow::ds(inv, 4.75, one.pivot, d_rel), 0.0);
        assert_eq!(GradRow::finish(0.0, 0.0), (0.0, 0.0));
    }
    use super::*;
    use std::vec::Vec;

    /// Straightforward softmax-weighted sum of scalar "values" in f64.
    fn direct(scores: &[f32], values: &[f32], c: f32) -> (f64, f64) {
        let m = scores.iter().fold(f64::NEG_INFINITY, |m, &s| m.max(s as f64 * c as f64));
        let w: Vec<f64> = scores.iter().map(|&s| (s as f64 * c as f64 - m).exp()).collect();
        let l: f64 = w.iter().sum();
        let o = w.iter().zip(values).map(|(w, &v)| w * v as f64).sum::<f64>() / l;
        (o, m + l.ln())
    }

    fn tiled(scores: &[f32], values: &[f32], c: f32, block: usize) -> (f32, f32) {
        let c2 = c * LOG2_E;
        let mut st = OnlineSoftmax::new();
        let mut acc = 0.0f32;
        for (s, v) in scores.chunks(block).zip(values.chunks(block)) {
            let bm = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let step = st.step(bm, c2);
            acc *= step.alpha;
            let mut sum = 0.0;
            for (&x, &y) in s.iter().zip(v) {
                let p = step.prob_any(x, c2);
                sum += p;
                acc += p * y;
            }
            st.add(sum);
        }
        let r = st.finish(c2);
        (acc * r.inv_sum, r.lse)
    }

    #[test]
    fn tiled_equals_direct_for_any_block_size() {
        let scores: Vec<f32> = (0..37).map(|i| ((i * 7919) % 101) as f32 / 10.0 - 5.0).collect();
        let values: Vec<f32> = (0..37).map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0).collect();
        let (o, lse) = direct(&scores, &values, 0.3);
        for block in [1, 2, 5, 16, 37, 64] {
            let (to, tl) = tiled(&scores, &values, 0.3, block);
            assert!((to as f64 - o).abs() < 1e-5, "block {block}: {to} vs {o}");
            assert!((tl as f64 - lse).abs() < 1e-4, "block {block}: lse {tl} vs {lse}");
        }
    }

    #[test]
    fn fully_masked_row_gives_zero_and_neg_inf() {
        let scores = [f32::NEG_INFINITY; 9];
        let (o, lse) = tiled(&scores, &[1.0; 9], 0.5, 4);
        assert_eq!(o, 0.0);
        assert_eq!(lse, f32::NEG_INFINITY);
    }

    #[test]
    fn masked_prefix_then_scores_has_no_nan() {
        let mut scores = [f32::NEG_INFINITY; 8];
        scores[6] = 3.0;
        scores[7] = 1000.0;
        let (o, lse) = tiled(&scores, &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, -1.0], 1.0, 3);
        assert!(o.is_finite() && lse.is_finite(), "{o} {lse}");
        assert!((o - -1.0).abs() < 1e-6);
        assert!((lse - 1000.0).abs() < 1e-3);
    }

    #[test]
    fn huge_logits_do_not_overflow() {
        let scores = [5000.0f32, 4999.0, -3000.0, 5000.0];
        let (o, lse) = tiled(&scores, &[1.0, 2.0, 3.0, 4.0], 1.0, 1);
        let (eo, el) = direct(&scores, &[1.0, 2.0, 3.0, 4.0], 1.0);
        assert!((o as f64 - eo).abs() < 1e-5 && (lse as f64 - el).abs() < 1e-2, "{o} {lse}");
    }

    #[test]
    fn huge_scale_is_exact() {
        // scale·max far beyond 2^30: the one-FMA form would give 2^(±10^28) for the largest score.
        let scores = [3.0f32, 2.5, 3.0, -1.0];
        let values = [1.0f32, 5.0, 3.0, 7.0];
        for c in [1e12f32, 1e35, 1e38] {
            let (o, lse) = tiled(&scores, &values, c, 2);
            assert_eq!(o, 2.0, "scale {c}: ties at the maximum average");
            let want = c as f64 * 3.0 + 2f64.ln();
            assert!(((lse as f64 - want) / want).abs() < 1e-6, "scale {c}: lse {lse} vs {want}");
        }
    }

    #[test]
    fn nan_score_gives_nan_not_masked() {
        let (o, lse) = tiled(&[f32::NAN; 5], &[1.0; 5], 0.5, 2);
        assert!(o.is_nan() && lse.is_nan(), "{o} {lse}");
        let (o, lse) = tiled(&[1.0, f32::NAN, 2.0], &[1.0; 3], 0.5, 2);
        assert!(o.is_nan() && lse.is_nan(), "{o} {lse}");
    }

    #[test]
    fn merge_matches_sequential() {
        let c2 = 0.7 * LOG2_E;
        let mut a = OnlineSoftmax::new();
        let sa = a.step(3.0, c2);
        a.add(sa.prob(3.0, c2) + sa.prob(1.0, c2));
        let mut b = OnlineSoftmax::new();
        let sb = b.step(5.0, c2);
        b.add(sb.prob(5.0, c2));
        let mut seq = OnlineSoftmax::new();
        let s = seq.step(5.0, c2);
        seq.add(s.prob(3.0, c2) + s.prob(1.0, c2) + s.prob(5.0, c2));
        a.merge(b, c2);
        assert!((a.sum - seq.sum).abs() < 1e-6 && a.max == seq.max);
        let mut empty = OnlineSoftmax::new();
        let (x, y) = empty.merge(OnlineSoftmax::new(), c2);
        assert_eq!((x, y, empty.sum, empty.max), (1.0, 1.0, 0.0, f32::NEG_INFINITY));
        // A thread that saw only NaN scores (max -inf, sum NaN) keeps the NaN through merges.
        let mut nan = OnlineSoftmax { max: f32::NEG_INFINITY, sum: f32::NAN };
        nan.merge(OnlineSoftmax::new(), c2);
        assert!(nan.sum.is_nan());
        let mut empty = OnlineSoftmax::new();
        empty.merge(OnlineSoftmax { max: f32::NEG_INFINITY, sum: f32::NAN }, c2);
        assert!(empty.sum.is_nan() && empty.finish(c2).lse.is_nan());
    }

    /// Splits a row into pieces, finishes each, merges them: the same as one pass.
    fn split_then_merge(scores: &[f32], values: &[f32], c: f32, cuts: &[usize]) -> (f32, f32) {
        let mut parts = Vec::new();
        let mut start = 0;
        for &end in cuts.iter().chain(core::iter::once(&scores.len())) {
            parts.push(tiled(&scores[start..end], &values[start..end], c, 3));
            start = end;
        }
        let mut m = SplitMerge::new();
        parts.iter().for_each(|&(_, lse)| m.see(lse));
        let (mut acc, mut sum) = (0.0f32, 0.0f32);
        for &(o, lse) in &parts {
            let w = m.weight(lse);
            acc += w * o;
            sum += w;
        }
        let r = m.finish(sum);
        (acc * r.inv_sum, r.lse)
    }

    #[test]
    fn split_merge_matches_one_pass() {
        let scores: Vec<f32> = (0..41).map(|i| ((i * 7919) % 103) as f32 / 9.0 - 5.0).collect();
        let values: Vec<f32> = (0..41).map(|i| ((i * 37) % 19) as f32 / 7.0 - 1.0).collect();
        let (o, lse) = direct(&scores, &values, 0.4);
        for cuts in [&[][..], &[1], &[20], &[0, 0, 13, 13, 40], &[5, 10, 15, 20, 25, 30, 35]] {
            let (so, sl) = split_then_merge(&scores, &values, 0.4, cuts);
            assert!((so as f64 - o).abs() < 1e-5, "cuts {cuts:?}: {so} vs {o}");
            assert!((sl as f64 - lse).abs() < 1e-4, "cuts {cuts:?}: lse {sl} vs {lse}");
        }
    }

    #[test]
    fn split_merge_masked_and_nan() {
        // A split with every key masked weighs nothing; all of them masked is the masked row.
        let mut scores = [f32::NEG_INFINITY; 12];
        scores[10] = 2.0;
        let values = [3.0f32; 12];
        let (o, lse) = split_then_merge(&scores, &values, 1.0, &[4, 8]);
        assert!((o - 3.0).abs() < 1e-6 && (lse - 2.0).abs() < 1e-6, "{o} {lse}");
        let (o, lse) = split_then_merge(&[f32::NEG_INFINITY; 6], &[1.0; 6], 1.0, &[2, 4]);
        assert_eq!((o, lse), (0.0, f32::NEG_INFINITY));
        // A NaN score in any split makes the row NaN.
        let mut scores = [1.0f32; 9];
        scores[7] = f32::NAN;
        let (o, lse) = split_then_merge(&scores, &[1.0; 9], 1.0, &[3, 6]);
        assert!(o.is_nan() && lse.is_nan(), "{o} {lse}");
        // An infinite log-sum-exp (a huge scale) is the largest and weighs 1.
        let mut m = SplitMerge::new();
        m.see(1.0);
        m.see(f32::INFINITY);
        assert_eq!((m.weight(f32::INFINITY), m.weight(1.0)), (1.0, 0.0));
        assert_eq!(m.finish(1.0).lse, f32::INFINITY);
    }
}

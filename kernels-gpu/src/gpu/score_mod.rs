//! Score modifiers (softcap, ALiBi) on the tensor-core kernels' score tiles: the masked
//! instances (forward and backward) turn each raw score `q·k` into its logit
//! ([`ScoreMod::logit_at`] of the scaled score) before the softmax, for problems that have
//! modifiers. The host then passes `scale_log2 = log2(e)` (the recurrence runs on logits) and
//! the softmax scale as `logit_scale`.
//!
//! The kind of modifier is chosen once per tile ([`ModKind`], a warp-uniform branch), so each
//! score costs what its modifiers need and nothing is tested per score.

use super::arch::global;
use super::sequence::SeqView;
use crate::params::AttnParams;
use crate::softmax::ScoreMod;

/// No modifier.
pub const MOD_NONE: u32 = 0;
/// ALiBi only: `scale·s − slope·|pos − key|`, derivative 1.
pub const MOD_ALIBI: u32 = 1;
/// A softcap (and ALiBi, with a slope of 0 where there is none).
pub const MOD_SOFTCAP: u32 = 2;

/// Which of [`MOD_NONE`], [`MOD_ALIBI`], [`MOD_SOFTCAP`] the problem needs.
#[inline(always)]
pub fn mod_kind(p: &AttnParams) -> u32 {
    if p.softcap > 0.0 {
        MOD_SOFTCAP
    } else if p.alibi_slopes != 0 {
        MOD_ALIBI
    } else {
        MOD_NONE
    }
}

/// One (query head, sequence)'s modifiers, as a tile applies them.
#[derive(Clone, Copy)]
pub struct HeadMod {
    /// The head's softcap and slope.
    pub sm: ScoreMod,
    /// The softmax scale (raw score → scaled score).
    pub scale: f32,
    /// `len_k − len_q` (f32): query `t` sits at key position `t + lead`.
    pub lead: f32,
}

impl HeadMod {
    /// No modifiers (what [`HeadMod::logit`] of kind [`MOD_NONE`] ignores).
    pub const NONE: HeadMod = HeadMod { sm: ScoreMod::NONE, scale: 0.0, lead: 0.0 };

    /// The modifiers of query head `h` in sequence `seq`.
    ///
    /// # Safety
    /// `p.alibi_slopes`, where set, holds one f32 per query head (host sizing).
    #[inline(always)]
    pub unsafe fn of(p: &AttnParams, seq: &SeqView, h: u32) -> HeadMod {
        let slope = if p.alibi_slopes != 0 {
            // SAFETY: the caller's contract.
            unsafe { global::load_f32(p.alibi_slopes + 4 * h as u64) }
        } else {
            0.0
        };
        HeadMod {
            sm: ScoreMod::new(p.softcap, slope),
            scale: p.logit_scale,
            lead: seq.len_k as f32 - seq.len_q as f32,
        }
    }

    /// The key position of query row `t` ([`ScoreMod::row_position`]).
    #[inline(always)]
    pub fn position(&self, t: u32) -> f32 {
        t as f32 + self.lead
    }

    /// The logit of raw score `raw` at row position `pos` and key `key`, and `∂logit/∂(scaled
    /// score)`, for modifier kind `M` (the derivative is 1 unless `M` has a softcap).
    #[inline(always)]
    pub fn logit<const M: u32>(&self, raw: f32, pos: f32, key: f32) -> (f32, f32) {
        match M {
            MOD_NONE => (raw, 1.0),
            MOD_ALIBI => (raw * self.scale - self.sm.bias(pos, key), 1.0),
            _ => {
                let (capped, slope) = self.sm.softcapped(raw * self.scale);
                (capped - self.sm.bias(pos, key), slope)
            }
        }
    }
}

/// Every raw score of a warp's `mma` accumulator tile (rows `row0 + 16·mi + g + 8·half`, keys
/// `key0 + 8·nt + 2·t4 + e`, `(g, t4)` the lane's quad coordinates) becomes its logit, for
/// modifier kind `M`.
#[inline(always)]
pub fn logits<const M: u32, const MI: usize, const NT: usize>(
    hm: &HeadMod,
    s: &mut [[[f32; 4]; NT]; MI],
    row0: u32,
    key0: u32,
    (g, t4): (u32, u32),
) {
    let key = (key0 + 2 * t4) as f32;
    for (mi, sm) in s.iter_mut().enumerate() {
        for half in 0..2 {
            let pos = hm.position(row0 + 16 * mi as u32 + g + 8 * half as u32);
            for (nt, st) in sm.iter_mut().enumerate() {
                for e in 0..2 {
                    let x = &mut st[2 * half + e];
                    *x = hm.logit::<M>(*x, pos, key + (8 * nt + e) as f32).0;
                }
            }
        }
    }
}

/// [`logits`] for the problem's kind of modifier (a warp-uniform choice; nothing without one).
///
/// # Safety
/// As [`HeadMod::of`].
#[inline(always)]
pub unsafe fn apply<const MI: usize, const NT: usize>(
    p: &AttnParams,
    seq: &SeqView,
    h: u32,
    s: &mut [[[f32; 4]; NT]; MI],
    row0: u32,
    key0: u32,
    quad: (u32, u32),
) {
    let kind = mod_kind(p);
    if kind == MOD_NONE {
        return;
    }
    // SAFETY: the caller's contract.
    let hm = unsafe { HeadMod::of(p, seq, h) };
    if kind == MOD_ALIBI {
        logits::<MOD_ALIBI, MI, NT>(&hm, s, row0, key0, quad);
    } else {
        logits::<MOD_SOFTCAP, MI, NT>(&hm, s, row0, key0, quad);
    }
}

/// [`apply`] for the Hopper kernel's flat accumulator layout: score `4·nt + 2·half + e` of the
/// lane is row `row + 8·half` (`row` already holds the lane's `g`), key `key0 + 8·nt + 2·t4 + e`.
///
/// # Safety
/// As [`HeadMod::of`].
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn apply_flat<const SN: usize>(
    p: &AttnParams,
    seq: &SeqView,
    h: u32,
    s: &mut [f32; SN],
    row: u32,
    key0: u32,
    t4: u32,
) {
    let kind = mod_kind(p);
    if kind == MOD_NONE {
        return;
    }
    // SAFETY: the caller's contract.
    let hm = unsafe { HeadMod::of(p, seq, h) };
    if kind == MOD_ALIBI {
        logits_flat::<MOD_ALIBI, SN>(&hm, s, row, key0, t4);
    } else {
        logits_flat::<MOD_SOFTCAP, SN>(&hm, s, row, key0, t4);
    }
}

/// [`logits`] on the flat layout of [`apply_flat`].
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
fn logits_flat<const M: u32, const SN: usize>(hm: &HeadMod, s: &mut [f32; SN], row: u32, key0: u32, t4: u32) {
    let key = (key0 + 2 * t4) as f32;
    for half in 0..2 {
        let pos = hm.position(row + 8 * half as u32);
        for nt in 0..SN / 4 {
            for e in 0..2 {
                let x = &mut s[4 * nt + 2 * half + e];
                *x = hm.logit::<M>(*x, pos, key + (8 * nt + e) as f32).0;
            }
        }
    }
}

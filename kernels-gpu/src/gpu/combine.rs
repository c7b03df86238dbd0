//! The split-KV combine kernel: merges the partial outputs of the splits of each query row
//! (written in f32 by the tensor-core kernel with `p.splits > 1`) into the output, in the
//! storage type, and the log-sum-exp.
//!
//! On sm_90 it is launched as a programmatic dependent of the forward kernel (its launch overlaps
//! the forward's last blocks; [`wait_for_previous_grid`] holds its reads until the forward is done).
//!
//! One warp per query row, [`COMBINE_WARPS`] rows per block; the grid is (row groups of the
//! longest sequence, query heads, sequences), like the forward kernel's. The merge itself is
//! [`SplitMerge`], the rule the CPU tests check. Two rounds of memory reads, each with all its
//! loads in flight together (one split after another would wait a full memory latency per
//! split, which at 64 splits costs more than a small batch's forward kernel):
//! 1. lane `l` reads the log-sum-exps of splits `l, l + 32, l + 64, l + 96` (at most
//!    [`MAX_SPLITS`] = 128) into registers; the warp reduces their maximum, then their weights
//!    `exp(lse_s − max)` and the weights' sum, with shuffles;
//! 2. each lane accumulates `Σ w_s·o_s` for its 4 columns of every 128-column pass, four splits
//!    at a time, taking each split's weight from the lane that holds it.

use super::arch::global::{load_f32_rw, load_f32x4_rw, store_f32, store_u32x2};
use super::arch::mma::{Bf16, F16, MmaElement};
use super::arch::shuffle;
use super::arch::thread::{block_x, block_y, block_z, thread_x, wait_for_previous_grid};
use super::sequence::SeqView;
use crate::params::{AttnParams, COMBINE_WARPS, MAX_SPLITS, partial_index};
use crate::softmax::SplitMerge;

/// Splits each lane holds in round 1.
const SPLITS_PER_LANE: usize = (MAX_SPLITS / 32) as usize;
const _: () = assert!(MAX_SPLITS % 32 == 0);

/// The kernel body.
///
/// # Safety
/// `p` as for the forward kernel that wrote the partials (the same struct), with
/// `p.head_dim` a multiple of 4 and O's rows 8-byte aligned; launch with `32·COMBINE_WARPS`
/// threads.
#[inline(always)]
unsafe fn combine<E: MmaElement>(p: &AttnParams) {
    // On sm_90 the host launches this kernel as a programmatic dependent of the forward kernel
    // (it starts while the forward's last blocks finish): nothing is read before that grid is
    // done, and the partials are read with coherent loads (not `.nc`: they are written while this
    // grid exists).
    wait_for_previous_grid();
    let (warp, lane) = (thread_x() / 32, thread_x() % 32);
    let (h, z) = (block_y(), block_z());
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(p, z) };
    let t = block_x() * COMBINE_WARPS + warp;
    if t >= seq.len_q {
        return;
    }
    let row = seq.lse_index(p, h, t);
    let splits = p.splits.max(1) as u64;
    let d = p.head_dim as u64;
    let lse_of = |s: u64| {
        // SAFETY: split `s` < splits, row < partial_rows: inside the partial log-sum-exps.
        unsafe { load_f32_rw(p.partial_lse + 4 * partial_index(s, p.partial_rows, row)) }
    };
    // Round 1: this lane's splits' log-sum-exps (−inf past the last split: weight 0).
    let mut lse = [f32::NEG_INFINITY; SPLITS_PER_LANE];
    for (k, l) in lse.iter_mut().enumerate() {
        let sp = lane as u64 + 32 * k as u64;
        if sp < splits {
            *l = lse_of(sp);
        }
    }
    let mut merge = SplitMerge::new();
    lse.iter().for_each(|&l| merge.see(l));
    for m in [16, 8, 4, 2, 1] {
        merge.see(shuffle::xor(merge.max, m));
    }
    let weights = lse.map(|l| merge.weight(l));
    let mut weight_sum: f32 = weights.iter().sum();
    for m in [16, 8, 4, 2, 1] {
        weight_sum += shuffle::xor(weight_sum, m);
    }
    let res = merge.finish(weight_sum);
    // Round 2: the partial outputs. Split `32·k + j`'s weight is lane `j`'s `weights[k]`.
    let partial = |sp: u64, c: u64| {
        let at = p.partial_o + 4 * (partial_index(sp, p.partial_rows, row) * d + c);
        // SAFETY: columns c..c+4 ≤ d of a partial row, 16-byte aligned (d % 4 == 0).
        unsafe { load_f32x4_rw(at) }
    };
    let mut c = 4 * lane as u64;
    // Every lane runs every pass (the shuffles need the whole warp); lanes past the head dim
    // read and write nothing.
    let passes = d.div_ceil(128);
    for _ in 0..passes {
        let inside = c < d;
        let mut acc = [0.0f32; 4];
        for (k, &wk) in weights.iter().enumerate() {
            let base = 32 * k as u64;
            let n = splits.saturating_sub(base).min(32);
            let mut j = 0;
            while j < n {
                let group = (n - j).min(4);
                let mut x = [[0.0f32; 4]; 4];
                for (g, xg) in x.iter_mut().enumerate() {
                    if inside && (g as u64) < group {
                        *xg = partial(base + j + g as u64, c);
                    }
                }
                for (g, xg) in x.iter().enumerate() {
                    // All lanes shuffle (`j + g` may pass the split count: its weight is 0).
                    let w = shuffle::idx(wk, (j + g as u64) as u32 % 32);
                    if (g as u64) < group {
                        for (a, xv) in acc.iter_mut().zip(xg) {
                            *a += w * xv;
                        }
                    }
                }
                j += 4;
            }
        }
        if inside {
            let packed = [
                E::pack(acc[0] * res.inv_sum, acc[1] * res.inv_sum),
                E::pack(acc[2] * res.inv_sum, acc[3] * res.inv_sum),
            ];
            let dst = p.o + 2 * (seq.offset(&p.o_strides, seq.q_start, t, h) + c);
            // SAFETY: columns c..c+4 ≤ d of output row (t, h), 8-byte aligned (host checks).
            unsafe { store_u32x2(dst, packed) };
        }
        c += 128;
    }
    if lane == 0 && p.lse != 0 {
        // SAFETY: inside the log-sum-exp output (host sizing).
        unsafe { store_f32(p.lse + 4 * row, res.lse) };
    }
}

/// Split-KV combine, f16 output.
///
/// # Safety
/// See [`combine`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn flash_combine_f16(p: AttnParams) {
    // SAFETY: forwarded contract.
    unsafe { combine::<F16>(&p) }
}

/// Split-KV combine, bf16 output.
///
/// # Safety
/// See [`combine`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn flash_combine_bf16(p: AttnParams) {
    // SAFETY: forwarded contract.
    unsafe { combine::<Bf16>(&p) }
}

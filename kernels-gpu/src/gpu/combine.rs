//! The split-KV combine kernel: merges the partial outputs of the splits of each query row
//! (written in f32 by the tensor-core kernel with `p.splits > 1`) into the output, in the
//! storage type, and the log-sum-exp.
//!
//! One warp per query row, [`COMBINE_WARPS`] rows per block; the grid is (row groups of the
//! longest sequence, query heads, sequences), like the forward kernel's. The merge itself is
//! [`SplitMerge`], the rule the CPU tests check: the lanes share the splits for the two passes
//! over the log-sum-exps (their maximum, then the sum of the weights `exp(lse_s − max)`, each
//! reduced across the warp), then each lane accumulates `Σ w_s·o_s` for its 4 columns of every
//! 128-column pass, four splits at a time so that their loads are in flight together (one split
//! after another would wait a full memory latency per split, which at 64 splits costs more than
//! the forward kernel of a small batch).

use super::arch::global::{load_f32, load_f32x4, store_f32, store_u32x2};
use super::arch::mma::{Bf16, F16, MmaElement};
use super::arch::shuffle;
use super::arch::thread::{block_x, block_y, block_z, thread_x};
use super::sequence::SeqView;
use crate::params::{AttnParams, COMBINE_WARPS, partial_index};
use crate::softmax::SplitMerge;

/// The kernel body.
///
/// # Safety
/// `p` as for the forward kernel that wrote the partials (the same struct), with
/// `p.head_dim` a multiple of 4 and O's rows 8-byte aligned; launch with `32·COMBINE_WARPS`
/// threads.
#[inline(always)]
unsafe fn combine<E: MmaElement>(p: &AttnParams) {
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
        unsafe { load_f32(p.partial_lse + 4 * partial_index(s, p.partial_rows, row)) }
    };
    let mut merge = SplitMerge::new();
    let mut sp = lane as u64;
    while sp < splits {
        merge.see(lse_of(sp));
        sp += 32;
    }
    for m in [16, 8, 4, 2, 1] {
        merge.see(shuffle::xor(merge.max, m));
    }
    let mut weight_sum = 0.0f32;
    let mut sp = lane as u64;
    while sp < splits {
        weight_sum += merge.weight(lse_of(sp));
        sp += 32;
    }
    for m in [16, 8, 4, 2, 1] {
        weight_sum += shuffle::xor(weight_sum, m);
    }
    let res = merge.finish(weight_sum);
    let partial = |sp: u64, c: u64| {
        let at = p.partial_o + 4 * (partial_index(sp, p.partial_rows, row) * d + c);
        // SAFETY: columns c..c+4 ≤ d of a partial row, 16-byte aligned (d % 4 == 0).
        unsafe { load_f32x4(at) }
    };
    let mut c = 4 * lane as u64;
    while c < d {
        let mut acc = [0.0f32; 4];
        let mut sp = 0;
        while sp + 4 <= splits {
            let x = [partial(sp, c), partial(sp + 1, c), partial(sp + 2, c), partial(sp + 3, c)];
            for (k, xk) in x.iter().enumerate() {
                let w = merge.weight(lse_of(sp + k as u64));
                for (a, x) in acc.iter_mut().zip(xk) {
                    *a += w * x;
                }
            }
            sp += 4;
        }
        while sp < splits {
            let (w, x) = (merge.weight(lse_of(sp)), partial(sp, c));
            for (a, x) in acc.iter_mut().zip(x) {
                *a += w * x;
            }
            sp += 1;
        }
        let packed = [
            E::pack(acc[0] * res.inv_sum, acc[1] * res.inv_sum),
            E::pack(acc[2] * res.inv_sum, acc[3] * res.inv_sum),
        ];
        let dst = p.o + 2 * (seq.offset(&p.o_strides, seq.q_start, t, h) + c);
        // SAFETY: columns c..c+4 ≤ d of output row (t, h), 8-byte aligned (host checks).
        unsafe { store_u32x2(dst, packed) };
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

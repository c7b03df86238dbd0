//! The tensor-core backward pass (FlashAttention-2's algorithm on `mma.sync` m16n8k16, f32
//! accumulation; sm_80+), in three kernels:
//!
//! 1. **Preprocessing** (grid as the forward's: query tiles × heads × sequences): per query row,
//!    one pass over its keys recomputing `S = Q·Kᵀ` and `dP = dO·Vᵀ` on tensor cores, the
//!    probabilities `P = exp(scale·S − lse)` from the forward's log-sum-exp, and the row's
//!    [`GradRow`] statistics (`1/Σ P`, the pivot, `D − pivot`). It also zeroes the row's f32 dQ
//!    accumulator.
//! 2. **Main** (grid: key tiles × K/V heads × sequences): each warp owns 16 keys of the block's
//!    tile, with their dK and dV rows in registers. For each query head of the K/V head's group
//!    and each query tile that sees the keys (two stages of Q, dO and statistics in shared
//!    memory, the next one streaming in by `cp.async`): `Sᵀ = K·Qᵀ` and `dPᵀ = V·dOᵀ`, then
//!    `P` (normalised) and `dS = P·((dP − pivot) − (D − pivot))` on the accumulators,
//!    `dV += Pᵀ·dO` and `dK += dSᵀ·Q` with `P` and `dS` repacked in registers as A operands,
//!    and `dQ += dS·K` through a dSᵀ tile in shared memory, added to the f32 accumulator with
//!    `red.global.add` (one per element per key tile: the order, hence the last bits, vary
//!    from run to run; in deterministic mode the key tiles take turns per query tile, in key
//!    order, through a counter each: bit-identical results).
//! 3. **dQ conversion**: `dQ = scale·acc` in the storage type.
//!
//! Grouped-query attention sums dK and dV over the group in registers (one block walks every
//! query head of its K/V head). Tiles are swizzled as the forward's ([`super::tile`]); padded
//! columns are zero and never stored. Memory beyond the inputs and outputs: the f32 dQ
//! accumulator and three f32 statistics per query row.

use super::arch::cp_async;
use super::arch::global;
use super::arch::ldmatrix;
use super::arch::mma::{Bf16, F16, MmaElement};
use super::arch::shared;
use super::arch::shuffle;
use super::arch::thread::{block_x, block_y, block_z, sync_threads, thread_x, thread_x_opaque};
use super::sequence::SeqView;
use super::tile::{FragRows, HeadRows, load_tile, swizzle};
use crate::config::BwdConfig;
use crate::config::PAD_CHUNKS;
use crate::mask;
use crate::params::{BWD_BLOCK_M, BWD_PREP_BLOCK_N, BWD_PREP_THREADS, BwdParams};
use crate::softmax::{GradRow, prob_from_lse};

/// Query rows per tile (every backward kernel).
const BM: usize = BWD_BLOCK_M as usize;
/// Keys per tile of the preprocessing kernel.
const PBN: usize = BWD_PREP_BLOCK_N as usize;
/// Threads of the preprocessing and conversion kernels.
const PT: usize = BWD_PREP_THREADS as usize;

/// Address of statistic `which` (0: `1/Σ P`, 1: pivot, 2: `D − pivot`) of log-sum-exp row `r`.
#[inline(always)]
fn stat_addr(bp: &BwdParams, which: u64, r: u64) -> u64 {
    bp.stats + 4 * (which * bp.attn.partial_rows + r)
}

/// Index of the deterministic mode's turn counter of query tile `tile` of head `h`, sequence `z`.
#[inline(always)]
fn lock_index(bp: &BwdParams, z: u32, h: u32, tile: u32) -> u64 {
    (z as u64 * bp.attn.heads_q as u64 + h as u64) * bp.q_tiles as u64 + tile as u64
}

/// Lane addresses of the A operand from a row-major `[m][k]` tile (rows `row0..row0+16`), and
/// equally of the B operand from a `[k][n]` tile read transposed (`row0` = 0): lanes 0–15 give
/// rows 0–15 of the first 8 columns, lanes 16–31 of the next 8.
#[inline(always)]
fn a_rows(lane: u32, row0: u32, chunks: u32) -> FragRows {
    FragRows::new(row0 + (lane % 8) + 8 * ((lane / 8) % 2), lane / 16, chunks)
}

/// Lane addresses of the B operand from an `[n][k]` tile, and equally of the A operand from a
/// `[k][m]` tile read transposed: rows 0–7 then 8–15, each for two 8-column chunks.
#[inline(always)]
fn b_rows(lane: u32, chunks: u32) -> FragRows {
    FragRows::new((lane % 8) + 8 * (lane / 16), (lane / 8) % 2, chunks)
}

/// Preprocessing: the statistics of block `x`'s [`BM`] query rows of head `y`, sequence `z`,
/// and zeros in their dQ accumulator rows. Const parameters: `D` the head dim computed with
/// (a problem's `d ≤ D`, zero-padded), `PD` the tile row pitch.
///
/// # Safety
/// `bp` must describe valid tensors (host validation; 16-byte aligned rows), statistics and
/// accumulator buffers of `bp.attn.partial_rows` rows; launch with [`PT`] threads and
/// [`BwdConfig::prep_shared_bytes`] of dynamic shared memory.
#[inline(always)]
unsafe fn bwd_prep<E: MmaElement, const D: usize, const PD: usize, const WIN: bool>(bp: &BwdParams) {
    const { assert!(D % 16 == 0 && PD >= D && PT % (PD / 8) == 0 && BM == 16 * (PT / 32)) };
    let p = &bp.attn;
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t4) = (lane / 4, lane % 4);
    let (h, z) = (block_y(), block_z());
    let causal = p.causal != 0;
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(p, z) };
    let m0 = block_x() * BM as u32;
    if bp.locks != 0 && thread_x() == 0 {
        // Deterministic mode: this query tile's turn counter starts at the first main-kernel key
        // tile (`p.block_n` keys) that visits it: 0, or with a window the one holding its first
        // row's first key (the key tiles that visit a query tile are consecutive).
        let first = if WIN {
            mask::row_key_begin(m0.min(seq.len_q), seq.len_q, seq.len_k, p.window_left) / p.block_n.max(1)
        } else {
            0
        };
        // SAFETY: one counter per block of this grid (host sizing).
        unsafe { global::store_u32(bp.locks + 4 * lock_index(bp, z, h, block_x()), first) };
    }
    if m0 >= seq.len_q {
        return;
    }
    let kv_h = h / p.group.max(1);
    let chunks = PD as u32 / 8;
    let tile_bytes = |rows: usize| 2 * (rows * PD) as u32;
    let q_tile = shared::base();
    let do_tile = q_tile + tile_bytes(BM);
    // Two stages of (K, V).
    let k_tile = |stage: u32| do_tile + tile_bytes(BM) + stage * 2 * tile_bytes(PBN);
    let row_end = (m0 + BM as u32).min(seq.len_q);
    let (n_end, n_begin) = if WIN {
        (
            mask::row_key_end(row_end - 1, seq.len_q, seq.len_k, causal, p.window_right),
            mask::row_key_begin(m0, seq.len_q, seq.len_k, p.window_left),
        )
    } else {
        (mask::key_end(row_end, seq.len_q, seq.len_k, causal), 0)
    };
    let n_tiles = n_end.div_ceil(PBN as u32);
    // (With a window, the key tiles before the first row's first key are never visited.)
    let first = (n_begin / PBN as u32).min(n_tiles);
    // SAFETY: tiles inside the dynamic shared memory; sources validated by the host.
    unsafe {
        load_tile::<BM, PD, PT, PAD_CHUNKS>(q_tile, HeadRows::queries(p, &seq, h), m0);
        load_tile::<BM, PD, PT, PAD_CHUNKS>(do_tile, HeadRows::outputs(p, &seq, h), m0);
        if first < n_tiles {
            let n0 = first * PBN as u32;
            load_tile::<PBN, PD, PT, PAD_CHUNKS>(k_tile(first % 2), HeadRows::keys(p, &seq, kv_h), n0);
            load_tile::<PBN, PD, PT, PAD_CHUNKS>(
                k_tile(first % 2) + tile_bytes(PBN),
                HeadRows::values(p, &seq, kv_h),
                n0,
            );
        }
    }
    cp_async::commit();

    // Zero this block's rows of the dQ accumulator (16-byte stores; rows of d = 8k floats).
    let d = p.head_dim;
    // (`max(1)`: the host never passes d = 0, and the compiler then needs no division panic.)
    let quads = (d / 4).max(1);
    let mut i = tid;
    while i < (row_end - m0) * quads {
        let (r, c) = (i / quads, i % quads);
        let at = seq.lse_index(p, h, m0 + r) * d as u64 + 4 * c as u64;
        // SAFETY: row `r` of the accumulator (host sizing), 16-byte aligned.
        unsafe { global::store_u32x4(bp.dq_acc + 4 * at, [0; 4]) };
        i += PT as u32;
    }

    // This lane's rows g and g+8 of its warp's slab: log-sum-exp and key limit (rows past the
    // end see no key).
    let warp_row0 = warp * 16;
    let mut lse = [f32::NEG_INFINITY; 2];
    let mut limit = [0u32; 2];
    // (With a window, each row's first key; 0 otherwise.)
    let mut begin = [0u32; 2];
    for (half, (l, lim)) in lse.iter_mut().zip(&mut limit).enumerate() {
        let row = m0 + warp_row0 + g + 8 * half as u32;
        if row < seq.len_q {
            // SAFETY: inside the log-sum-exp input (host sizing).
            *l = unsafe { global::load_f32(p.lse + 4 * seq.lse_index(p, h, row)) };
            *lim = if WIN {
                begin[half] = mask::row_key_begin(row, seq.len_q, seq.len_k, p.window_left);
                mask::row_key_end(row, seq.len_q, seq.len_k, causal, p.window_right)
            } else {
                mask::key_end(row + 1, seq.len_q, seq.len_k, causal)
            };
        }
    }
    let mut stats = [GradRow::new(); 2];
    for j in first..n_tiles {
        let n0 = j * PBN as u32;
        cp_async::wait::<0>();
        sync_threads(); // K_j, V_j (and Q, dO) visible; every warp is done with stage j+1's last use
        if j + 1 < n_tiles {
            let next = k_tile((j + 1) % 2);
            // SAFETY: as above.
            unsafe {
                load_tile::<PBN, PD, PT, PAD_CHUNKS>(next, HeadRows::keys(p, &seq, kv_h), n0 + PBN as u32);
                load_tile::<PBN, PD, PT, PAD_CHUNKS>(
                    next + tile_bytes(PBN),
                    HeadRows::values(p, &seq, kv_h),
                    n0 + PBN as u32,
                );
            }
        }
        cp_async::commit();
        let kt = k_tile(j % 2);
        let vt = kt + tile_bytes(PBN);
        let tid_o = thread_x_opaque();
        let (ar, br) = (a_rows(tid_o % 32, 16 * (tid_o / 32), chunks), b_rows(tid_o % 32, chunks));
        let q_tile = shared::base();
        let do_tile = q_tile + tile_bytes(BM);
        let mut s = [[0.0f32; 4]; PBN / 8];
        let mut dp = [[0.0f32; 4]; PBN / 8];
        for kk in 0..D / 16 {
            // SAFETY: inside the tiles, 16-byte aligned.
            let (aq, ado) = unsafe {
                (ldmatrix::x4(ar.at(q_tile, 0, kk, chunks)), ldmatrix::x4(ar.at(do_tile, 0, kk, chunks)))
            };
            for np in 0..PBN / 16 {
                // SAFETY: as above.
                let bk = unsafe { ldmatrix::x4(br.at(kt, np, kk, chunks)) };
                E::mma(&mut s[2 * np], &aq, bk[0], bk[1]);
                E::mma(&mut s[2 * np + 1], &aq, bk[2], bk[3]);
                // SAFETY: as above.
                let bv = unsafe { ldmatrix::x4(br.at(vt, np, kk, chunks)) };
                E::mma(&mut dp[2 * np], &ado, bv[0], bv[1]);
                E::mma(&mut dp[2 * np + 1], &ado, bv[2], bv[3]);
            }
        }
        for (half, st) in stats.iter_mut().enumerate() {
            // Probabilities (0 where masked) and this lane's most probable key of the tile.
            let (mut best, mut best_dp) = (0.0f32, 0.0f32);
            for (nt, (sn, dn)) in s.iter_mut().zip(&dp).enumerate() {
                for e in 0..2 {
                    let key = n0 + 8 * nt as u32 + 2 * t4 + e as u32;
                    let x = &mut sn[2 * half + e];
                    let seen = key < limit[half] && (!WIN || key >= begin[half]);
                    *x = if seen { prob_from_lse(*x, p.scale_log2, lse[half]) } else { 0.0 };
                    if *x > best {
                        (best, best_dp) = (*x, dn[2 * half + e]);
                    }
                }
            }
            // The quad's most probable key: the largest (P, dP) pair, the same in all four lanes.
            for m in [1, 2] {
                let (op, odp) = (shuffle::xor(best, m), shuffle::xor(best_dp, m));
                if op > best || (op == best && odp > best_dp) {
                    (best, best_dp) = (op, odp);
                }
            }
            st.see(best, best_dp);
            for (sn, dn) in s.iter().zip(&dp) {
                for e in 0..2 {
                    st.add(sn[2 * half + e], dn[2 * half + e]);
                }
            }
        }
    }
    for (half, st) in stats.iter().enumerate() {
        let (sum, rel) = (shuffle::sum4(st.sum), shuffle::sum4(st.rel));
        let row = m0 + warp_row0 + g + 8 * half as u32;
        if t4 == 0 && row < seq.len_q {
            let (inv, d_rel) = GradRow::finish(sum, rel);
            let r = seq.lse_index(p, h, row);
            // SAFETY: row `r` of the statistics (host sizing).
            unsafe {
                global::store_f32(stat_addr(bp, 0, r), inv);
                global::store_f32(stat_addr(bp, 1, r), st.pivot);
                global::store_f32(stat_addr(bp, 2, r), d_rel);
            }
        }
    }
    // No copy stays in flight past the kernel (with no key tile, Q's and dO's never waited).
    cp_async::wait::<0>();
}

/// The main kernel: block `x`'s `BN` keys of K/V head `y`, sequence `z`. Const parameters:
/// `D`/`PD` as [`bwd_prep`], `W` warps, `BN = 16·W` keys, `T = 32·W` threads, `DT = D/8`
/// column tiles of dK/dV, `DQT` column tiles of dQ per warp, `QT` column tiles (8 queries each) per pass of
/// the score products ([`BwdConfig::query_chunk`]).
///
/// # Safety
/// As [`bwd_prep`], with the statistics written by it; launch with `T` threads and
/// [`BwdConfig::shared_bytes`] of dynamic shared memory.
#[inline(always)]
unsafe fn bwd_main<
    E: MmaElement,
    const D: usize,
    const PD: usize,
    const W: usize,
    const BN: usize,
    const T: usize,
    const DT: usize,
    const DQT: usize,
    const QT: usize,
    const KVR: bool,
    const KK: usize,
    const DQC: usize,
    const WIN: bool,
>(
    bp: &BwdParams,
) {
    const {
        assert!(BM % (8 * QT) == 0 && QT % 2 == 0);
        assert!(if KVR { KK * 16 == D } else { KK == 1 });
        assert!(DQT % DQC == 0 && DQC % 2 == 0);
        assert!(BN == 16 * W && T == 32 * W && DT * 8 == D && D % 16 == 0 && PD >= D);
        assert!(W % (BM / 16) == 0 && DQT * (W / (BM / 16)) == DT && DQT % 2 == 0);
        // Each warp's dQ columns start at a whole group of four 16-column pairs (the swizzle's
        // period), or there is one group.
        assert!(W == BM / 16 || (DQT / 2) % 4 == 0);
        assert!(T % (PD / 8) == 0 && BM % (T / (PD / 8)) == 0 && BN % (T / (PD / 8)) == 0);
    };
    let p = &bp.attn;
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t4) = (lane / 4, lane % 4);
    let (kv_h, z) = (block_y(), block_z());
    let causal = p.causal != 0;
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(p, z) };
    let n0 = block_x() * BN as u32;
    if n0 >= seq.len_k {
        return;
    }
    let chunks = PD as u32 / 8;
    let ds_chunks = BM as u32 / 8;
    // Shared memory: K, V; two stages of (Q, dO); the dSᵀ tile; two stages of row statistics.
    let tile_bytes = |rows: usize| 2 * (rows * PD) as u32;
    let layout = || {
        let k_tile = shared::base();
        let v_tile = k_tile + tile_bytes(BN);
        let stages = v_tile + tile_bytes(BN);
        let ds_tile = stages + 4 * tile_bytes(BM);
        (k_tile, v_tile, stages, ds_tile, ds_tile + 2 * (BN * BM) as u32)
    };
    let q_tile = |stages: u32, s: u32| stages + s * 2 * tile_bytes(BM);

    // The query tiles that see these keys, for every query head of the group, as one sequence of
    // steps: step `it` is head `kv_h·G + it / per_head`, tile `first + it % per_head`.
    let group = p.group.max(1);
    // (With a window, only the queries whose windows hold one of these keys.)
    let (q_first, q_end) = if WIN {
        let keys = (seq.len_k - n0).min(BN as u32);
        mask::query_range(n0, keys, seq.len_q, seq.len_k, causal, p.window_left, p.window_right)
    } else {
        (mask::first_query(n0, seq.len_q, seq.len_k, causal), seq.len_q)
    };
    let first = q_first / BM as u32;
    let per_head = q_end.div_ceil(BM as u32).saturating_sub(first);
    let steps = group * per_head;
    let step = |it: u32| (kv_h * group + it / per_head.max(1), (first + it % per_head.max(1)) * BM as u32);
    // Issues step `it`'s Q and dO copies and stores its row statistics into stage `s`:
    // `[lse, 1/Σ P, pivot, D − pivot]` per row; rows past the end get `1/Σ P = 0` (no
    // probabilities).
    let load_step = |it: u32, s: u32| {
        let (h, m0) = step(it);
        let (_, _, stages, _, rows) = layout();
        // SAFETY: tiles inside the dynamic shared memory; sources validated by the host.
        unsafe {
            load_tile::<BM, PD, T, PAD_CHUNKS>(q_tile(stages, s), HeadRows::queries(p, &seq, h), m0);
            load_tile::<BM, PD, T, PAD_CHUNKS>(
                q_tile(stages, s) + tile_bytes(BM),
                HeadRows::outputs(p, &seq, h),
                m0,
            );
        }
        let tid = thread_x_opaque();
        if tid < BM as u32 {
            let row = m0 + tid;
            let mut v = [0.0f32; 4];
            if row < seq.len_q {
                let r = seq.lse_index(p, h, row);
                // SAFETY: row `r` of the log-sum-exp and the statistics (host sizing).
                v = unsafe {
                    [
                        global::load_f32(p.lse + 4 * r),
                        global::load_f32(stat_addr(bp, 0, r)),
                        global::load_f32(stat_addr(bp, 1, r)),
                        global::load_f32(stat_addr(bp, 2, r)),
                    ]
                };
            }
            let at = rows + s * 16 * BM as u32 + 16 * tid;
            for (i, x) in v.iter().enumerate() {
                // SAFETY: inside the statistics stage.
                unsafe { shared::store_f32(at + 4 * i as u32, *x) };
            }
        }
    };

    let (k_tile, v_tile, _, _, _) = layout();
    // SAFETY: as above.
    unsafe {
        load_tile::<BN, PD, T, PAD_CHUNKS>(k_tile, HeadRows::keys(p, &seq, kv_h), n0);
        load_tile::<BN, PD, T, PAD_CHUNKS>(v_tile, HeadRows::values(p, &seq, kv_h), n0);
    }
    if steps > 0 {
        load_step(0, 0);
    }
    cp_async::commit();

    // With KVR, this warp's K and V rows stay in registers as A fragments for the whole block
    // (they are the same for every step), loaded once the first copies have landed.
    let mut kv_frags = [[[0u32; 4]; KK]; 2];
    if KVR && steps > 0 {
        cp_async::wait::<0>();
        sync_threads();
        let ar = a_rows(lane, 16 * warp, chunks);
        let [kf, vf] = &mut kv_frags;
        for (kk, (k, v)) in kf.iter_mut().zip(vf.iter_mut()).enumerate() {
            // SAFETY: inside the K and V tiles, 16-byte aligned.
            unsafe {
                *k = ldmatrix::x4(ar.at(k_tile, 0, kk, chunks));
                *v = ldmatrix::x4(ar.at(v_tile, 0, kk, chunks));
            }
        }
    }
    let mut dk = [[0.0f32; 4]; DT];
    let mut dv = [[0.0f32; 4]; DT];
    let key0 = n0 + 16 * warp;
    for it in 0..steps {
        let s = it % 2;
        let (h, m0) = step(it);
        cp_async::wait::<0>();
        sync_threads(); // step `it` visible; every warp is done with step it−1 (dSᵀ, the other stage)
        if it + 1 < steps {
            load_step(it + 1, 1 - s);
        }
        cp_async::commit();
        let (k_tile, v_tile, stages, ds_tile, rows) = layout();
        let (qt, dot) = (q_tile(stages, s), q_tile(stages, s) + tile_bytes(BM));
        let tid_o = thread_x_opaque();
        let (lane_o, warp_o) = (tid_o % 32, tid_o / 32);
        let (ar, br, tr) =
            (a_rows(lane_o, 16 * warp_o, chunks), b_rows(lane_o, chunks), a_rows(lane_o, 0, chunks));

        // In passes of 8·QT queries (fewer accumulators live beside dK and dV):
        for qh in 0..BM / (8 * QT) {
            // Sᵀ = K_w·Qᵀ and dPᵀ = V_w·dOᵀ: this warp's 16 keys × 8·QT queries.
            let mut st = [[0.0f32; 4]; QT];
            let mut dpt = [[0.0f32; 4]; QT];
            for kk in 0..D / 16 {
                let (ak, av) = if KVR {
                    (kv_frags[0][kk], kv_frags[1][kk])
                } else {
                    // SAFETY: inside the tiles, 16-byte aligned.
                    unsafe {
                        (
                            ldmatrix::x4(ar.at(k_tile, 0, kk, chunks)),
                            ldmatrix::x4(ar.at(v_tile, 0, kk, chunks)),
                        )
                    }
                };
                for np in 0..QT / 2 {
                    let slab = qh * QT / 2 + np;
                    // SAFETY: as above.
                    let bq = unsafe { ldmatrix::x4(br.at(qt, slab, kk, chunks)) };
                    E::mma(&mut st[2 * np], &ak, bq[0], bq[1]);
                    E::mma(&mut st[2 * np + 1], &ak, bq[2], bq[3]);
                    // SAFETY: as above.
                    let bo = unsafe { ldmatrix::x4(br.at(dot, slab, kk, chunks)) };
                    E::mma(&mut dpt[2 * np], &av, bo[0], bo[1]);
                    E::mma(&mut dpt[2 * np + 1], &av, bo[2], bo[3]);
                }
            }
            // P (normalised; 0 where masked) and dS, in place: rows are keys, columns queries.
            for (nt, (sn, dn)) in st.iter_mut().zip(dpt.iter_mut()).enumerate() {
                for e in 0..2 {
                    let qc = (8 * (qh * QT + nt)) as u32 + 2 * t4 + e as u32;
                    // SAFETY: inside the statistics stage, 16-byte aligned.
                    let [lse, inv, pivot, d_rel] =
                        unsafe { shared::load_f32x4(rows + s * 16 * BM as u32 + 16 * qc) };
                    let (begin, limit) = if WIN {
                        (
                            mask::row_key_begin(m0 + qc, seq.len_q, seq.len_k, p.window_left),
                            mask::row_key_end(m0 + qc, seq.len_q, seq.len_k, causal, p.window_right),
                        )
                    } else {
                        (0, mask::key_end(m0 + qc + 1, seq.len_q, seq.len_k, causal))
                    };
                    for half in 0..2 {
                        let key = key0 + g + 8 * half as u32;
                        let x = sn[2 * half + e];
                        let pr = if key < limit && key >= begin && inv > 0.0 {
                            prob_from_lse(x, p.scale_log2, lse) * inv
                        } else {
                            0.0
                        };
                        sn[2 * half + e] = pr;
                        dn[2 * half + e] = GradRow::ds(pr, dn[2 * half + e], pivot, d_rel);
                    }
                }
            }
            // dV += Pᵀ·dO and dK += dSᵀ·Q: the queries are the reduction; P and dS repacked as A.
            for ks in 0..QT / 2 {
                let slab = qh * QT / 2 + ks;
                let ap = E::acc_to_a(&st[2 * ks], &st[2 * ks + 1]);
                let ads = E::acc_to_a(&dpt[2 * ks], &dpt[2 * ks + 1]);
                for dp2 in 0..DT / 2 {
                    // SAFETY: inside the tiles.
                    let bo = unsafe { ldmatrix::x4_trans(tr.at(dot, slab, dp2, chunks)) };
                    E::mma(&mut dv[2 * dp2], &ap, bo[0], bo[1]);
                    E::mma(&mut dv[2 * dp2 + 1], &ap, bo[2], bo[3]);
                    // SAFETY: as above.
                    let bq = unsafe { ldmatrix::x4_trans(tr.at(qt, slab, dp2, chunks)) };
                    E::mma(&mut dk[2 * dp2], &ads, bq[0], bq[1]);
                    E::mma(&mut dk[2 * dp2 + 1], &ads, bq[2], bq[3]);
                }
            }
            // dSᵀ to shared memory (keys × queries, 16-bit), for dQ = dS·K across the warps' keys.
            for (nt, dn) in dpt.iter().enumerate() {
                for half in 0..2 {
                    let row = 16 * warp_o + g + 8 * half as u32;
                    let packed = E::pack(dn[2 * half], dn[2 * half + 1]);
                    let chunk = (qh * QT + nt) as u32;
                    // SAFETY: row < BN, chunk < BM/8 of the dSᵀ tile.
                    unsafe {
                        shared::store_u32(ds_tile + swizzle(row, chunk, ds_chunks) + 4 * (lane_o % 4), packed)
                    };
                }
            }
        }
        sync_threads();
        // dQ (BM × D) += dS·K: warp w takes query slab w % (BM/16), column group w / (BM/16).
        // (The slab and group are lane-independent but not compile-time: they go into the base
        // addresses, not into `FragRows::at`'s pair index, which would then index its
        // swizzle table at run time, from local memory.)
        let (qs, cg) = (warp_o % (BM / 16) as u32, warp_o / (BM / 16) as u32);
        let dsr = FragRows::new((lane_o % 8) + 8 * (lane_o / 16), (lane_o / 8) % 2 + 2 * qs, ds_chunks);
        let k_cols = k_tile + 32 * cg * (DQT / 2) as u32;
        // Deterministic mode: wait for this key tile's turn at the query tile (key tiles
        // 0, 1, … add in that order: the tiles that see a query tile are always a prefix).
        let lock = bp.locks + 4 * lock_index(bp, z, h, m0 / BM as u32);
        if bp.locks != 0 {
            if thread_x() == 0 {
                // SAFETY: the counter of this query tile (host sizing).
                while unsafe { global::load_acquire_u32(lock) } != block_x() {}
            }
            sync_threads();
        }
        let d = p.head_dim;
        // The warp's DQT column tiles in passes of DQC (fewer accumulators live at once).
        for cc in 0..DQT / DQC {
            let mut acc = [[0.0f32; 4]; DQC];
            for ks in 0..BN / 16 {
                // SAFETY: inside the dSᵀ tile.
                let a = unsafe { ldmatrix::x4_trans(dsr.at(ds_tile, ks, 0, ds_chunks)) };
                for dp2 in 0..DQC / 2 {
                    // SAFETY: inside the K tile.
                    let bk = unsafe { ldmatrix::x4_trans(tr.at(k_cols, ks, cc * DQC / 2 + dp2, chunks)) };
                    E::mma(&mut acc[2 * dp2], &a, bk[0], bk[1]);
                    E::mma(&mut acc[2 * dp2 + 1], &a, bk[2], bk[3]);
                }
            }
            for half in 0..2 {
                let row = m0 + 16 * qs + g + 8 * half as u32;
                if row < seq.len_q {
                    let base = bp.dq_acc + 4 * seq.lse_index(p, h, row) * d as u64;
                    for (dt, at) in acc.iter().enumerate() {
                        let col = 8 * (cg * DQT as u32 + (cc * DQC + dt) as u32) + 2 * t4;
                        if col < d {
                            // SAFETY: columns col, col+1 < d of the row's accumulator (host sizing).
                            unsafe {
                                global::red_add_f32(base + 4 * col as u64, at[2 * half]);
                                global::red_add_f32(base + 4 * (col + 1) as u64, at[2 * half + 1]);
                            }
                        }
                    }
                }
            }
        }
        if bp.locks != 0 {
            // Every thread's adds are done (the barrier), then the next key tile's turn.
            sync_threads();
            if thread_x() == 0 {
                // SAFETY: as above.
                unsafe { global::store_release_u32(lock, block_x() + 1) };
            }
        }
    }
    cp_async::wait::<0>();

    // dK (scaled) and dV of this warp's keys; keys past the end are not written.
    let d = p.head_dim;
    for half in 0..2 {
        let key = key0 + g + 8 * half as u32;
        if key < seq.len_k {
            let ko = seq.offset(&bp.dk_strides, seq.k_start, key, kv_h);
            let vo = seq.offset(&bp.dv_strides, seq.k_start, key, kv_h);
            for (dt, (kt, vt)) in dk.iter().zip(&dv).enumerate() {
                let col = (8 * dt as u32 + 2 * t4) as u64;
                if col < d as u64 {
                    let pk = E::pack(kt[2 * half] * bp.scale, kt[2 * half + 1] * bp.scale);
                    let pv = E::pack(vt[2 * half], vt[2 * half + 1]);
                    // SAFETY: columns col, col+1 < d of the key's rows (host validation), 4-byte aligned.
                    unsafe {
                        global::store_u32(bp.dk + 2 * (ko + col), pk);
                        global::store_u32(bp.dv + 2 * (vo + col), pv);
                    }
                }
            }
        }
    }
}

/// dQ conversion: block `x`'s [`BM`] query rows of head `y`, sequence `z`: `dQ = scale·acc`,
/// 8 columns (two 16-byte loads, one 16-byte store) per thread and step.
///
/// # Safety
/// As [`bwd_prep`], with the accumulator complete; launch with [`PT`] threads.
#[inline(always)]
unsafe fn bwd_dq<E: MmaElement>(bp: &BwdParams) {
    let p = &bp.attn;
    let (h, z) = (block_y(), block_z());
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(p, z) };
    let m0 = block_x() * BM as u32;
    if m0 >= seq.len_q {
        return;
    }
    let d = p.head_dim;
    let chunks = (d / 8).max(1);
    let rows = (seq.len_q - m0).min(BM as u32);
    let mut i = thread_x();
    while i < rows * chunks {
        let (r, c) = (i / chunks, i % chunks);
        let row = m0 + r;
        let src = bp.dq_acc + 4 * (seq.lse_index(p, h, row) * d as u64 + 8 * c as u64);
        // SAFETY: 8 floats of the row's accumulator, 16-byte aligned (host sizing).
        let (a, b) = unsafe { (global::load_f32x4(src), global::load_f32x4(src + 16)) };
        let s = bp.scale;
        let v = [
            E::pack(a[0] * s, a[1] * s),
            E::pack(a[2] * s, a[3] * s),
            E::pack(b[0] * s, b[1] * s),
            E::pack(b[2] * s, b[3] * s),
        ];
        let dst = bp.dq + 2 * (seq.offset(&bp.dq_strides, seq.q_start, row, h) + 8 * c as u64);
        // SAFETY: chunk c < d/8 of a row of dQ (host validation), 16-byte aligned.
        unsafe { global::store_u32x4(dst, v) };
        i += PT as u32;
    }
}

/// The entry points of one [`crate::for_each_bwd_instance!`] group and element type.
macro_rules! bwd_entries {
    (() $(($d:literal, $w:literal, $b:literal, $win:tt))*) => {
        $( bwd_entries!(@one F16, "f16", $d, $w, $b, $win);
           bwd_entries!(@one Bf16, "bf16", $d, $w, $b, $win); )*
    };
    (@one $elem:ty, $dt:literal, $d:literal, $w:literal, $b:literal, $win:tt) => {
        const _: () = {
            const C: BwdConfig = BwdConfig { head_dim: $d, warps: $w, min_blocks: $b, window: $win };

            /// The backward's main kernel (see the module docs).
            ///
            /// # Safety
            /// See [`bwd_main`].
            #[unsafe(export_name = crate::bwd_kernel_name!(main, $dt, $d, $w, $b, $win))]
            pub unsafe extern "ptx-kernel" fn entry_main(p: BwdParams) {
                // SAFETY: forwarded contract.
                unsafe {
                    bwd_main::<
                        $elem,
                        { C.head_dim as usize },
                        { C.pitch() as usize },
                        { C.warps as usize },
                        { C.block_n() as usize },
                        { C.threads() as usize },
                        { (C.head_dim / 8) as usize },
                        { (C.head_dim / 8 / C.dq_column_groups()) as usize },
                        { (C.query_chunk() / 8) as usize },
                        { C.kv_in_registers() },
                        { if C.kv_in_registers() { (C.head_dim / 16) as usize } else { 1 } },
                        { C.dq_pass_tiles() as usize },
                        { C.window == 1 },
                    >(&p)
                }
            }

            /// The backward's preprocessing kernel (see the module docs).
            ///
            /// # Safety
            /// See [`bwd_prep`].
            #[unsafe(export_name = crate::bwd_kernel_name!(prep, $dt, $d, $w, $b, $win))]
            pub unsafe extern "ptx-kernel" fn entry_prep(p: BwdParams) {
                // SAFETY: forwarded contract.
                unsafe { bwd_prep::<$elem, { C.head_dim as usize }, { C.pitch() as usize }, { C.window == 1 }>(&p) }
            }
        };
    };
}

crate::for_each_bwd_instance!(bwd_entries);

/// dQ conversion, f16 (see [`bwd_dq`]).
///
/// # Safety
/// See [`bwd_dq`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn flash_bwd_dq_f16(p: BwdParams) {
    // SAFETY: forwarded contract.
    unsafe { bwd_dq::<F16>(&p) }
}

/// dQ conversion, bf16 (see [`bwd_dq`]).
///
/// # Safety
/// See [`bwd_dq`].
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn flash_bwd_dq_bf16(p: BwdParams) {
    // SAFETY: forwarded contract.
    unsafe { bwd_dq::<Bf16>(&p) }
}

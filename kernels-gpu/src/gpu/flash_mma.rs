//! The tensor-core flash-attention forward kernel (f16/bf16, sm_80+): `mma.sync` m16n8k16 with
//! f32 accumulators for both `S = Q·Kᵀ` and `O += P·V`.
//!
//! One block owns `block_m` query rows of one (sequence, head); each warp owns `MI` 16-row
//! slabs of them and every key of a tile. Per key tile:
//! 1. `V_j` starts streaming into its shared buffer (`cp.async`) while the warps compute
//!    `S = Q·K_jᵀ` from shared memory (`ldmatrix` for both operands).
//! 2. The online softmax runs on the accumulators in registers: row maxima over the four lanes
//!    of a quad, the shared recurrence ([`OnlineSoftmax`]) rescales the output accumulators, and
//!    each score becomes a probability with one FMA and one `ex2` (log2(e) is in the scale).
//! 3. `K_{j+1}` starts streaming into the K buffer (during the softmax), and `O += P·V_j`, where `P` goes from the
//!    accumulator layout to the A-operand layout in registers (no shared-memory round trip) and
//!    `V` is read with `ldmatrix.trans`.
//!
//! Shared tiles are row-major with 16-byte chunks XOR-swizzled by `row % 8`, so that both the
//! `cp.async` writes and the `ldmatrix` reads of 8 consecutive rows hit 8 different bank groups.
//! Causal tiles wholly above the diagonal are never visited; only tiles that cross the diagonal
//! or the end of the sequence are masked. Causal grids run the longest rows first.
//!
//! **Split-KV** (`p.splits > 1`, flash-decoding): when the query tiles alone cannot fill the
//! GPU, each query tile's key tiles are cut into `splits` contiguous ranges, one block each.
//! A block finishes its range like a whole row (normalised output, log-sum-exp) but writes them
//! in f32 to the partial buffers; the combine kernel ([`super::combine`]) merges the splits.

use super::arch::cp_async;
use super::arch::global;
use super::arch::ldmatrix;
use super::arch::mma::{Bf16, F16, MmaElement};
use super::arch::shared;
use super::arch::shuffle;
use super::arch::thread::{
    block_x, block_y, block_z, grid_dim_x, let_dependent_grid_start, opaque, sync_threads, thread_x,
    thread_x_opaque,
};
use super::score_mod;
use super::sequence::SeqView;
use super::tile::{FragRows, HeadRows, load_tile, swizzle};
use crate::config::{MmaConfig, PAD_ELEMENTS, PAD_EXACT};
use crate::mask;
use crate::math::{exp2, fma};
use crate::params::{AttnParams, partial_index};
use crate::softmax::{FUSED_LIMIT, OnlineSoftmax};

/// The kernel body. Const parameters (spelled out because stable Rust cannot compute array
/// lengths from generics): `D` head dim computed with (`PAD` is the padding kind: exact, `d == D`;
/// otherwise the problem's `d ≤ D` is padded with zero columns, see [`load_tile`]), `PD` elements per shared tile row (`MmaConfig::pitch`), `BM` rows per block, `BN` keys per tile, `W` warps,
/// `MI = BM/(16·W)` row slabs per warp, `NT = BN/8` score tiles, `DT = D/8` output tiles,
/// `QR` whether Q's fragments stay in registers (then `KQ = D/16`, else 1), `T = 32·W` threads,
/// `VS` V buffers (1: `V_j` loads during `S_j`; 2: `V_{j+1}` loads during all of iteration `j`).
///
/// # Safety
/// `p` must describe valid 16-bit tensors with 16-byte aligned rows (2-byte with
/// [`PAD_ELEMENTS`]) and `p.head_dim ≤ D` (`== D` for [`PAD_EXACT`]) (host checks); launch with `32·W` threads and `2·PD·(BM + (1 + VS)·BN)` bytes of
/// dynamic shared memory.
#[inline(always)]
unsafe fn flash_fwd_mma<
    E: MmaElement,
    const D: usize,
    const PD: usize,
    const PAD: u32,
    const WIN: bool,
    const BM: usize,
    const BN: usize,
    const W: usize,
    const MI: usize,
    const NT: usize,
    const DT: usize,
    const QR: bool,
    const KQ: usize,
    const T: usize,
    const VS: usize,
>(
    p: &AttnParams,
) {
    const {
        assert!(MI * 16 * W == BM && NT * 8 == BN && DT * 8 == D && BN % 16 == 0 && D % 16 == 0);
        assert!(PD.is_power_of_two() && PD >= 64 && PD >= D && (PAD != PAD_EXACT || PD == D));
        assert!(if QR { KQ * 16 == D } else { KQ == 1 });
        assert!(T == 32 * W && (VS == 1 || VS == 2));
    };
    if W == 1 && p.splits > 1 {
        // A split decode instance: the combine kernel after it (a programmatic dependent on
        // sm_90) may be scheduled now and wait for this grid on the SMs, so that it runs as soon
        // as the last split is written rather than a launch later. Its blocks are small (no shared
        // memory) beside this kernel's one-warp blocks.
        let_dependent_grid_start();
    }
    let tid = thread_x();
    let warp = tid / 32;
    let lane = tid % 32;
    let (g, t4) = (lane / 4, lane % 4);
    let (h, z) = (block_y(), block_z());
    let causal = p.causal != 0;
    // Grid x is query tiles × splits (splits = 1 without split-KV).
    let splits = p.splits.max(1);
    let (tile_x, split) = (block_x() / splits, block_x() % splits);
    // Causal: the last query tiles see the most keys; start them first.
    let m_block = if causal { grid_dim_x() / splits - 1 - tile_x } else { tile_x };
    // SAFETY: offsets are valid for every z of the grid (host).
    // Only the decode instances (one warp) read a K/V cache's lengths (`SeqView::of_cached`: the
    // host sends caches to no other instance).
    let seq = unsafe { if W == 1 { SeqView::of_cached(p, z) } else { SeqView::of(p, z) } };
    let m0 = m_block * BM as u32;
    if m0 >= seq.len_q {
        return;
    }
    // `max(1)`: the host never passes 0, and the compiler then needs no division-by-zero panic.
    let kv_h = h / p.group.max(1);
    // K and V rows go through a paged cache's table in the decode instances (`W == 1`; the host
    // sends paged caches to no other instance).
    let chunks = PD as u32 / 8;
    let q_tile = shared::base();
    let k_tile = q_tile + 2 * (BM * PD) as u32;

    let row_end = (m0 + BM as u32).min(seq.len_q);
    // The tile's keys: up to its last row's last key, and with a window (`WIN`) from its first
    // row's first key (the bounds grow with the row); tiles outside are never visited.
    let (n_end, n_begin) = if WIN {
        (
            mask::row_key_end(row_end - 1, seq.len_q, seq.len_k, causal, p.window_right),
            mask::row_key_begin(m0, seq.len_q, seq.len_k, p.window_left),
        )
    } else {
        (mask::key_end(row_end, seq.len_q, seq.len_k, causal), 0)
    };
    let free_end = mask::unmasked_end(m0, seq.len_q, seq.len_k, causal).min(seq.len_k);
    // This block's key tiles: all of them, or its split's share (possibly none).
    let n_tiles = n_end.div_ceil(BN as u32);
    let first = (n_begin / BN as u32).min(n_tiles);
    let per_split = (n_tiles - first).div_ceil(splits);
    let j_begin = (first + split * per_split).min(n_tiles);
    let j_end = (j_begin + per_split).min(n_tiles);

    // Q and the first K tile.
    // SAFETY: tiles inside the dynamic shared memory; sources validated by the host.
    unsafe {
        load_tile::<BM, PD, T, PAD>(q_tile, HeadRows::queries(p, &seq, h), m0);
        if j_begin < j_end {
            let n0 = j_begin * BN as u32;
            load_tile::<BN, PD, T, PAD>(k_tile, HeadRows::keys(p, &seq, kv_h).paged_if(W == 1, p, z), n0);
            if VS == 2 {
                // V_j goes to V buffer `j % 2` (the loop's choice), also for a split's first tile.
                let v_tile = k_tile + 2 * (BN * PD) as u32 * (1 + j_begin % 2);
                load_tile::<BN, PD, T, PAD>(
                    v_tile,
                    HeadRows::values(p, &seq, kv_h).paged_if(W == 1, p, z),
                    n0,
                );
            }
        }
    }
    cp_async::commit();

    let mut o = [[[0.0f32; 4]; DT]; MI];
    let mut state = [[OnlineSoftmax::new(); 2]; MI];
    let warp_row0 = warp * (MI * 16) as u32;
    // This lane's ldmatrix rows: A tiles of Q (rows 0-7/8-15, columns 0-7/8-15 in x4 order),
    // B tiles of K (keys 0-7/0-7/8-15/8-15, dims 0-7/8-15/…), B tiles of V, transposed. Derived
    // from an opaque read of the thread index inside the loop (a few integer operations per
    // tile), so that they take no registers across it.
    let frag_rows = || {
        let tid = thread_x_opaque();
        let (lane, warp_row0) = (tid % 32, (tid / 32) * (MI * 16) as u32);
        (
            FragRows::new(warp_row0 + (lane % 8) + 8 * ((lane / 8) % 2), lane / 16, chunks),
            FragRows::new((lane % 8) + 8 * (lane / 16), (lane / 8) % 2, chunks),
            FragRows::new((lane % 8) + 8 * ((lane / 8) % 2), lane / 16, chunks),
        )
    };

    let mut q_frags = [[[0u32; 4]; KQ]; MI];
    if QR && j_begin < j_end {
        // Q's fragments, once, before the key loop (its copies are in the first tile's group,
        // which the first iteration would wait for anyway).
        cp_async::wait::<0>();
        sync_threads();
        let (q_rows, _, _) = frag_rows();
        for (mi, qm) in q_frags.iter_mut().enumerate() {
            for (kk, qf) in qm.iter_mut().enumerate() {
                // SAFETY: inside the Q tile, 16-byte aligned.
                *qf = unsafe { ldmatrix::x4(q_rows.at(shared::base(), mi, kk, chunks)) };
            }
        }
    }
    // The largest |row maximum| for which one FMA per score is accurate (see `softmax`).
    let max_fused = FUSED_LIMIT / p.scale_log2;
    for j in j_begin..j_end {
        let n0 = j * BN as u32;
        cp_async::wait::<0>();
        sync_threads(); // K_j (and Q; with two V buffers V_j too) visible to all; every warp is done with V_{j-1}
        // The tile bases, re-read each iteration (an opaque instruction) so that the compiler
        // derives the fragment addresses inside the loop instead of keeping them all live.
        let q_tile = shared::base();
        let k_tile = q_tile + 2 * (BM * PD) as u32;
        let v_tile = |j: u32| k_tile + 2 * (BN * PD) as u32 * (1 + j % VS as u32);
        let (q_rows, k_rows, v_rows) = frag_rows();
        if VS == 1 {
            // SAFETY: as above.
            unsafe {
                load_tile::<BN, PD, T, PAD>(
                    v_tile(j),
                    HeadRows::values(p, &seq, kv_h).paged_if(W == 1, p, z),
                    n0,
                )
            };
            cp_async::commit();
        }

        // S = Q·K_jᵀ
        let mut s = [[[0.0f32; 4]; NT]; MI];
        for kk in 0..D / 16 {
            let mut a = [[0u32; 4]; MI];
            for (mi, am) in a.iter_mut().enumerate() {
                *am = if QR {
                    q_frags[mi][kk]
                } else {
                    // SAFETY: inside the Q tile, 16-byte aligned.
                    unsafe { ldmatrix::x4(q_rows.at(q_tile, mi, kk, chunks)) }
                };
            }
            for np in 0..NT / 2 {
                // SAFETY: inside the K tile.
                let b = unsafe { ldmatrix::x4(k_rows.at(k_tile, np, kk, chunks)) };
                for mi in 0..MI {
                    E::mma(&mut s[mi][2 * np], &a[mi], b[0], b[1]);
                    E::mma(&mut s[mi][2 * np + 1], &a[mi], b[2], b[3]);
                }
            }
        }

        // Every warp is done with K_j (and, with one V buffer, V_j has arrived): start K_{j+1}
        // (and, with two, V_{j+1} into the buffer V_{j-1} left) so that they stream in during
        // the softmax and O += P·V_j.
        if VS == 1 {
            cp_async::wait::<0>();
        }
        sync_threads();
        if j + 1 < j_end {
            let next = n0 + BN as u32;
            // SAFETY: as above.
            unsafe {
                load_tile::<BN, PD, T, PAD>(
                    k_tile,
                    HeadRows::keys(p, &seq, kv_h).paged_if(W == 1, p, z),
                    next,
                );
                if VS == 2 {
                    load_tile::<BN, PD, T, PAD>(
                        v_tile(j + 1),
                        HeadRows::values(p, &seq, kv_h).paged_if(W == 1, p, z),
                        next,
                    );
                }
            }
        }
        cp_async::commit();

        if WIN {
            // Softcap and ALiBi (problems that have them; the masks below then hide logits).
            // SAFETY: the host sizes the slopes.
            unsafe { score_mod::apply::<MI, NT>(p, &seq, h, &mut s, m0 + warp_row0, n0, (g, t4)) };
            mask_window::<MI, NT, BM>(p, &seq, &mut s, n0, m0, warp_row0, (g, t4), causal);
        } else if n0 + (BN as u32) > free_end {
            // Mask the tiles that cross the diagonal or the end of the keys: each row sees keys
            // below its own limit.
            for (mi, sm) in s.iter_mut().enumerate() {
                for half in 0..2 {
                    let row = m0 + warp_row0 + 16 * mi as u32 + g + 8 * half as u32;
                    let limit = mask::key_end(row + 1, seq.len_q, seq.len_k, causal);
                    for (nt, st) in sm.iter_mut().enumerate() {
                        for e in 0..2 {
                            if n0 + 8 * nt as u32 + 2 * t4 + e as u32 >= limit {
                                st[2 * half + e] = f32::NEG_INFINITY;
                            }
                        }
                    }
                }
            }
        }

        // Online softmax on the accumulators: rows g (elements 0, 1) and g+8 (elements 2, 3).
        // First the recurrence's step for every row (new maximum, rescaled sum, the factor α for
        // the output), then the output's rescale (so that the α die before the exponentials),
        // then the probabilities from each row's new maximum.
        let mut alphas = [[1.0f32; 2]; MI];
        for mi in 0..MI {
            for half in 0..2 {
                let mut m = f32::NEG_INFINITY;
                for st in &s[mi] {
                    m = m.max(st[2 * half]).max(st[2 * half + 1]);
                }
                alphas[mi][half] = state[mi][half].step(shuffle::max4(m), p.scale_log2).alpha;
            }
        }
        // Rescale the output only when some row's maximum moved (α = 1 exactly otherwise, and
        // multiplying by 1 changes nothing): once the maxima settle, most tiles skip it.
        if !shuffle::all(alphas.iter().flatten().all(|&a| a == 1.0)) {
            for (om, am) in o.iter_mut().zip(&alphas) {
                for ot in om.iter_mut() {
                    ot[0] *= am[0];
                    ot[1] *= am[0];
                    ot[2] *= am[1];
                    ot[3] *= am[1];
                }
            }
        }

        // One FMA per score, unless some row's maximum is too large for it (a huge scale): then,
        // a warp-uniform choice once per tile, the maxima are subtracted from the scores first
        // and the same code computes 2^((s − max)·c) exactly (see `softmax`). A fully masked row
        // (maximum -inf) takes that path too, which is right for it as well.
        let largest = state.iter().flatten().fold(0.0f32, |a, st| a.max(st.max.abs()));
        let fused = shuffle::all(largest < max_fused);
        if !fused {
            for (sm, stm) in s.iter_mut().zip(&state) {
                for st in sm.iter_mut() {
                    for (e, x) in st.iter_mut().enumerate() {
                        let m = stm[e / 2].max;
                        *x -= if m == f32::NEG_INFINITY { 0.0 } else { m };
                    }
                }
            }
        }
        for mi in 0..MI {
            for half in 0..2 {
                let offset = if fused { state[mi][half].current(p.scale_log2).neg_max_scaled } else { 0.0 };
                let mut sum = 0.0;
                for st in s[mi].iter_mut() {
                    for e in 0..2 {
                        let x = exp2(fma(st[2 * half + e], p.scale_log2, offset));
                        st[2 * half + e] = x;
                        sum += x;
                    }
                }
                state[mi][half].add(sum);
            }
        }
        // O += P·V_j, with P repacked from accumulators into A fragments.
        for ks in 0..BN / 16 {
            let mut a = [[0u32; 4]; MI];
            for (mi, am) in a.iter_mut().enumerate() {
                *am = E::acc_to_a(&s[mi][2 * ks], &s[mi][2 * ks + 1]);
            }
            for dp in 0..DT / 2 {
                // SAFETY: inside the V tile.
                let b = unsafe { ldmatrix::x4_trans(v_rows.at(v_tile(j), ks, dp, chunks)) };
                for mi in 0..MI {
                    E::mma(&mut o[mi][2 * dp], &a[mi], b[0], b[1]);
                    E::mma(&mut o[mi][2 * dp + 1], &a[mi], b[2], b[3]);
                }
            }
        }
    }
    // Every copy has landed (with no key tile at all, Q's copies by other threads may still be in
    // flight into this warp's rows): then the Q tile can be reused.
    cp_async::wait::<0>();
    sync_threads();

    // (Re-read from the parameters: nothing of the split stays live across the key loop.)
    if p.splits > 1 {
        // SAFETY: forwarded contract (the partial buffers are sized by the host).
        unsafe { store_partials::<MI, DT, PAD>(p, &seq, h, m0 + warp_row0, &o, &state) };
        return;
    }

    // Normalise into this warp's own rows of the Q tile (only this warp ever read them), then copy
    // those rows out with 16-byte stores (element-wise instances: 2-byte stores of the columns
    // before d), each row's chunks by consecutive lanes (coalesced).
    let stage = shared::base();
    for mi in 0..MI {
        for half in 0..2 {
            let mut st = state[mi][half];
            st.sum = shuffle::sum4(st.sum);
            let res = st.finish(p.scale_log2);
            let local = warp_row0 + 16 * mi as u32 + g + 8 * half as u32;
            for (dt, ot) in o[mi].iter().enumerate() {
                let packed = E::pack(ot[2 * half] * res.inv_sum, ot[2 * half + 1] * res.inv_sum);
                // SAFETY: row `local` < BM and chunk `dt` < D/8 of the Q tile.
                unsafe { shared::store_u32(stage + swizzle(local, dt as u32, chunks) + 4 * t4, packed) };
            }
            let row = m0 + local;
            if t4 == 0 && p.lse != 0 && row < seq.len_q {
                let idx = seq.lse_index(p, h, row);
                // SAFETY: inside the log-sum-exp output (host sizing).
                unsafe { global::store_f32(p.lse + 4 * idx, res.lse) };
            }
        }
    }
    shuffle::sync_warp();
    let warp_rows = (MI * 16) as u32;
    for k in 0..(MI * 16 * PD / 8) / 32 {
        let i = lane + 32 * k as u32;
        let (r, c) = (i / chunks, i % chunks);
        let row = m0 + warp_row0 + r;
        // Chunks past the head dim (padded instances) are not stored.
        let inside = match PAD {
            PAD_EXACT => true,
            PAD_ELEMENTS => 8 * c < p.head_dim,
            _ => c < p.head_dim / 8,
        };
        if r < warp_rows && row < seq.len_q && inside {
            // SAFETY: inside the Q tile.
            let v = unsafe { shared::load_u32x4(stage + swizzle(warp_row0 + r, c, chunks)) };
            let dst = p.o + 2 * (seq.offset(&p.o_strides, seq.q_start, row, h) + 8 * c as u64);
            if PAD == PAD_ELEMENTS {
                for e in 0..8 {
                    if 8 * c + (e as u32) < p.head_dim {
                        // SAFETY: row < len_q, column 8c + e < d: inside O, 2-byte aligned.
                        unsafe { global::store_u16(dst + 2 * e as u64, (v[e / 2] >> (16 * (e % 2))) as u16) };
                    }
                }
            } else {
                // SAFETY: row < len_q, chunk c < d/8: inside O, 16-byte aligned (host checks).
                unsafe { global::store_u32x4(dst, v) };
            }
        }
    }
}

/// A sliding window's mask on one key tile's scores (the `WIN` instances): each row sees the keys
/// of its own range (`mask::row_key_begin..mask::row_key_end`). Tiles that every row of the block
/// sees whole are left alone; the bounds that decide it are recomputed here from an opaque copy
/// of `m0` (a few integer operations), so that they take no register across the key loop. Two
/// passes, one bound each: one register per row at the accumulators' peak.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn mask_window<const MI: usize, const NT: usize, const BM: usize>(
    p: &AttnParams,
    seq: &SeqView,
    s: &mut [[[f32; 4]; NT]; MI],
    n0: u32,
    m0: u32,
    warp_row0: u32,
    (g, t4): (u32, u32),
    causal: bool,
) {
    let bn = 8 * NT as u32;
    let m0o = opaque(m0);
    let block_rows = (seq.len_q - m0o).min(BM as u32);
    let free_end = mask::row_key_end(m0o, seq.len_q, seq.len_k, causal, p.window_right);
    let free_begin = mask::row_key_begin(m0o + block_rows - 1, seq.len_q, seq.len_k, p.window_left);
    if n0 + bn > free_end {
        for (mi, sm) in s.iter_mut().enumerate() {
            for half in 0..2 {
                let row = m0 + warp_row0 + 16 * mi as u32 + g + 8 * half as u32;
                let limit = mask::row_key_end(row, seq.len_q, seq.len_k, causal, p.window_right);
                for (nt, st) in sm.iter_mut().enumerate() {
                    for e in 0..2 {
                        if n0 + 8 * nt as u32 + 2 * t4 + e as u32 >= limit {
                            st[2 * half + e] = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }
    if n0 < free_begin {
        for (mi, sm) in s.iter_mut().enumerate() {
            for half in 0..2 {
                let row = m0 + warp_row0 + 16 * mi as u32 + g + 8 * half as u32;
                let begin = mask::row_key_begin(row, seq.len_q, seq.len_k, p.window_left);
                for (nt, st) in sm.iter_mut().enumerate() {
                    for e in 0..2 {
                        if n0 + 8 * nt as u32 + 2 * t4 + (e as u32) < begin {
                            st[2 * half + e] = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }
}

/// Split-KV: writes this warp's rows of the block's split, normalised, with their log-sum-exps,
/// in f32 to the partial buffers (rows past the sequence and columns past the head dim are not
/// written). Each quad of lanes writes a row's 8 consecutive columns of every 8-column tile.
///
/// # Safety
/// `p.partial_o` / `p.partial_lse` must hold `p.splits · p.partial_rows` rows; `p.head_dim` a
/// multiple of 8 unless `PAD` is [`PAD_EXACT`] (element-wise instances never split: the host
/// refuses, as the combine kernel reads 16-byte rows).
#[inline(always)]
unsafe fn store_partials<const MI: usize, const DT: usize, const PAD: u32>(
    p: &AttnParams,
    seq: &SeqView,
    h: u32,
    warp_m0: u32,
    o: &[[[f32; 4]; DT]; MI],
    state: &[[OnlineSoftmax; 2]; MI],
) {
    let lane = thread_x() % 32;
    let (g, t4) = (lane / 4, lane % 4);
    let split = (block_x() % p.splits.max(1)) as u64;
    let d = p.head_dim;
    for mi in 0..MI {
        for half in 0..2 {
            let mut st = state[mi][half];
            st.sum = shuffle::sum4(st.sum);
            let res = st.finish(p.scale_log2);
            let row = warp_m0 + 16 * mi as u32 + g + 8 * half as u32;
            if row >= seq.len_q {
                continue;
            }
            let r = partial_index(split, p.partial_rows, seq.lse_index(p, h, row));
            if t4 == 0 {
                // SAFETY: row `r` of the partial log-sum-exps (host sizing).
                unsafe { global::store_f32(p.partial_lse + 4 * r, res.lse) };
            }
            for (dt, ot) in o[mi].iter().enumerate() {
                // (A condition, not an early exit: the loop stays unrolled, `o` in registers.)
                if PAD == PAD_EXACT || (dt as u32) < d / 8 {
                    let col = (8 * dt + 2 * t4 as usize) as u64;
                    let x = [ot[2 * half] * res.inv_sum, ot[2 * half + 1] * res.inv_sum];
                    // SAFETY: columns `col`, `col + 1` < d of row `r` (host sizing), 8-byte aligned.
                    unsafe { global::store_f32x2(p.partial_o + 4 * (r * d as u64 + col), x) };
                }
            }
        }
    }
}

/// One exported entry per instance of [`crate::for_each_mma_instance!`] and element type; its
/// name is [`crate::mma_kernel_name!`]'s, which is also the host's.
macro_rules! mma_entries {
    (() $(($d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, $p:tt, $win:tt))*) => {
        $( mma_entries!(@one F16, "f16", $d, $m, $n, $w, $b, $v, $p, $win);
           mma_entries!(@one Bf16, "bf16", $d, $m, $n, $w, $b, $v, $p, $win); )*
    };
    (@one $elem:ty, $dt:literal, $d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, $p:tt, $win:tt) => {
        const _: () = {
            /// Tensor-core flash-attention forward kernel (see the module docs).
            ///
            /// # Safety
            /// See [`flash_fwd_mma`].
            #[unsafe(export_name = crate::mma_kernel_name!($dt, $d, $m, $n, $w, $b, $v, $p, $win))]
            pub unsafe extern "ptx-kernel" fn entry(p: AttnParams) {
                const C: MmaConfig = MmaConfig {
                    head_dim: $d,
                    block_m: $m,
                    block_n: $n,
                    warps: $w,
                    min_blocks: $b,
                    v_stages: $v,
                    pad: $p,
                    window: $win,
                };
                const MI: usize = (C.block_m / (16 * C.warps)) as usize;
                const KQ: usize = if C.q_in_registers() { (C.head_dim / 16) as usize } else { 1 };
                // SAFETY: forwarded contract.
                unsafe {
                    flash_fwd_mma::<
                        $elem,
                        { C.head_dim as usize },
                        { C.pitch() as usize },
                        { C.pad },
                        { C.window == 1 },
                        { C.block_m as usize },
                        { C.block_n as usize },
                        { C.warps as usize },
                        MI,
                        { (C.block_n / 8) as usize },
                        { (C.head_dim / 8) as usize },
                        { C.q_in_registers() },
                        KQ,
                        { C.threads() as usize },
                        { C.v_stages as usize },
                    >(&p)
                }
            }
        };
    };
}

crate::for_each_mma_instance!(mma_entries);

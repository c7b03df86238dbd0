//! The tensor-core backward pass (FlashAttention-2's algorithm on `mma.sync` m16n8k16, f32
//! accumulation; sm_80+; on sm_90a the score products `S` and `dP` of both the preprocessing
//! and the main kernel run on `wgmma` m64n64k16 instead, see below), in three kernels:
//!
//! 1. **Preprocessing** (grid as the forward's: query tiles × heads × sequences): per query row,
//!    one pass over its keys recomputing `S = Q·Kᵀ` and `dP = dO·Vᵀ` on tensor cores, the
//!    probabilities `P = exp(scale·S − lse)` from the forward's log-sum-exp, and the row's
//!    [`GradRow`] statistics (`1/Σ P`, the pivot, `D − pivot`). It also zeroes the row's f32 dQ
//!    accumulator.
//! 2. **Main** (grid: key tiles × K/V heads × sequences): a block owns `16·warps` keys, their
//!    dK and dV in registers (each warp 32 keys × a share of the columns). For each query head
//!    of the K/V head's group and each query tile that sees the keys (two stages of Q, dO and
//!    statistics in shared memory, the next one streaming in by `cp.async`): `S = Q·Kᵀ` and
//!    `dP = dO·Vᵀ` (each warp 32 queries × 32 keys), then `P` (normalised) and
//!    `dS = P·((dP − pivot) − (D − pivot))` on the accumulators, stored once to shared memory;
//!    `dV += Pᵀ·dO` and `dK += dSᵀ·Q` read them back transposed, and `dQ += dS·K` is added to
//!    the f32 accumulator with `red.global.add` (vector adds on sm_90; the order, hence the last
//!    bits, vary from run to run; in deterministic mode the key tiles take turns per query
//!    tile, in key order, through a counter each: bit-identical results). See [`bwd_main`].
//! 3. **dQ conversion**: `dQ = scale·acc` in the storage type. On sm_90a it is a programmatic
//!    dependent of the main kernel and waits for that whole grid — or, where
//!    `BwdConfig::tile_counters` holds (the d = 64 window walk, from a 16 MiB accumulator: the
//!    host's rule), for each query tile's own key blocks: the preprocessing kernel sets a counter
//!    per query tile to the number of key blocks that visit it
//!    ([`crate::mask::window_tile_visitors`]), each block counts its tiles down with release
//!    semantics after its walk, and the conversion's blocks, which start as the main kernel's
//!    last blocks leave SMs free, convert a tile once its counter reads 0.
//!
//! **sm_90a** (`WGMMA`): each warpgroup computes 64 queries × 64 keys of `S` and `dP` with
//! `wgmma.mma_async` m64n64k16, both operands in shared memory by descriptor — the
//! preprocessing kernel's one warpgroup per 64-key tile, the main kernel's warpgroup `w / 4`
//! its block's keys `64·(w / 4)…`, each warp 16 queries ([`scores_wgmma`], one function: the
//! same query and key tiles, instruction and `k` order in both kernels, so the scores agree bit
//! for bit, which the numerics need). The Q, dO, K and V tiles are then laid out as `wgmma`'s
//! 128-byte swizzled panels (64 columns each; [`super::tile::panel_swizzle`]), filled by
//! `cp.async` 16-byte copies and made visible to the async proxy by
//! `fence.proxy.async.shared::cta` before the step's barrier — except, in the d = 256
//! instances (`BwdConfig::tma_query_tiles`, where it measured faster), the main kernel's Q and
//! dO tiles where the host passes their tensor maps (`BwdParams::maps`): those arrive by TMA,
//! one thread issuing each step's boxes onto its stage's `mbarrier` ([`tma_step`]), so the
//! warps spend no instructions on them (a variable-length sequence's last, partial tile is
//! still copied by `cp.async`: TMA would bring the next sequence's rows). The accumulators per
//! warp are `mma.sync`'s m16n8 fragments, so P and dS are computed as before. At d = 64 and 128 the
//! main kernel's `dV += Pᵀ·dO` and `dK += dSᵀ·Q` run on `wgmma` too (FlashAttention-3's
//! backward): each warpgroup owns its 64 keys × D of dV and dK as `wgmma` accumulators, P and
//! dS are stored as 64-key panels and read MN-major (`.trans` A), dO and Q MN-major B; at
//! d = 128 (two warpgroups) and d = 64 on one warpgroup also `dQ += dS·K` (its own `wgmma` group,
//! issued first, so that its adds overlap the dV/dK products). d = 32, the two-warpgroup d = 64
//! blocks (and sm_80) keep those products on `mma.sync`. At d = 256 (sm_90a only: 211 KiB of
//! shared memory) the block's two warpgroups share its 64 keys and split the columns, 128 each,
//! so that each holds d = 128's dV/dK accumulators (`BwdConfig::col_groups`): both compute the
//! same S and dP over all 256 columns (the product the preprocessing kernel computes, bit for
//! bit), each stores half of P and dS, and each computes its two 64-column panels of dQ, one
//! `wgmma` group after the other. In d = 128's plain instance the warps
//! add their dQ share through shared-memory staging rows with bulk reductions
//! ([`stage_dq_rows`]); elsewhere, and in deterministic mode, with `red.global.add`.
//!
//! Grouped-query attention sums dK and dV over the group in registers (one block walks every
//! query head of its K/V head). Tiles are swizzled as the forward's ([`super::tile`]); padded
//! columns are zero and never stored. Memory beyond the inputs and outputs: the f32 dQ
//! accumulator and four f32 statistics per query row.

use super::arch::cp_async;
use super::arch::global;
use super::arch::ldmatrix;
use super::arch::mma::{Bf16, F16, MmaElement};
use super::arch::shared;
use super::arch::shuffle;
#[cfg(target_feature = "sm_90a")]
use super::arch::thread::sync_threads_or;
use super::arch::thread::{
    block_x, block_xyz_opaque, block_y, block_z, global_timer_ns, let_dependent_grid_start, nanosleep,
    sync_threads, thread_x, thread_x_opaque, wait_for_previous_grid,
};
#[cfg(target_feature = "sm_90a")]
use super::arch::tma;
use super::arch::wgmma::{self, WgmmaElement};
use super::score_mod::{self, HeadMod, MOD_ALIBI, MOD_NONE, MOD_SOFTCAP, mod_kind};
use super::sequence::SeqView;
use super::tile::{FragRows, HeadRows, load_tile_in, panel_swizzle, swizzle};
use crate::config::BwdConfig;
use crate::config::PAD_CHUNKS;
#[cfg(target_feature = "sm_90a")]
use crate::config::{BWD_DQ_STAGE_PITCH, BWD_STAGE_BARRIER_BYTES};
use crate::mask;
use crate::math::fma;
#[cfg(target_feature = "sm_90a")]
use crate::params::TENSOR_MAP_BYTES;
use crate::params::{BWD_BLOCK_M, BWD_PREP_BLOCK_N, BWD_PREP_THREADS, BwdParams};
use crate::softmax::{GradRow, lse_offset, prob_from_offset};

/// Query rows per tile (every backward kernel).
const BM: usize = BWD_BLOCK_M as usize;
/// Keys per tile of the preprocessing kernel.
const PBN: usize = BWD_PREP_BLOCK_N as usize;
/// Threads of the preprocessing and conversion kernels.
const PT: usize = BWD_PREP_THREADS as usize;

/// Whether the score products run on `wgmma` (sm_90a; `mma.sync` before), and with them the Q,
/// dO, K and V tiles are laid out as `wgmma`'s 128-byte swizzled panels
/// ([`super::tile::panel_swizzle`]; the same bytes as the row layout at a 64-element pitch).
const WGMMA: bool = cfg!(target_feature = "sm_90a");

/// The first byte of a kernel's tiles: the dynamic shared memory, rounded up to 1024 bytes
/// where `wgmma` reads them (the hardware swizzle is a function of the address; the host's
/// sizes hold the slack).
#[inline(always)]
fn tiles_base() -> u32 {
    if WGMMA { (shared::base() + 1023) & !1023 } else { shared::base() }
}

/// Lane addresses of a warp's columns `c0..` (the `ldmatrix` B operand read transposed, lanes
/// 16–31 on the next 8 columns) in a Q, dO or K tile of `ROWS` rows: the [`FragRows`] of row
/// `row`, the byte offset of `c0`'s panel from the tile, and the chunks a row to address it with.
/// In the row layout the offset is 0; in `wgmma`'s panels the warp's columns must not cross a
/// panel (`c0 % 64 + 16·pairs ≤ 64`, which the callers' tilings keep).
#[inline(always)]
fn col_rows<const ROWS: usize, const PD: usize>(row: u32, c0: u32, lane: u32) -> (FragRows, u32, u32) {
    if WGMMA {
        (FragRows::new(row, (c0 % 64) / 8 + lane / 16, 8), (c0 / 64) * 128 * ROWS as u32, 8)
    } else {
        (FragRows::new(row, c0 / 8 + lane / 16, PD as u32 / 8), 0, PD as u32 / 8)
    }
}

/// `S = A_s·B_sᵀ` and `dP = A_d·B_dᵀ` on `wgmma` for one warpgroup: 64 rows (queries) × 64 keys
/// over the head dim `D`, each warp's 16 rows as `mma.sync` m16n8 accumulator tiles (`s[nt]`:
/// keys `8·nt..`). The A tiles (Q, dO) are `AR`-row tiles from their first row, the B tiles (K,
/// V) `BR`-row tiles from this warpgroup's first key (a multiple of 8), all in `wgmma`'s
/// panels. The one instruction shape (`m64n64k16`) and `k` order of both backward kernels: the
/// preprocessing kernel and the main kernel get bit-identical scores from it.
///
/// `under` runs after the products are issued and before they are waited for: work that needs
/// no result of theirs and touches no shared memory they read (the main kernel issues the next
/// step's copies there, so that their address arithmetic runs under the products).
///
/// # Safety
/// The tiles loaded (copies waited for, [`wgmma::fence_proxy_async_shared`] and a barrier
/// since) and 1024-byte aligned panels; the whole warpgroup calls it.
#[inline(always)]
#[cfg(target_feature = "sm_90a")]
unsafe fn scores_wgmma<E: WgmmaElement, const D: usize, const AR: usize, const BR: usize>(
    s: &mut [[f32; 4]; 8],
    dp: &mut [[f32; 4]; 8],
    (a_s, a_d): (u32, u32),
    (b_s, b_d): (u32, u32),
    under: impl FnOnce(),
) {
    use wgmma::{SWIZZLE_ATOM_BYTES, descriptor};
    // Each tile's descriptor once; step kk adds its byte offset in 16-byte units to the start
    // address field (shared addresses stay below 2^18, so the field never carries).
    let [ds, dd, ks, kd] = [a_s, a_d, b_s, b_d].map(|t| descriptor(t, 16, SWIZZLE_ATOM_BYTES));
    let mut sf = [0.0f32; 32];
    let mut df = [0.0f32; 32];
    wgmma::fence();
    for kk in 0..D / 16 {
        // k16 step kk: 32 bytes into panel kk / 4.
        let (panel, within) = (kk / 4, 32 * (kk % 4));
        let (a_off, b_off) =
            (((panel * 128 * AR + within) / 16) as u64, ((panel * 128 * BR + within) / 16) as u64);
        // SAFETY: descriptors of loaded, swizzled panels (the caller's contract).
        unsafe {
            E::ss_n64(&mut sf, ds + a_off, ks + b_off, (kk > 0) as u32);
            E::ss_n64(&mut df, dd + a_off, kd + b_off, (kk > 0) as u32);
        }
    }
    wgmma::commit();
    under();
    wgmma::wait::<0>();
    wgmma::settle(&mut sf);
    wgmma::settle(&mut df);
    for nt in 0..8 {
        s[nt] = [sf[4 * nt], sf[4 * nt + 1], sf[4 * nt + 2], sf[4 * nt + 3]];
        dp[nt] = [df[4 * nt], df[4 * nt + 1], df[4 * nt + 2], df[4 * nt + 3]];
    }
}

/// Issues `dQ = dS·K` for one warpgroup and one 64-column panel of dQ as its own `wgmma` group
/// (`m64n64k16`, `k` = the block's `BN` keys in steps of 16): dS K-major from its 64-key panels
/// (as Q in the scores), K MN-major from panel `panel` of the K tile (`BN` rows).
///
/// # Safety
/// The dS tile stored and fenced, the K tile loaded, both behind a barrier and 1024-byte
/// aligned; the whole warpgroup calls it.
#[inline(always)]
#[cfg(target_feature = "sm_90a")]
unsafe fn dq_wgmma<E: WgmmaElement, const BN: usize>(
    qf: &mut [f32; 32],
    ds_tile: u32,
    k_tile: u32,
    panel: u32,
) {
    use wgmma::{SWIZZLE_ATOM_BYTES, descriptor};
    // Bytes of one 64-column panel of a BM-row tile (dS), and of the K tile.
    let (pb, kb) = (128 * BM as u32, 128 * BN as u32);
    wgmma::fence();
    for ks in 0..BN / 16 {
        // 16 keys: 32 bytes into the dS tile's 64-key panel ks / 4, rows 16·ks… of the K tile's
        // panel.
        let a = descriptor(ds_tile + (ks / 4) as u32 * pb + (32 * (ks % 4)) as u32, 16, SWIZZLE_ATOM_BYTES);
        let b = descriptor(k_tile + panel * kb + (ks * 16 * 128) as u32, kb, SWIZZLE_ATOM_BYTES);
        // SAFETY: descriptors inside the tiles (the caller's contract).
        unsafe { E::ss_tn_n64(qf, a, b, (ks > 0) as u32) };
    }
    wgmma::commit();
}

/// Address of log-sum-exp row `r`'s statistics: 16 bytes, `[offset, 1/Σ P, pivot, D − pivot]`
/// (`offset` the row's [`lse_offset`]), copied whole into shared memory by the main kernel.
#[inline(always)]
fn stat_addr(bp: &BwdParams, r: u64) -> u64 {
    bp.stats + 16 * r
}

/// Index of the deterministic mode's turn counter of query tile `tile` of head `h`, sequence `z`.
#[inline(always)]
fn lock_index(bp: &BwdParams, z: u32, h: u32, tile: u32) -> u64 {
    (z as u64 * bp.attn.heads_q as u64 + h as u64) * bp.q_tiles as u64 + tile as u64
}

/// The main kernel's block: `(key tile, K/V head, sequence)`, from a key-major grid in groups
/// of `G` (K/V head, sequence) pairs ([`BwdParams::key_major`]: `x` = pair within the group, `y`
/// = key tile, `z` = group) or the head-major one (`x` = key tile, `y` = K/V head, `z` =
/// sequence). The special registers are read again at each call, opaquely, so that nothing
/// derived from them is kept through the walk (registers are the d = 128 and 256 instances'
/// limit: with the indices selected once, their window instances spilled).
#[inline(always)]
fn key_block(bp: &BwdParams) -> (u32, u32, u32) {
    let (x, y, z) = block_xyz_opaque();
    if bp.key_major != 0 {
        // (`max(1)`: no division that can fail; the host sets both.)
        let pair = z * bp.key_major + x;
        let kv_heads = bp.kv_heads.max(1);
        (y, pair % kv_heads, pair / kv_heads)
    } else {
        (x, y, z)
    }
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
#[cfg(not(target_feature = "sm_90a"))]
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
unsafe fn bwd_prep<
    E: WgmmaElement,
    const D: usize,
    const PD: usize,
    const PS: usize,
    const WIN: bool,
    const RES: bool,
    const TC: bool,
>(
    bp: &BwdParams,
) {
    const { assert!(D % 16 == 0 && PD >= D && PT % (PD / 8) == 0 && BM == 16 * (PT / 32) && (PS == 1 || PS == 2)) };
    // On `wgmma`: the block is one warpgroup, its scores one 64 × 64 product a tile.
    const { assert!(!WGMMA || (PT == 128 && BM == 64 && PBN == 64)) };
    // The main kernel (a programmatic dependent on sm_90a) may be scheduled now: its blocks load
    // their K and V tiles on SMs this grid's last blocks leave, then wait for this grid.
    let_dependent_grid_start();
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
    // Window walks on sm_90a (`BwdConfig::tile_counters`): the number of key blocks that will
    // add to this query tile, which the conversion kernel waits to see counted down to 0
    // (`BwdParams::dq_ready`).
    #[cfg(target_feature = "sm_90a")]
    if TC && bp.dq_ready != 0 && thread_x() == 0 {
        let tile = block_x();
        let (l, r) = (p.window_left, p.window_right);
        let visitors =
            mask::window_tile_visitors(tile, BM as u32, p.block_n, seq.len_q, seq.len_k, causal, l, r);
        // SAFETY: one counter per block of this grid (host sizing).
        unsafe { global::store_u32(bp.dq_ready + 4 * lock_index(bp, z, h, tile), visitors) };
    }
    if m0 >= seq.len_q {
        return;
    }
    // (The residual entries, `RES`: a training forward's residuals give D from O, without the
    // pass over the keys, unless a row of the tile needs that pass.)
    #[cfg(target_feature = "sm_90a")]
    // SAFETY: forwarded contract (the residual buffers are sized and laid out by the host).
    if RES && bp.residual_rows != 0 && unsafe { prep_from_residuals::<E, D, PD>(bp, &seq, h, m0) } {
        return;
    }
    let kv_h = h / p.group.max(1);
    #[cfg(not(target_feature = "sm_90a"))]
    let chunks = PD as u32 / 8;
    let tile_bytes = |rows: usize| 2 * (rows * PD) as u32;
    let q_tile = tiles_base();
    let do_tile = q_tile + tile_bytes(BM);
    // `PS` stages of (K, V) ([`BwdConfig::prep_stages`]): with two, tile j+1 streams in during
    // tile j's products and probabilities; with one, during its probabilities only.
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
        load_tile_in::<BM, PD, PT, PAD_CHUNKS, WGMMA>(q_tile, HeadRows::queries(p, &seq, h), m0);
        load_tile_in::<BM, PD, PT, PAD_CHUNKS, WGMMA>(do_tile, HeadRows::outputs(p, &seq, h), m0);
        if first < n_tiles {
            let n0 = first * PBN as u32;
            load_tile_in::<PBN, PD, PT, PAD_CHUNKS, WGMMA>(
                k_tile(first % PS as u32),
                HeadRows::keys(p, &seq, kv_h),
                n0,
            );
            load_tile_in::<PBN, PD, PT, PAD_CHUNKS, WGMMA>(
                k_tile(first % PS as u32) + tile_bytes(PBN),
                HeadRows::values(p, &seq, kv_h),
                n0,
            );
        }
    }
    cp_async::commit();

    zero_dq_rows(bp, &seq, h, m0, row_end, tid);

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
    let offset = [lse_offset(lse[0]), lse_offset(lse[1])];
    for j in first..n_tiles {
        let n0 = j * PBN as u32;
        cp_async::wait::<0>();
        if WGMMA {
            wgmma::fence_proxy_async_shared();
        }
        sync_threads(); // K_j, V_j (and Q, dO) visible; every warp is done with stage j+1's last use
        // Issues tile j+1's copies into its stage.
        let load_next = || {
            let next = k_tile((j + 1) % PS as u32);
            // SAFETY: as above.
            unsafe {
                load_tile_in::<PBN, PD, PT, PAD_CHUNKS, WGMMA>(
                    next,
                    HeadRows::keys(p, &seq, kv_h),
                    n0 + PBN as u32,
                );
                load_tile_in::<PBN, PD, PT, PAD_CHUNKS, WGMMA>(
                    next + tile_bytes(PBN),
                    HeadRows::values(p, &seq, kv_h),
                    n0 + PBN as u32,
                );
            }
        };
        if PS == 2 && j + 1 < n_tiles {
            load_next();
        }
        cp_async::commit();
        let kt = k_tile(j % PS as u32);
        let vt = kt + tile_bytes(PBN);
        #[cfg(not(target_feature = "sm_90a"))]
        let (ar, br) = {
            let tid_o = thread_x_opaque();
            (a_rows(tid_o % 32, 16 * (tid_o / 32), chunks), b_rows(tid_o % 32, chunks))
        };
        let q_tile = tiles_base();
        let do_tile = q_tile + tile_bytes(BM);
        let mut s = [[0.0f32; 4]; PBN / 8];
        let mut dp = [[0.0f32; 4]; PBN / 8];
        // sm_90a: the block's 64 × 64 scores as one warpgroup's `wgmma` products (the main
        // kernel's shape and order).
        #[cfg(target_feature = "sm_90a")]
        // SAFETY: the tiles are loaded, fenced and behind the barrier above; 1024-byte aligned.
        unsafe {
            scores_wgmma::<E, D, BM, PBN>(&mut s, &mut dp, (q_tile, do_tile), (kt, vt), || {})
        };
        #[cfg(not(target_feature = "sm_90a"))]
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
        if PS == 1 {
            // Every warp has read K_j and V_j (the `wgmma` group waited for, or the `ldmatrix`
            // results used): tile j+1 may overwrite the one stage, under the probabilities.
            sync_threads();
            if j + 1 < n_tiles {
                load_next();
            }
            cp_async::commit();
        }
        if WIN {
            // Softcap and ALiBi (problems that have them): the scores become logits.
            // SAFETY: the host sizes the slopes.
            unsafe {
                score_mod::apply::<1, { PBN / 8 }>(
                    p,
                    &seq,
                    h,
                    core::array::from_mut(&mut s),
                    m0 + warp_row0,
                    n0,
                    (g, t4),
                )
            };
        }
        let scale_log2 = p.scale_log2;
        // A tile every row of the warp sees whole (no window, before each row's last key: all
        // but the diagonal and last tiles) takes its probabilities without the per-key mask.
        let whole = !WIN && shuffle::all(n0 + PBN as u32 <= limit[0].min(limit[1]));
        for (half, st) in stats.iter_mut().enumerate() {
            // Probabilities (0 where masked) and this lane's most probable key of the tile.
            let (best, best_dp) = if whole {
                tile_probs::<false, { PBN / 8 }>(
                    &mut s,
                    &dp,
                    half,
                    scale_log2,
                    offset[half],
                    (0, u32::MAX, 0),
                )
            } else {
                tile_probs::<true, { PBN / 8 }>(
                    &mut s,
                    &dp,
                    half,
                    scale_log2,
                    offset[half],
                    (begin[half], limit[half], n0 + 2 * t4),
                )
            };
            let (mut best, mut best_dp) = (best, best_dp);
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
            // SAFETY: row `r` of the statistics (host sizing), 16-byte aligned.
            unsafe {
                global::store_u32x4(stat_addr(bp, r), [offset[half], inv, st.pivot, d_rel].map(f32::to_bits))
            };
        }
    }
    // No copy stays in flight past the kernel (with no key tile, Q's and dO's never waited).
    cp_async::wait::<0>();
}

/// Zeroes rows `m0..row_end` of head `h`'s dQ accumulator (16-byte stores; rows of d = 8k
/// floats), by the [`PT`] threads of a preprocessing block (`tid` this one).
#[inline(always)]
fn zero_dq_rows(bp: &BwdParams, seq: &SeqView, h: u32, m0: u32, row_end: u32, tid: u32) {
    let p = &bp.attn;
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
}

/// The preprocessing kernel's work from a training forward's residuals
/// ([`BwdParams::residual_rows`]), for the [`BM`] query rows from `m0` (some of them inside the
/// sequence): each row's statistics `[offset, 1/ℓ', 0, D]` with the forward's offset and sum
/// (so that the main kernel's `P = 2^(s·scale_log2 + offset)/ℓ'` is the forward's probability),
/// and `D = dO·O + dO·O_lo`, both products on `wgmma` with [`scores_wgmma`] — the instruction
/// and `k` order in which the main kernel forms `dP = dO·Vᵀ`. So in a row whose forward output
/// is one key's V row exactly (one visible key, or the others' probabilities rounded away:
/// `O_lo = 0`), `D` is that key's `dP` bit for bit and its `dS = P·(dP − D)` exactly 0, as in
/// standard attention; elsewhere `O + O_lo` is O in f32 to about twice the storage precision,
/// the accuracy of the pass over the keys. Also zeroes the rows' dQ accumulator, as that pass
/// does. Returns false, having written nothing, when a row of the tile has a flagged offset
/// (NaN: `|max·scale_log2|` too large for one FMA), for the pass over the keys to run.
///
/// # Safety
/// As [`bwd_prep`], with `residual_rows`, `o` and `o_lo` valid for the problem (host).
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
unsafe fn prep_from_residuals<E: WgmmaElement, const D: usize, const PD: usize>(
    bp: &BwdParams,
    seq: &SeqView,
    h: u32,
    m0: u32,
) -> bool {
    let p = &bp.attn;
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t4) = (lane / 4, lane % 4);
    // Lane (g, t4) of warp w holds the scores of tile rows 16·w + g (+ 8) and columns
    // 8·nt + 2·t4 + e: the diagonal of rows 16·w + g + 8·half lies in accumulator tile
    // nt = 2·w + half, element 2·half + g % 2, of the lane with t4 = g / 2, which writes the row.
    let holder = t4 == g / 2;
    let rows = [0, 1].map(|half| m0 + 16 * warp + g + 8 * half);
    let mut fwd = [[0.0f32; 2]; 2];
    for (half, f) in fwd.iter_mut().enumerate() {
        if holder && rows[half] < seq.len_q {
            // SAFETY: the row's two f32 (host sizing), 8-byte aligned.
            *f = unsafe { global::load_f32x2(bp.residual_rows + 8 * seq.lse_index(p, h, rows[half])) };
        }
    }
    if sync_threads_or(fwd[0][0].is_nan() | fwd[1][0].is_nan()) {
        return false;
    }
    let tile_bytes = 2 * (BM * PD) as u32;
    let (o_tile, do_tile) = (tiles_base(), tiles_base() + tile_bytes);
    let lo_tile = do_tile + tile_bytes;
    // SAFETY: three tiles inside the dynamic shared memory (its Q, dO and first K tiles);
    // sources validated by the host.
    unsafe {
        load_tile_in::<BM, PD, PT, PAD_CHUNKS, true>(
            o_tile,
            HeadRows::query_rows(bp.o, &bp.o_strides, p, seq, h),
            m0,
        );
        load_tile_in::<BM, PD, PT, PAD_CHUNKS, true>(do_tile, HeadRows::outputs(p, seq, h), m0);
        load_tile_in::<BM, PD, PT, PAD_CHUNKS, true>(
            lo_tile,
            HeadRows::query_rows(bp.o_lo, &bp.o_strides, p, seq, h),
            m0,
        );
    }
    cp_async::commit();
    zero_dq_rows(bp, seq, h, m0, (m0 + BM as u32).min(seq.len_q), tid);
    cp_async::wait::<0>();
    wgmma::fence_proxy_async_shared();
    sync_threads();
    let mut main = [[0.0f32; 4]; BM / 8];
    let mut low = [[0.0f32; 4]; BM / 8];
    // SAFETY: the tiles are loaded, fenced and behind the barrier above; 1024-byte aligned.
    unsafe {
        scores_wgmma::<E, D, BM, BM>(&mut main, &mut low, (do_tile, do_tile), (o_tile, lo_tile), || {})
    };
    for half in 0..2 {
        // (Selected with compile-time indices only: a lane-dependent index would put the
        // accumulators in local memory.)
        let (mut dm, mut dl) = (0.0f32, 0.0f32);
        for nt in 0..BM / 8 {
            if nt as u32 == 2 * warp + half as u32 {
                let odd = g % 2 == 1;
                dm = if odd { main[nt][2 * half + 1] } else { main[nt][2 * half] };
                dl = if odd { low[nt][2 * half + 1] } else { low[nt][2 * half] };
            }
        }
        let [offset, l] = fwd[half];
        if holder && rows[half] < seq.len_q {
            // A row without keys (ℓ = 0) has no probabilities: offset -inf, 1/ℓ taken as 0.
            let (offset, inv) = if l == 0.0 { (f32::NEG_INFINITY, 0.0) } else { (offset, 1.0 / l) };
            let r = seq.lse_index(p, h, rows[half]);
            // SAFETY: row `r` of the statistics (host sizing), 16-byte aligned.
            unsafe { global::store_u32x4(stat_addr(bp, r), [offset, inv, 0.0, dm + dl].map(f32::to_bits)) };
        }
    }
    true
}

/// The preprocessing kernel's probabilities of one row (elements `2·half`, `2·half + 1` of the
/// lane's `NT` 8-key accumulator tiles `s`, in place: `2^(s·scale_log2 + offset)`) and the
/// lane's most probable key of the tile, `(P, dP)` (`(0, 0)` if none). With `MASKED`, keys
/// outside `begin..limit` get probability 0 (the lane's keys are `key0 + 8·nt + e`);
/// without, every key counts (the caller knows the row sees the whole tile). Branch-free.
#[inline(always)]
fn tile_probs<const MASKED: bool, const NT: usize>(
    s: &mut [[f32; 4]; NT],
    dp: &[[f32; 4]; NT],
    half: usize,
    scale_log2: f32,
    offset: f32,
    (begin, limit, key0): (u32, u32, u32),
) -> (f32, f32) {
    let (mut best, mut best_dp) = (0.0f32, 0.0f32);
    for (nt, (sn, dn)) in s.iter_mut().zip(dp).enumerate() {
        for e in 0..2 {
            let x = &mut sn[2 * half + e];
            let pr = prob_from_offset(*x, scale_log2, offset);
            *x = if MASKED {
                // (Branch-free: the probability of every score, 0 selected for masked ones.)
                let key = key0 + 8 * nt as u32 + e as u32;
                if (key < limit) & (key >= begin) { pr } else { 0.0 }
            } else {
                pr
            };
            let better = *x > best;
            best = if better { *x } else { best };
            best_dp = if better { dn[2 * half + e] } else { best_dp };
        }
    }
    (best, best_dp)
}

/// One query row's inputs to its P and dS: the statistics `[offset, 1/Σ P, pivot, D − pivot]`,
/// its visible keys `begin..limit`, this lane's first key `key0` (its keys are
/// `key0 + 8·nt + e`) and `scale_log2`.
struct RowCtx {
    stats: [f32; 4],
    begin: u32,
    limit: u32,
    key0: u32,
    scale_log2: f32,
}

impl RowCtx {
    /// Whether the row sees every key of `first..first + keys`.
    #[inline(always)]
    fn sees(&self, first: u32, keys: u32) -> bool {
        (self.begin <= first) & (first + keys <= self.limit)
    }
}

/// Score modifiers of kind `M` on one row's `NT` 8-key tiles of the lane (elements `2·half`,
/// `2·half + 1`), in place: each raw score becomes its logit; with a softcap, each `dP` becomes
/// `((dP − pivot) − (D − pivot))·∂logit/∂s` and the row's pivot terms 0, so that
/// [`probs_and_ds`]'s `dS = P·((dP − 0) − 0)` carries the softcap's derivative. `pos` is the
/// row's key position (ALiBi).
#[inline(always)]
fn modify_row<const M: u32, const NT: usize>(
    hm: &HeadMod,
    row: &mut RowCtx,
    sc: &mut [[f32; 4]; NT],
    dp: &mut [[f32; 4]; NT],
    half: usize,
    pos: f32,
) {
    let [_, _, pivot, d_rel] = row.stats;
    let key0 = row.key0 as f32;
    for nt in 0..NT {
        for e in 0..2 {
            let (logit, slope) = hm.logit::<M>(sc[nt][2 * half + e], pos, key0 + (8 * nt + e) as f32);
            sc[nt][2 * half + e] = logit;
            if M == MOD_SOFTCAP {
                let x = &mut dp[nt][2 * half + e];
                *x = ((*x - pivot) - d_rel) * slope;
            }
        }
    }
    if M == MOD_SOFTCAP {
        row.stats[2] = 0.0;
        row.stats[3] = 0.0;
    }
}

/// The ALiBi instance's scores of one row, in place, as the exponents of their probabilities:
/// `raw·scale·scale_log2 + offset − slope·scale_log2·|pos − key|` — the logit
/// [`HeadMod::logit`] forms, scaled and offset as [`prob_from_offset`] would — with the key's
/// distance `pos − key` as the row's distance to the lane's first key less the key's
/// compile-time offset `8·nt + e` (positions are integers below 2^24: both distances exact).
/// With the causal mask (`CAUSAL`) every key the row sees lies at or before its position, so
/// `|pos − key| = pos − key`, and the keys it does not see get probability 0 whatever their
/// exponent: two FMAs a score, one more than without ALiBi (the logit, its scaling and the
/// offset were four to five operations: session 24's profile put them at the whole of ALiBi's
/// extra time). Without the mask, three. `(pos, key0, scale_log2, offset)`: the row's position
/// and the lane's first key, the scale to base 2 and the row's offset.
#[inline(always)]
fn alibi_exponents<const NT: usize, const CAUSAL: bool>(
    hm: &HeadMod,
    sc: &mut [[f32; 4]; NT],
    half: usize,
    (pos, key0, scale_log2, offset): (f32, u32, f32, f32),
) {
    let a = hm.scale * scale_log2;
    let s2 = hm.sm.alibi_slope * scale_log2;
    let dist0 = pos - key0 as f32;
    // `offset − s2·dist0`: the exponent's addend at the lane's first key.
    let base = fma(-s2, dist0, offset);
    for (nt, s) in sc.iter_mut().enumerate() {
        for e in 0..2 {
            let c = (8 * nt + e) as f32;
            let add = if CAUSAL { fma(s2, c, base) } else { fma(-s2, (dist0 - c).abs(), offset) };
            let x = &mut s[2 * half + e];
            *x = fma(*x, a, add);
        }
    }
}

/// P (normalised; 0 where masked) and dS of one row's `NT` 8-key tiles of the lane (elements
/// `2·half`, `2·half + 1` of each accumulator), handed to `store(nt, P, dS)`. Branch-free: every
/// score's probability (a row without probabilities has `1/Σ P = 0`, and `offset = -inf` where
/// it saw no key), 0 selected where masked — only with `MASKED` (without, the caller knows
/// that the row sees every key of the tiles).
#[inline(always)]
fn probs_and_ds<const MASKED: bool, const NT: usize>(
    row: &RowCtx,
    sc: &[[f32; 4]; NT],
    dp: &[[f32; 4]; NT],
    half: usize,
    mut store: impl FnMut(usize, [f32; 2], [f32; 2]),
) {
    let [offset, inv, pivot, d_rel] = row.stats;
    for nt in 0..NT {
        let mut pr = [0.0f32; 2];
        let mut ds = [0.0f32; 2];
        for e in 0..2 {
            let key = row.key0 + 8 * nt as u32 + e as u32;
            let x = prob_from_offset(sc[nt][2 * half + e], row.scale_log2, offset) * inv;
            pr[e] = if !MASKED || ((key < row.limit) & (key >= row.begin)) { x } else { 0.0 };
            ds[e] = GradRow::ds(pr[e], dp[nt][2 * half + e], pivot, d_rel);
        }
        store(nt, pr, ds);
    }
}

/// One row's score modifiers of kind `kind` ([`modify_row`]) and then its P and dS
/// ([`probs_and_ds`]; `whole`: the row sees every key of the tiles), on `NT` 8-key tiles of the
/// lane: [`bwd_main`]'s column groups each take half of a row's tiles through it.
#[inline(always)]
fn row_probs<const NT: usize>(
    hm: &HeadMod,
    kind: u32,
    row: &mut RowCtx,
    (sc, dp): (&mut [[f32; 4]; NT], &mut [[f32; 4]; NT]),
    (half, pos, whole): (usize, f32, bool),
    store: impl FnMut(usize, [f32; 2], [f32; 2]),
) {
    match kind {
        MOD_NONE => {}
        MOD_ALIBI => modify_row::<MOD_ALIBI, NT>(hm, row, sc, dp, half, pos),
        _ => modify_row::<MOD_SOFTCAP, NT>(hm, row, sc, dp, half, pos),
    }
    if whole {
        probs_and_ds::<false, NT>(row, sc, dp, half, store);
    } else {
        probs_and_ds::<true, NT>(row, sc, dp, half, store);
    }
}

/// `acc += A·Bᵀ` over the head dim, for one warp's `MT` 16-row slabs of the `[m][k]` tile `a`
/// and `NT` 8-row tiles of the `[n][k]` tile `b` (both swizzled, `chunks` a row; the lanes'
/// addresses as [`a_rows`] and [`b_rows`] give them): `MT·NT` independent accumulator chains.
///
/// # Safety
/// The addressed rows must lie inside the tiles.
#[cfg(not(target_feature = "sm_90a"))]
#[inline(always)]
unsafe fn tile_product<E: MmaElement, const D: usize, const MT: usize, const NT: usize>(
    acc: &mut [[[f32; 4]; NT]; MT],
    (a_tile, ar): (u32, &FragRows),
    (b_tile, br): (u32, &FragRows),
    chunks: u32,
) {
    for kk in 0..D / 16 {
        let mut a = [[0u32; 4]; MT];
        for (mt, am) in a.iter_mut().enumerate() {
            // SAFETY: forwarded contract; 16-byte aligned.
            *am = unsafe { ldmatrix::x4(ar.at(a_tile, mt, kk, chunks)) };
        }
        for np in 0..NT / 2 {
            // SAFETY: as above.
            let b = unsafe { ldmatrix::x4(br.at(b_tile, np, kk, chunks)) };
            for mt in 0..MT {
                E::mma(&mut acc[mt][2 * np], &a[mt], b[0], b[1]);
                E::mma(&mut acc[mt][2 * np + 1], &a[mt], b[2], b[3]);
            }
        }
    }
}

/// The TMA barrier of Q/dO stage `s` in the main kernel's shared memory: after the two stages
/// of statistics that start at `rows` ([`BwdConfig::shared_bytes`]).
#[inline(always)]
#[cfg(target_feature = "sm_90a")]
fn stage_barrier(rows: u32, s: u32) -> u32 {
    rows + 2 * 16 * BM as u32 + 8 * s
}

/// Issues one backward step's Q and dO tiles by TMA (one thread): `PD / 64` 64-column panels
/// each, of `BM` rows from `(row, head, batch)` of the Q map at `maps` and the dO map at
/// `maps + 128` (boxes of 64 columns × `BM` rows, 128-byte swizzled: the panels `load_tile_in`
/// writes with `PANELS`), into the stage at `stage` (Q, then dO `2·BM·PD` bytes on), completing
/// on `bar`, which is told to expect both tiles' bytes. Rows past the map's sequence dimension
/// and columns past the head dim arrive as zeros.
///
/// # Safety
/// `maps` the device address of two valid tensor maps; `stage` 1024-byte aligned with room for
/// both tiles; `bar` an initialised barrier whose current phase expects no other bytes.
#[inline(always)]
#[cfg(target_feature = "sm_90a")]
unsafe fn tma_step<const PD: usize>(maps: u64, bar: u32, stage: u32, [row, h, b]: [i32; 3]) {
    let tile = (2 * BM * PD) as u32;
    // SAFETY: the caller's contract.
    unsafe {
        tma::arrive_expect_tx(bar, 2 * tile);
        for panel in 0..PD / 64 {
            let (dst, col) = (stage + (128 * BM * panel) as u32, (64 * panel) as i32);
            tma::load_4d(dst, maps, [col, row, h, b], bar);
            tma::load_4d(dst + tile, maps + TENSOR_MAP_BYTES, [col, row, h, b], bar);
        }
    }
}

/// The main kernel: block `x`'s `BN` keys of K/V head `y`, sequence `z`. Const parameters:
/// `D`/`PD` as [`bwd_prep`], `W` warps, `BN = 16·W` keys, `T = 32·W` threads; the warp grids
/// of the three products ([`BwdConfig`]): scores `S`, `dP` split `(W / WN1)` queries ×
/// `WN1` keys (`MT1` 16-row × `NT1` 8-column tiles a warp), `dV`/`dK` split `WK3` keys ×
/// `W / WK3` columns (`MT3` × `NT3` tiles), `dQ` split `WQ4` queries × `W / WQ4` columns
/// (`NT4` tiles).
///
/// Per step (one query tile of one query head), FlashAttention-2's order:
/// 1. `S = Q·Kᵀ` and `dP = dO·Vᵀ` with the queries as the A operand (the preprocessing kernel's
///    and the forward's operand order, so the scores are computed the same way), then P and dS
///    on the accumulators, stored to shared memory in the element type;
/// 2. `dV += Pᵀ·dO` and `dK += dSᵀ·Q` (A operands read transposed from the P and dS tiles),
///    accumulated in registers across all steps (sm_90a, d = 64/128: `wgmma` accumulators of
///    the warpgroup's 64 keys);
/// 3. `dQ += dS·K`, added to the f32 accumulator with `red.global.add` (sm_90a, one warpgroup
///    per 64 columns — d = 128 on 8 warps, d = 64 on 4: on `wgmma`, issued before 2.; in d =
///    128's plain instance, outside deterministic mode, by bulk reductions, `dq_staged`).
///
/// # Safety
/// As [`bwd_prep`], with the statistics written by it; launch with `T` threads and
/// [`BwdConfig::shared_bytes`] of dynamic shared memory.
#[inline(always)]
unsafe fn bwd_main<
    E: WgmmaElement,
    const D: usize,
    const PD: usize,
    const W: usize,
    const BN: usize,
    const T: usize,
    const WN1: usize,
    const MT1: usize,
    const NT1: usize,
    const WK3: usize,
    const MT3: usize,
    const NT3: usize,
    const WQ4: usize,
    const NT4: usize,
    const WIN: bool,
    const ALIBI: bool,
    const NOMOD: bool,
    const CG: usize,
    const TMA: bool,
    const TC: bool,
>(
    bp: &BwdParams,
) {
    // Column groups (`BwdConfig::col_groups`, CG): on `wgmma` the warpgroups of one key group
    // split the head dim's columns, their score products the same (on `mma.sync` the groups only
    // halve the keys a block).
    const {
        assert!(BN * CG == 16 * W && T == 32 * W && D % 16 == 0 && PD >= D && (CG == 1 || CG == 2));
        assert!(
            W % WN1 == 0
                && MT1 * 16 * (W / (if WGMMA { CG } else { 1 }) / WN1) == BM
                && NT1 * 8 * WN1 == BN
                && NT1 % 2 == 0
        );
        assert!(W % WK3 == 0 && MT3 * 16 * WK3 == BN && NT3 * 8 * (W / WK3) == D && NT3 % 2 == 0);
        assert!(W % WQ4 == 0 && 16 * WQ4 == BM && NT4 * 8 * (W / WQ4) == D && NT4 % 2 == 0);
        assert!(T % (PD / 8) == 0 && BM % (T / (PD / 8)) == 0 && BN % (T / (PD / 8)) == 0);
        // The P and dS tiles hold whole swizzle periods (8 chunks) a row.
        assert!(BN % 64 == 0);
        // On `wgmma`: warpgroup `w / 4` computes all BM = 64 queries × NT1·8 = 64 keys (warp w
        // rows 16·(w % 4)…), the preprocessing kernel's product (the warpgroups of a column
        // group the same keys); each warp's dV/dK and dQ columns on `mma.sync` stay inside one
        // 64-column panel of the Q, dO and K tiles.
        assert!(!WGMMA || (BM == 64 && MT1 == 1 && NT1 == 8 && WN1 * 4 * CG == W));
        assert!(
            !WGMMA
                || PD == 64
                || ((D % 64 == 0 || 64 % (8 * NT3) == 0)
                    && (crate::config::dq_on_wgmma(WGMMA, D as u32, W as u32) || 64 % (8 * NT4) == 0))
        );
        // `dQ += dS·K` on `wgmma` where each warpgroup owns whole 64-column panels of the head
        // dim (d = 128 and 256 on two warpgroups, d = 64 on one): warpgroup w / 4 computes all
        // 64 queries × the columns `64·P·(w / 4)…` (P = `dq_panels`), the `mma.sync` split's
        // tiles (query slab w % 4).
        assert!(
            !crate::config::dq_on_wgmma(WGMMA, D as u32, W as u32)
                || (WQ4 == 4 && NT4 == 8 * crate::config::dq_panels(D as u32, W as u32) as usize)
        );
    };
    let p = &bp.attn;
    let tid = thread_x();
    let (warp, lane) = (tid / 32, tid % 32);
    let (g, t4) = (lane / 4, lane % 4);
    // The block's (key tile, K/V head, sequence). The window instances run on the head-major grid
    // only (host: `backward_key_major`), their indices the special registers as before: read
    // through `key_block`'s selection, the d = 128 window instance's walk lost 1–3% (session 25,
    // NOTES b40).
    let block = || if WIN { (block_x(), block_y(), block_z()) } else { key_block(bp) };
    let (key_tile, kv_h, z) = block();
    let causal = p.causal != 0;
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(p, z) };
    let n0 = key_tile * BN as u32;
    if n0 >= seq.len_k {
        return;
    }
    // The block's first key, computed again where the walk and the epilogue use it (from the
    // special registers, not kept in a register through the walk: kept, the d = 128 window
    // instance spilled 8 bytes).
    let key_start = || block().0 * BN as u32;
    #[cfg(not(target_feature = "sm_90a"))]
    let chunks = PD as u32 / 8;
    // P and dS tiles: BM rows (queries) of BN keys.
    let pc = BN as u32 / 8;
    // sm_90a, d a multiple of 64: `dV += Pᵀ·dO` and `dK += dSᵀ·Q` on `wgmma` too (each
    // warpgroup its 64 keys × D), the P and dS tiles then laid out as 64-key panels
    // ([`panel_swizzle`], read by `wgmma` MN-major: `.trans` A). Otherwise (`mma.sync`, and d = 32
    // on sm_90a) the `[query][key]` tiles read transposed by `ldmatrix`.
    let kvw = WGMMA && D % 64 == 0;
    // sm_90a, one warpgroup per 64 columns of the head dim (d = 128 on 8 warps, d = 64 on 4):
    // `dQ += dS·K` on `wgmma` too (dS K-major from its 64-key panels, K MN-major from its
    // 64-column panels; warpgroup wg the columns `64·wg…`).
    let qw = crate::config::dq_on_wgmma(WGMMA, D as u32, W as u32);
    // (Its 64-column panels a warpgroup: one group each, one after the other.)
    let dq_panels: usize = const {
        if crate::config::dq_on_wgmma(WGMMA, D as u32, W as u32) {
            crate::config::dq_panels(D as u32, W as u32) as usize
        } else {
            1
        }
    };
    // On `wgmma`, warpgroups along the keys (of 64 each) and the columns: warpgroup wg is key
    // group `wg % key_groups`, column group `wg / key_groups` (its dV/dK columns
    // `(D / CG)·(wg / key_groups)…`).
    let key_groups: u32 = const { if W / 4 / CG > 1 { (W / 4 / CG) as u32 } else { 1 } };
    // Column groups split the P and dS stores: each stores its share of the keys.
    let split_store: bool = const { WGMMA && CG > 1 };
    // dQ added through per-warp staging rows by bulk reductions ([`stage_dq_rows`]), and the
    // query steps by counters instead of a division a step: where that measured faster (d =
    // 128's plain instance, `dq_staged`).
    // (The instance's `BwdConfig::window`: 0 plain, 1 window, 2 ALiBi, 3 window without score
    // modifiers (`NOMOD`, with `WIN`); never both `WIN` and `ALIBI`.)
    let window_kind = const { if WIN && NOMOD { 3 } else { WIN as u32 | 2 * ALIBI as u32 } };
    let staged = crate::config::dq_staged(WGMMA, D as u32, W as u32, window_kind);
    // Bytes of one 64-column panel of a BM-row tile (Q, dO, P, dS).
    let pb = 128 * BM as u32;
    // Shared memory: K, V; two stages of (Q, dO); the P and dS tiles; two stages of row
    // statistics.
    let tile_bytes = |rows: usize| 2 * (rows * PD) as u32;
    let layout = || {
        let k_tile = tiles_base();
        let v_tile = k_tile + tile_bytes(BN);
        let stages = v_tile + tile_bytes(BN);
        let p_tile = stages + 4 * tile_bytes(BM);
        let ds_tile = p_tile + 2 * (BN * BM) as u32;
        (k_tile, v_tile, stages, p_tile, ds_tile, ds_tile + 2 * (BN * BM) as u32)
    };
    let q_tile = |stages: u32, s: u32| stages + s * 2 * tile_bytes(BM);

    // The query tiles that see these keys, for every query head of the group, as one sequence of
    // steps: step `it` is head `kv_h·G + it / per_head`, tile `first + it % per_head`.
    let group = p.group.max(1);
    // (With a window, only the queries whose windows hold one of these keys.)
    // (`mask::window_block_tiles`: the walk the tile counters count, `BwdParams::dq_ready`.)
    let (first, per_head) = if WIN {
        let keys = (seq.len_k - n0).min(BN as u32);
        let (l, r) = (p.window_left, p.window_right);
        let (first, end) = mask::window_block_tiles(n0, keys, BM as u32, seq.len_q, seq.len_k, causal, l, r);
        (first, end - first)
    } else {
        let first = mask::first_query(n0, seq.len_q, seq.len_k, causal) / BM as u32;
        (first, seq.len_q.div_ceil(BM as u32).saturating_sub(first))
    };
    let steps = group * per_head;
    // Step `it`'s (head, query tile), and step `it + 1`'s from step `it`'s: with `staged`,
    // counters carried through the loop (no division a step); elsewhere the division, as
    // measured (with the counters' two registers the d = 128 window instance spilled 8 bytes).
    //
    // Each head's walk starts at its tile `first + rot` and wraps around. Without a causal mask
    // or a window every key block of a head walks the same query tiles, and the blocks resident
    // together are those of one or a few heads: from the same start they would add their dQ
    // shares to the same tile at the same time. So block x starts x tiles on (outside
    // deterministic mode, whose turns need every block in key order on each tile; the window
    // instances' walks start at their own diagonal anyway; the column-group instances have no
    // register for it: with it d = 256's spilled 8 bytes).
    let rotates = !WIN && CG == 1;
    let rot = if rotates && !causal && bp.locks == 0 { block().0 % per_head.max(1) } else { 0 };
    let step = |it: u32| {
        let t = it % per_head.max(1) + rot;
        let t = if rotates && t >= per_head { t - per_head } else { t };
        (kv_h * group + it / per_head.max(1), first + t)
    };
    let next = |(h, tile): (u32, u32)| {
        let t = if tile + 1 < first + per_head { tile + 1 } else { first };
        (if t == first + rot { h + 1 } else { h }, t)
    };
    // Issues the Q, dO and row-statistics copies of `(head, query tile)` into stage `s`: with
    // `tma_part` only the TMA copies (if the step takes them), else all the rest. (`at`: step
    // `it`'s counters, with `staged`.)
    let load_step = |it: u32, at: (u32, u32), s: u32, tma_part: bool| {
        let (h, tile) = if staged { at } else { step(it) };
        let m0 = tile * BM as u32;
        let (_, _, stages, _, _, rows) = layout();
        // On sm_90a with tensor maps (`BwdParams::maps`): Q and dO by TMA, issued by one thread
        // onto the stage's barrier ([`tma_step`]), except a variable-length sequence's last,
        // partial tile (its rows past the sequence would be the next sequence's: copied as
        // without maps, the barrier completed by one arrival).
        #[cfg(target_feature = "sm_90a")]
        let by_tma = TMA && bp.maps != 0 && !(p.cu_seqlens_q != 0 && m0 + BM as u32 > seq.len_q);
        #[cfg(not(target_feature = "sm_90a"))]
        let by_tma = false;
        if by_tma {
            #[cfg(target_feature = "sm_90a")]
            if tma_part && thread_x_opaque() == 0 {
                let at = [(seq.q_start + m0 as u64) as i32, h as i32, seq.batch as i32];
                // SAFETY: the maps are valid (host); each panel 1024-byte aligned inside the
                // stage; the barrier's phase expects exactly the two tiles' bytes.
                unsafe { tma_step::<PD>(bp.maps, stage_barrier(rows, s), q_tile(stages, s), at) };
            }
        } else if !tma_part {
            // SAFETY: tiles inside the dynamic shared memory; sources validated by the host.
            unsafe {
                load_tile_in::<BM, PD, T, PAD_CHUNKS, WGMMA>(
                    q_tile(stages, s),
                    HeadRows::queries(p, &seq, h),
                    m0,
                );
                load_tile_in::<BM, PD, T, PAD_CHUNKS, WGMMA>(
                    q_tile(stages, s) + tile_bytes(BM),
                    HeadRows::outputs(p, &seq, h),
                    m0,
                );
            }
            #[cfg(target_feature = "sm_90a")]
            if TMA && bp.maps != 0 && thread_x_opaque() == 0 {
                // SAFETY: the stage's barrier, initialised; its phase completes on this arrival.
                unsafe { tma::arrive(stage_barrier(rows, s)) };
            }
        }
        // The rows' statistics, 16 bytes each (zeros past the end: `1/Σ P = 0`, no
        // probabilities), in the same copy group.
        let tid = thread_x_opaque();
        if !tma_part && tid < BM as u32 {
            let row = m0 + tid;
            let inside = row < seq.len_q;
            let src = if inside { stat_addr(bp, seq.lse_index(p, h, row)) } else { bp.stats };
            // SAFETY: inside the statistics stage; 16 source bytes of row `row`'s statistics
            // (host sizing), or none.
            unsafe {
                cp_async::copy16(rows + s * 16 * BM as u32 + 16 * tid, src, if inside { 16 } else { 0 })
            };
        }
    };

    let (k_tile, v_tile, _, _, _, _rows) = layout();
    // The stages' barriers (TMA copies of Q and dO), after the statistics: initialised and
    // visible to every thread before the first copy.
    #[cfg(target_feature = "sm_90a")]
    if TMA && bp.maps != 0 {
        if tid == 0 {
            let bar = stage_barrier(_rows, 0);
            // SAFETY: 16 bytes of the dynamic shared memory reserved for them (host sizing),
            // 8-byte aligned; the maps are valid device addresses (host).
            unsafe {
                tma::init(bar, 1);
                tma::init(bar + 8, 1);
                tma::prefetch_map(bp.maps);
                tma::prefetch_map(bp.maps + TENSOR_MAP_BYTES);
            }
            tma::fence_init();
        }
        sync_threads();
    }
    // SAFETY: as above.
    unsafe {
        load_tile_in::<BN, PD, T, PAD_CHUNKS, WGMMA>(k_tile, HeadRows::keys(p, &seq, kv_h), n0);
        load_tile_in::<BN, PD, T, PAD_CHUNKS, WGMMA>(v_tile, HeadRows::values(p, &seq, kv_h), n0);
    }
    // Launched as a programmatic dependent of the preprocessing kernel (sm_90a): everything from
    // here reads what it wrote (the statistics, the zeroed accumulator, the turn counters) —
    // K and V, above, are inputs. And the conversion kernel after this one may be scheduled now.
    wait_for_previous_grid();
    let_dependent_grid_start();
    let mut at = (kv_h * group, first + rot);
    if steps > 0 {
        load_step(0, at, 0, true);
        load_step(0, at, 0, false);
    }
    cp_async::commit();

    // This warp's dK and dV tiles: keys `32·(warp % WK3)…`, columns `(D / (W / WK3))·(warp / WK3)…`.
    let mut dk = [[[0.0f32; 4]; NT3]; MT3];
    let mut dv = [[[0.0f32; 4]; NT3]; MT3];
    // With `kvw`: the warpgroup's dK and dV as `wgmma` accumulators (keys `64·(warp / 4)…`, warp
    // w's rows `16·(w % 4)…`), one 64 × 64 block per 64-column panel of the head dim (`D / 64`
    // of the two used).
    #[cfg_attr(not(target_feature = "sm_90a"), allow(unused_mut))]
    let mut dkw = [[0.0f32; 32]; 2];
    #[cfg_attr(not(target_feature = "sm_90a"), allow(unused_mut))]
    let mut dvw = [[0.0f32; 32]; 2];
    for it in 0..steps {
        let s = it % 2;
        let (h, tile) = if staged { at } else { step(it) };
        let m0 = tile * BM as u32;
        cp_async::wait::<0>();
        // The stage's TMA copies (or the one arrival of a step copied by `cp.async`): the `it /
        // 2`-th phase of its barrier.
        #[cfg(target_feature = "sm_90a")]
        if TMA && bp.maps != 0 {
            let (_, _, _, _, _, rows) = layout();
            // SAFETY: the barrier initialised above; one phase per use of the stage.
            unsafe { tma::wait(stage_barrier(rows, s), (it / 2) % 2) };
        }
        if WGMMA {
            // The copies visible to `wgmma` too (read through the async proxy).
            wgmma::fence_proxy_async_shared();
        }
        // Step `it` visible; every warp is done with step it−1 (its P, dS and the other stage).
        sync_threads();
        // The next step's copies into the other stage: on `wgmma` issued under this step's S
        // and dP products (with their address arithmetic about a fifth of a step's
        // instructions, NOTES.md), before them on `mma.sync`.
        // (TMA copies are issued first, by one thread: a few instructions, while fewer
        // registers are live than under the products.)
        if it + 1 < steps {
            load_step(it + 1, if staged { next(at) } else { at }, 1 - s, true);
        }
        #[cfg(target_feature = "sm_90a")]
        let prefetch = || {
            if it + 1 < steps {
                load_step(it + 1, if staged { next(at) } else { at }, 1 - s, false);
            }
            cp_async::commit();
        };
        #[cfg(not(target_feature = "sm_90a"))]
        {
            if it + 1 < steps {
                load_step(it + 1, if staged { next(at) } else { at }, 1 - s, false);
            }
            cp_async::commit();
        }
        let (k_tile, v_tile, stages, p_tile, ds_tile, rows) = layout();
        let (qt, dot) = (q_tile(stages, s), q_tile(stages, s) + tile_bytes(BM));
        let tid_o = thread_x_opaque();
        let (lane_o, warp_o) = (tid_o % 32, tid_o / 32);

        // 1. S and dP: this warp's MT1·16 queries × NT1·8 keys.
        {
            // (On `wgmma` the warpgroups split the keys, and the warps of one the queries.)
            let (wm, mut wn) =
                if WGMMA { (warp_o % 4, warp_o / 4) } else { (warp_o / WN1 as u32, warp_o % WN1 as u32) };
            if split_store {
                // (Column groups: the warpgroup's key group.)
                wn %= key_groups;
            }
            let (q0, k0) = (wm * (16 * MT1) as u32, wn * (8 * NT1) as u32);
            let mut sc = [[[0.0f32; 4]; NT1]; MT1];
            let mut dp = [[[0.0f32; 4]; NT1]; MT1];
            #[cfg(target_feature = "sm_90a")]
            {
                // The warpgroup's 64 queries × 64 keys `k0..` (rows of the K and V tiles, 128
                // bytes a row in each panel).
                let (sc0, dp0) =
                    (sc.as_mut_ptr().cast::<[[f32; 4]; 8]>(), dp.as_mut_ptr().cast::<[[f32; 4]; 8]>());
                // SAFETY: `MT1 == 1 && NT1 == 8` (asserted above), so each cast names the whole
                // array; the tiles are loaded, fenced and behind the barrier, 1024-byte aligned.
                unsafe {
                    scores_wgmma::<E, D, BM, BN>(
                        &mut *sc0,
                        &mut *dp0,
                        (qt, dot),
                        (k_tile + 128 * k0, v_tile + 128 * k0),
                        prefetch,
                    )
                };
            }
            #[cfg(not(target_feature = "sm_90a"))]
            {
                let ar = a_rows(lane_o, q0, chunks);
                let br = FragRows::new(k0 + (lane_o % 8) + 8 * (lane_o / 16), (lane_o / 8) % 2, chunks);
                // S first, then dP (one A operand's fragments live at a time: fewer registers
                // beside dK and dV; each loop still has MT1·NT1 independent accumulator chains).
                // SAFETY: inside the Q, K, dO and V tiles.
                unsafe {
                    tile_product::<E, D, MT1, NT1>(&mut sc, (qt, &ar), (k_tile, &br), chunks);
                    tile_product::<E, D, MT1, NT1>(&mut dp, (dot, &ar), (v_tile, &br), chunks);
                }
            }
            // P (normalised; 0 where masked) and dS, stored as the element type.
            let scale_log2 = p.scale_log2;
            // Score modifiers (masked instances; one kind per problem, chosen here once).
            // (The ALiBi instance: the plain instance's walk and dQ adds, ALiBi on every score.)
            let kind = if WIN && !NOMOD {
                mod_kind(p)
            } else if ALIBI {
                MOD_ALIBI
            } else {
                MOD_NONE
            };
            // SAFETY: the host sizes the slopes (read only with modifiers).
            let hm = if kind != MOD_NONE { unsafe { HeadMod::of(p, &seq, h) } } else { HeadMod::NONE };
            for mt in 0..MT1 {
                for half in 0..2 {
                    let qr = q0 + 16 * mt as u32 + g + 8 * half as u32;
                    // SAFETY: inside the statistics stage, 16-byte aligned.
                    let [offset, inv, pivot, d_rel] =
                        unsafe { shared::load_f32x4(rows + s * 16 * BM as u32 + 16 * qr) };
                    let (begin, limit) = if WIN {
                        (
                            mask::row_key_begin(m0 + qr, seq.len_q, seq.len_k, p.window_left),
                            mask::row_key_end(m0 + qr, seq.len_q, seq.len_k, causal, p.window_right),
                        )
                    } else {
                        (0, mask::key_end(m0 + qr + 1, seq.len_q, seq.len_k, causal))
                    };
                    // (The ALiBi instance forms each score's whole exponent, [`alibi_exponents`]:
                    // the probabilities then take it as it is — `2^(x·1 + (−0))`, which LLVM
                    // folds to `2^x`.)
                    let mut row = RowCtx {
                        stats: [if ALIBI { -0.0 } else { offset }, inv, pivot, d_rel],
                        begin,
                        limit,
                        key0: key_start() + k0 + 2 * t4,
                        scale_log2: if ALIBI { 1.0 } else { scale_log2 },
                    };
                    let store = |nt: usize, pr: [f32; 2], ds: [f32; 2]| {
                        let chunk = k0 / 8 + nt as u32;
                        let at =
                            if kvw { panel_swizzle(qr, chunk, BM as u32) } else { swizzle(qr, chunk, pc) }
                                + 4 * t4;
                        // SAFETY: row qr < BM, chunk < BN/8 of the P and dS tiles.
                        unsafe {
                            shared::store_u32(p_tile + at, E::pack(pr[0], pr[1]));
                            shared::store_u32(ds_tile + at, E::pack(ds[0], ds[1]));
                        }
                    };
                    let pos = hm.position(m0 + qr);
                    if split_store {
                        // Column groups: each warpgroup computes and stores P and dS of its half of
                        // the keys (tiles 4·group…; both hold all 8 tiles of S and dP).
                        const { assert!(!WGMMA || CG == 1 || (CG == 2 && NT1 == 8)) };
                        // (Not with a window: the d = 256 window instance spilled with both
                        // variants.)
                        let whole = !WIN && shuffle::all(row.sees(key_start() + k0, 8 * NT1 as u32));
                        let upper = warp_o / 4 / key_groups != 0;
                        let (s8, d8) = (sc[mt].as_mut_ptr(), dp[mt].as_mut_ptr());
                        if upper {
                            row.key0 += 32;
                            // SAFETY: NT1 == 8 (asserted): tiles 4..8 of the row's accumulators.
                            let (s4, d4) = unsafe {
                                (
                                    &mut *s8.add(4).cast::<[[f32; 4]; 4]>(),
                                    &mut *d8.add(4).cast::<[[f32; 4]; 4]>(),
                                )
                            };
                            row_probs(&hm, kind, &mut row, (s4, d4), (half, pos, whole), |nt, pr, ds| {
                                store(nt + 4, pr, ds)
                            });
                        } else {
                            // SAFETY: as above, tiles 0..4.
                            let (s4, d4) = unsafe {
                                (&mut *s8.cast::<[[f32; 4]; 4]>(), &mut *d8.cast::<[[f32; 4]; 4]>())
                            };
                            row_probs(&hm, kind, &mut row, (s4, d4), (half, pos, whole), store);
                        }
                        continue;
                    }
                    // Score modifiers first, in place (a pass of their own, so that their
                    // temporaries and the probabilities' are not live at once).
                    let (scm, dpm) = (&mut sc[mt], &mut dp[mt]);
                    if ALIBI {
                        // (One branch a row: each variant's loop straight-line.)
                        let at = (pos, row.key0, scale_log2, offset);
                        if causal {
                            alibi_exponents::<NT1, true>(&hm, scm, half, at);
                        } else {
                            alibi_exponents::<NT1, false>(&hm, scm, half, at);
                        }
                    } else {
                        match kind {
                            MOD_NONE => {}
                            MOD_ALIBI => modify_row::<MOD_ALIBI, NT1>(&hm, &mut row, scm, dpm, half, pos),
                            _ => modify_row::<MOD_SOFTCAP, NT1>(&hm, &mut row, scm, dpm, half, pos),
                        }
                    }
                    // Rows that see all of the warp's keys (all but the key blocks on the
                    // diagonal, at the end of the keys or at a window's edges) skip the per-key
                    // mask.
                    let whole = shuffle::all(row.sees(key_start() + k0, 8 * NT1 as u32));
                    if whole {
                        probs_and_ds::<false, NT1>(&row, scm, dpm, half, store);
                    } else {
                        probs_and_ds::<true, NT1>(&row, scm, dpm, half, store);
                    }
                }
            }
        }
        if kvw {
            // The stores visible to `wgmma` (the async proxy) too.
            wgmma::fence_proxy_async_shared();
        }
        sync_threads(); // P and dS visible to every warp

        // (With `qw`: 3.'s product `dQ = dS·K` issued first, as its own `wgmma` group,
        // so that its adds can start while dV and dK are still computed.)
        #[cfg_attr(not(target_feature = "sm_90a"), allow(unused_mut, unused_variables))]
        let mut qf = [0.0f32; 32];
        if qw {
            // (Warpgroup wg's first panel of the K tile: `dq_panels·wg`.)
            #[cfg(target_feature = "sm_90a")]
            // SAFETY: the stored (fenced, behind the barrier) dS tile and the loaded K tile.
            unsafe {
                dq_wgmma::<E, BN>(&mut qf, ds_tile, k_tile, dq_panels as u32 * (warp_o / 4))
            };
        }

        // 2. dV += Pᵀ·dO and dK += dSᵀ·Q: the queries are the reduction; Pᵀ and dSᵀ are A
        //    operands read transposed from the [query][key] tiles.
        if kvw {
            // sm_90a: warpgroup wg's 64 keys × D, `k` = the 64 queries in 4 steps of 16: Pᵀ and
            // dSᵀ from the warpgroup's 64-key panel of the P and dS tiles (MN-major A), dO and Q
            // from their 64-column panels (MN-major B, as V in the forward's P·V). Descriptors:
            // leading = the panel stride, stride = 8 rows (1024 bytes); a step of 16 queries is
            // 2048 bytes into a panel.
            #[cfg(target_feature = "sm_90a")]
            {
                use wgmma::{SWIZZLE_ATOM_BYTES, descriptor};
                let wg = warp_o / 4;
                // (Key group and first column panel: with column groups, `(D / 64 / CG)·wg`.)
                let (kg, cp0) = if CG == 1 {
                    (wg, 0)
                } else {
                    (wg % key_groups, (D / 64 / CG) as u32 * (wg / key_groups))
                };
                let desc = |addr: u32| descriptor(addr, pb, SWIZZLE_ATOM_BYTES);
                wgmma::fence();
                for kk in 0..BM / 16 {
                    let k_off = (kk * 16 * 128) as u32;
                    let (pd, sd) = (desc(p_tile + kg * pb + k_off), desc(ds_tile + kg * pb + k_off));
                    for pn in 0..D / 64 / CG {
                        let b_off = (cp0 + pn as u32) * pb + k_off;
                        // SAFETY: descriptors of the stored (fenced, behind the barrier) P and dS
                        // panels and the loaded dO and Q panels, 1024-byte aligned; the whole
                        // warpgroup issues them.
                        unsafe {
                            E::ss_tt_n64(&mut dvw[pn], pd, desc(dot + b_off));
                            E::ss_tt_n64(&mut dkw[pn], sd, desc(qt + b_off));
                        }
                    }
                }
                // (Waited for at the end of the step: the dQ product and adds run meanwhile.)
                wgmma::commit();
            }
        } else {
            let (wk, wd) = (warp_o % WK3 as u32, warp_o / WK3 as u32);
            let (k0, c0) = (wk * (16 * MT3) as u32, wd * (8 * NT3) as u32);
            let pr = FragRows::new((lane_o % 8) + 8 * (lane_o / 16), k0 / 8 + (lane_o / 8) % 2, pc);
            let (tr, t_off, tch) = col_rows::<BM, PD>((lane_o % 8) + 8 * ((lane_o / 8) % 2), c0, lane_o);
            let (dot, qt) = (dot + t_off, qt + t_off);
            for ks in 0..BM / 16 {
                let mut ap = [[0u32; 4]; MT3];
                let mut ads = [[0u32; 4]; MT3];
                for mt in 0..MT3 {
                    // SAFETY: inside the P and dS tiles.
                    unsafe {
                        ap[mt] = ldmatrix::x4_trans(pr.at(p_tile, ks, mt, pc));
                        ads[mt] = ldmatrix::x4_trans(pr.at(ds_tile, ks, mt, pc));
                    }
                }
                for np in 0..NT3 / 2 {
                    // SAFETY: inside the dO tile.
                    let bo = unsafe { ldmatrix::x4_trans(tr.at(dot, ks, np, tch)) };
                    for mt in 0..MT3 {
                        E::mma(&mut dv[mt][2 * np], &ap[mt], bo[0], bo[1]);
                        E::mma(&mut dv[mt][2 * np + 1], &ap[mt], bo[2], bo[3]);
                    }
                    // SAFETY: inside the Q tile.
                    let bq = unsafe { ldmatrix::x4_trans(tr.at(qt, ks, np, tch)) };
                    for mt in 0..MT3 {
                        E::mma(&mut dk[mt][2 * np], &ads[mt], bq[0], bq[1]);
                        E::mma(&mut dk[mt][2 * np + 1], &ads[mt], bq[2], bq[3]);
                    }
                }
            }
        }

        // 3. dQ (BM × D) += dS·K: warp w takes query slab w % WQ4, column group w / WQ4.
        let (qs, cg) = (warp_o % WQ4 as u32, warp_o / WQ4 as u32);
        let c0 = cg * (8 * NT4) as u32;
        let dsr = a_rows(lane_o, 16 * qs, if kvw { 8 } else { pc });
        let (kr, k_off, kch) = col_rows::<BN, PD>((lane_o % 8) + 8 * ((lane_o / 8) % 2), c0, lane_o);
        let mut acc = [[0.0f32; 4]; NT4];
        if qw {
            // The dQ group is done (the dV/dK group, issued after it, may still run).
            #[cfg(target_feature = "sm_90a")]
            {
                wgmma::wait::<1>();
                wgmma::settle(&mut qf);
                for (nt, a) in acc.iter_mut().enumerate().take(8) {
                    *a = [qf[4 * nt], qf[4 * nt + 1], qf[4 * nt + 2], qf[4 * nt + 3]];
                }
            }
        } else {
            for ks in 0..BN / 16 {
                // SAFETY: inside the dS tile (with `kvw`, 64-key panels of 8 chunks a row).
                let a = unsafe {
                    if kvw {
                        ldmatrix::x4(dsr.at(ds_tile + (ks / 4) as u32 * pb, 0, ks % 4, 8))
                    } else {
                        ldmatrix::x4(dsr.at(ds_tile, 0, ks, pc))
                    }
                };
                for np in 0..NT4 / 2 {
                    // SAFETY: inside the K tile.
                    let bk = unsafe { ldmatrix::x4_trans(kr.at(k_tile + k_off, ks, np, kch)) };
                    E::mma(&mut acc[2 * np], &a, bk[0], bk[1]);
                    E::mma(&mut acc[2 * np + 1], &a, bk[2], bk[3]);
                }
            }
        }
        // (Both branches skip the column tiles at or past the head dim: padded instances, d a
        // multiple of 8. Each computes its own `d` and tile count: hoisted above the branch, the
        // non-staged instances' code changed, which the measurements did not cover.)
        if staged && bp.locks == 0 {
            // The warp's 16 rows through its staging rows, one bulk reduction a row.
            #[cfg(target_feature = "sm_90a")]
            {
                let d = p.head_dim;
                let tiles_inside = d.saturating_sub(c0) / 8;
                let (_, _, _, _, _, rows) = layout();
                let stage = stage_barrier(rows, 0)
                    + if TMA { BWD_STAGE_BARRIER_BYTES } else { 0 }
                    + warp_o * (16 * 4 * BWD_DQ_STAGE_PITCH);
                let row = m0 + 16 * qs + lane_o;
                let dst = (lane_o < 16 && row < seq.len_q)
                    .then(|| bp.dq_acc + 4 * (seq.lse_index(p, h, row) * d as u64 + c0 as u64));
                // SAFETY: the warp's staging rows (host sizing: `BwdConfig::shared_bytes`);
                // `dst` is column c0 of a row < len_q of the accumulator, 16-byte aligned (d
                // and c0 multiples of 8), with the columns staged there inside the row.
                unsafe { stage_dq_rows(&acc, stage, tiles_inside, lane_o, dst) };
            }
        } else {
            // Deterministic mode: wait for this key tile's turn at the query tile (key tiles
            // 0, 1, … add in that order: the tiles that see a query tile are always a prefix).
            let lock = bp.locks + 4 * lock_index(bp, z, h, m0 / BM as u32);
            if bp.locks != 0 {
                if thread_x() == 0 {
                    // SAFETY: the counter of this query tile (host sizing).
                    while unsafe { global::load_acquire_u32(lock) } != block().0 {}
                }
                sync_threads();
            }
            // The adds into the f32 accumulator: on sm_90 four columns at once (see
            // `add_tiles`), before two at a time.
            let d = p.head_dim;
            let row_base = |half: u32, col: u32| -> Option<u64> {
                let row = m0 + 16 * qs + g + 8 * half;
                (row < seq.len_q).then(|| bp.dq_acc + 4 * (seq.lse_index(p, h, row) * d as u64 + col as u64))
            };
            if dq_panels == 1 {
                let tiles_inside = d.saturating_sub(c0) / 8;
                // SAFETY: the bases address columns `c0 + 8·nt + …` < d of rows < len_q of the
                // accumulator (host sizing), aligned as `add_tiles` needs.
                unsafe {
                    add_tiles::<NT4, NT4>(&acc, tiles_inside, t4, |half, col| row_base(half, c0 + col))
                };
            } else {
                // The warpgroup's panels one after the other (d = 256): panel qp's group issued
                // once the previous panel's results are read (the dV/dK group, issued before
                // it, waited for with it), its 8 tiles in `acc`'s first.
                for qp in 0..dq_panels {
                    #[cfg(target_feature = "sm_90a")]
                    if qp > 0 {
                        // SAFETY: as the first panel's.
                        unsafe {
                            dq_wgmma::<E, BN>(
                                &mut qf,
                                ds_tile,
                                k_tile,
                                dq_panels as u32 * (warp_o / 4) + qp as u32,
                            )
                        };
                        wgmma::wait::<0>();
                        wgmma::settle(&mut qf);
                        for (nt, a) in acc.iter_mut().enumerate().take(8) {
                            *a = [qf[4 * nt], qf[4 * nt + 1], qf[4 * nt + 2], qf[4 * nt + 3]];
                        }
                    }
                    let c = c0 + 64 * qp as u32;
                    let tiles_inside = (d.saturating_sub(c) / 8).min(8);
                    // SAFETY: as above, columns `c + 8·nt + …` < d.
                    unsafe {
                        add_tiles::<NT4, 8>(&acc, tiles_inside, t4, |half, col| row_base(half, c + col))
                    };
                }
            }
            if bp.locks != 0 {
                // Every thread's adds are done (the barrier), then the next key tile's turn.
                sync_threads();
                if thread_x() == 0 {
                    // SAFETY: as above.
                    unsafe { global::store_release_u32(lock, block().0 + 1) };
                }
            }
        }
        if kvw {
            // dV and dK of this step done before the next step's barrier (after which P and dS
            // are overwritten).
            #[cfg(target_feature = "sm_90a")]
            {
                wgmma::wait::<0>();
                for pn in 0..D / 64 / CG {
                    wgmma::settle(&mut dvw[pn]);
                    wgmma::settle(&mut dkw[pn]);
                }
            }
        }
        if staged {
            at = next(at);
        }
    }
    cp_async::wait::<0>();
    if staged {
        // The last dQ reductions done before the block's shared memory goes.
        #[cfg(target_feature = "sm_90a")]
        tma::bulk_wait::<0>();
    }
    // Window walks on sm_90a (`BwdParams::dq_ready`, `BwdConfig::tile_counters`): every warp's
    // dQ adds issued (the barrier), one fence makes warp 0's decrements releases of them, one
    // per (head, query tile) of the walk; a tile's last visitor lets the conversion kernel
    // convert it.
    #[cfg(target_feature = "sm_90a")]
    if TC && bp.dq_ready != 0 {
        sync_threads();
        let lane = thread_x_opaque();
        if lane < 32 {
            global::fence_acq_rel_gpu();
            // The walk's tiles computed again from the block's indices (nothing kept live from
            // the loop: with `step` here the d = 128 window instance spilled 8 bytes).
            let (key_tile, kv_h, z) = block();
            // SAFETY: as at the start.
            let seq = unsafe { SeqView::of(p, z) };
            let n0 = key_tile * BN as u32;
            let keys = (seq.len_k - n0).min(BN as u32);
            let (l, r) = (p.window_left, p.window_right);
            let (first, end) =
                mask::window_block_tiles(n0, keys, BM as u32, seq.len_q, seq.len_k, p.causal != 0, l, r);
            let per_head = (end - first).max(1);
            let steps = p.group.max(1) * (end - first);
            let mut it = lane;
            while it < steps {
                let (h, tile) = (kv_h * p.group.max(1) + it / per_head, first + it % per_head);
                // SAFETY: the counter of a query tile of this sequence (host sizing); every
                // visitor decrements it once, from the count the preprocessing kernel set.
                unsafe {
                    global::red_release_add_u32(bp.dq_ready + 4 * lock_index(bp, z, h, tile), u32::MAX)
                };
                it += 32;
            }
        }
    }

    // dK (scaled) and dV of this warp's keys and columns; keys past the end and columns past
    // the head dim are not written.
    let d = p.head_dim;
    if kvw {
        // The `wgmma` accumulators: warpgroup `warp / 4`'s keys, warp rows `16·(warp % 4)…`;
        // register `4j + e` of panel pn: row g + 8·(e / 2), column 64·pn + 8j + 2·t4 + e % 2.
        // (With column groups: key group `(warp / 4) % key_groups`, columns from panel `cp0`.)
        let wg = warp / 4;
        let (kg, cp0) =
            if CG == 1 { (wg, 0) } else { (wg % key_groups, (D / 64 / CG) as u32 * (wg / key_groups)) };
        let k0 = key_start() + 64 * kg + 16 * (warp % 4);
        // The sequence's view read again (not kept in registers through the loop: the d = 128
        // window instance spilled 8 bytes holding it).
        let (_, kv_h, z) = block();
        // SAFETY: as at the start.
        let seq = unsafe { SeqView::of(p, z) };
        for half in 0..2 {
            let key = k0 + g + 8 * half as u32;
            if key < seq.len_k {
                let ko = seq.offset(&bp.dk_strides, seq.k_start, key, kv_h);
                let vo = seq.offset(&bp.dv_strides, seq.k_start, key, kv_h);
                for pn in 0..D / 64 / CG {
                    for j in 0..8 {
                        let col = (64 * (cp0 as usize + pn) + 8 * j) as u64 + 2 * t4 as u64;
                        if col < d as u64 {
                            let r = 4 * j + 2 * half;
                            let (kt, vt) = (&dkw[pn], &dvw[pn]);
                            let pk = E::pack(kt[r] * bp.scale, kt[r + 1] * bp.scale);
                            let pv = E::pack(vt[r], vt[r + 1]);
                            // SAFETY: columns col, col+1 < d of the key's rows (host
                            // validation), 4-byte aligned.
                            unsafe {
                                global::store_u32(bp.dk + 2 * (ko + col), pk);
                                global::store_u32(bp.dv + 2 * (vo + col), pv);
                            }
                        }
                    }
                }
            }
        }
        return;
    }
    let (wk, wd) = (warp % WK3 as u32, warp / WK3 as u32);
    let (k0, c0) = (key_start() + wk * (16 * MT3) as u32, wd * (8 * NT3) as u32);
    for mt in 0..MT3 {
        for half in 0..2 {
            let key = k0 + 16 * mt as u32 + g + 8 * half as u32;
            if key < seq.len_k {
                let ko = seq.offset(&bp.dk_strides, seq.k_start, key, kv_h);
                let vo = seq.offset(&bp.dv_strides, seq.k_start, key, kv_h);
                for nt in 0..NT3 {
                    let col = (c0 + 8 * nt as u32 + 2 * t4) as u64;
                    if col < d as u64 {
                        let (kt, vt) = (&dk[mt][nt], &dv[mt][nt]);
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
}

/// Adds one warp's dQ tiles (`acc[nt]`: rows g and g+8, columns `8·nt + 2·t4` and the next;
/// `tiles` of them at most) to the f32 accumulator through the warp's staging rows at `stage`
/// (16 rows of [`BWD_DQ_STAGE_PITCH`] f32): the lanes store their pairs, then lane r < 16 adds
/// row r to `dst` (`None`: a row past the sequence) with one bulk reduction
/// ([`tma::bulk_reduce_add_f32`]), so that the copy engine does the adds the lanes' vector
/// `red`s and the pair exchange of [`add_tiles`] did. Before the stores, the warp waits for
/// its previous reductions to have read the rows.
///
/// # Safety
/// `stage` 16-byte aligned, the warp's own 16 staging rows; each `dst` valid for `8·tiles`
/// f32 (at most `8·NT`), 16-byte aligned.
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
unsafe fn stage_dq_rows<const NT: usize>(
    acc: &[[f32; 4]; NT],
    stage: u32,
    tiles: u32,
    lane: u32,
    dst: Option<u64>,
) {
    let (g, t4) = (lane / 4, lane % 4);
    tma::bulk_wait_read::<0>();
    shuffle::sync_warp();
    for (nt, a) in acc.iter().enumerate() {
        if (nt as u32) < tiles {
            for half in 0..2u32 {
                let at = stage + 4 * ((g + 8 * half) * BWD_DQ_STAGE_PITCH + 8 * nt as u32 + 2 * t4);
                let h = 2 * half as usize;
                // SAFETY: row g + 8·half < 16, columns < 8·NT ≤ 64 of the staging rows.
                unsafe { shared::store_f32x2(at, [a[h], a[h + 1]]) };
            }
        }
    }
    // The stores visible to the copy engine (the async proxy), then to the issuing lanes.
    wgmma::fence_proxy_async_shared();
    shuffle::sync_warp();
    let bytes = 32 * tiles.min(NT as u32);
    if let Some(dst) = dst
        && bytes > 0
    {
        // SAFETY: the caller's contract; row `lane` of the staging rows, stored and fenced.
        unsafe { tma::bulk_reduce_add_f32(dst, stage + 4 * lane * BWD_DQ_STAGE_PITCH, bytes) };
    }
    tma::bulk_commit();
}

/// Adds one warp's dQ tiles (`acc[nt]`: rows g and g+8, columns `8·nt + 2·t4` and the next) to
/// the f32 accumulator, tiles `nt < tiles` only. `base(half, col)` is the address of column `col`
/// (relative to the warp's first) of the lane's row `g + 8·half`, `None` past the sequence.
///
/// sm_90: lanes `t4` and `t4 ^ 1` swap one row's pair with a shuffle, so that the even lane holds
/// four consecutive columns of row g and the odd lane four of row g+8: one
/// `red.global.add.v4.f32` per tile and lane. Before sm_90: two scalar adds per pair.
///
/// # Safety
/// Every address `base` returns must be valid for the columns added there, 16-byte aligned for
/// even multiples of 4 columns (sm_90) — the accumulator's rows and `col` multiples of 8 floats
/// are.
#[inline(always)]
unsafe fn add_tiles<const NT: usize, const USED: usize>(
    acc: &[[f32; 4]; NT],
    tiles: u32,
    t4: u32,
    base: impl Fn(u32, u32) -> Option<u64>,
) {
    #[cfg(target_feature = "sm_90a")]
    {
        let odd = t4 % 2;
        // The even lane's four columns start at its own pair, the odd lane's at its partner's.
        let at = base(odd, 2 * (t4 - odd));
        for (nt, a) in acc.iter().enumerate().take(USED) {
            // Every lane takes part in the exchange (outside any lane-dependent branch): the even
            // lane sends its row g+8 pair and receives its partner's row g pair, the odd lane the
            // reverse.
            let send = if odd == 0 { [a[2], a[3]] } else { [a[0], a[1]] };
            let got = [shuffle::xor(send[0], 1), shuffle::xor(send[1], 1)];
            let v = if odd == 0 { [a[0], a[1], got[0], got[1]] } else { [got[0], got[1], a[2], a[3]] };
            if let Some(at) = at
                && (nt as u32) < tiles
            {
                // SAFETY: forwarded contract (four columns, 16-byte aligned).
                unsafe { global::red_add_f32x4(at + 32 * nt as u64, v) };
            }
        }
    }
    #[cfg(not(target_feature = "sm_90a"))]
    for half in 0..2u32 {
        if let Some(at) = base(half, 2 * t4) {
            for (nt, a) in acc.iter().enumerate().take(USED) {
                if (nt as u32) < tiles {
                    let h = 2 * half as usize;
                    // SAFETY: forwarded contract.
                    unsafe {
                        global::red_add_f32(at + 32 * nt as u64, a[h]);
                        global::red_add_f32(at + 32 * nt as u64 + 4, a[h + 1]);
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
    // (Two bodies, so that the grid-wide one is the conversion as before, instruction for
    // instruction.)
    if WGMMA && bp.dq_ready != 0 {
        // SAFETY: forwarded contract.
        unsafe { bwd_dq_body::<E, true>(bp) }
    } else {
        // SAFETY: forwarded contract.
        unsafe { bwd_dq_body::<E, false>(bp) }
    }
}

/// [`bwd_dq`]'s body: after the main kernel's whole grid, or (`PER_TILE`) after this block's
/// query tile's own key blocks (`BwdParams::dq_ready`).
///
/// # Safety
/// As [`bwd_dq`].
#[inline(always)]
unsafe fn bwd_dq_body<E: MmaElement, const PER_TILE: bool>(bp: &BwdParams) {
    // A programmatic dependent of the main kernel (sm_90a): the accumulator complete first —
    // the whole grid, or with the window walks' tile counters this block's query tile.
    if !PER_TILE {
        wait_for_previous_grid();
    }
    let p = &bp.attn;
    let (h, z) = (block_y(), block_z());
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(p, z) };
    let m0 = block_x() * BM as u32;
    if PER_TILE {
        // The grid completes after the main kernel's (its blocks' dK and dV stores follow their
        // decrements): block (0, 0, 0) waits for that grid at the end, so that whatever the
        // stream runs next sees both.
        if m0 >= seq.len_q {
            if block_x() == 0 && h == 0 && z == 0 {
                wait_for_previous_grid();
            }
            return;
        }
        if thread_x() == 0 {
            // SAFETY: this tile's counter (host sizing), set by the preprocessing kernel.
            unsafe { wait_for_tile(bp.dq_ready + 4 * lock_index(bp, z, h, block_x())) };
        }
        sync_threads();
    } else if m0 >= seq.len_q {
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
        // SAFETY: 8 floats of the row's accumulator, 16-byte aligned (host sizing). (Per tile,
        // from the L2: the main kernel's grid is still running.)
        let (a, b) = unsafe {
            if PER_TILE {
                (global::load_f32x4_l2(src), global::load_f32x4_l2(src + 16))
            } else {
                (global::load_f32x4(src), global::load_f32x4(src + 16))
            }
        };
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
    if PER_TILE && block_x() == 0 && h == 0 && z == 0 {
        wait_for_previous_grid();
    }
}

/// Waits until the tile counter at `addr` reads 0 (acquire: the adds its visitors released are
/// then visible to this thread, and after a barrier to its block). Bounded: after
/// [`TILE_WAIT_NS`] it waits for the main kernel's whole grid instead, which is always correct
/// (the counts are a shortcut, unit-tested against the walk), so that a count that never
/// reached 0 would cost time, never a hang.
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned global address of a counter other threads only
/// change atomically.
#[inline(always)]
unsafe fn wait_for_tile(addr: u64) {
    let start = global_timer_ns();
    // SAFETY: caller's contract.
    while unsafe { global::load_acquire_u32(addr) } != 0 {
        if global_timer_ns().wrapping_sub(start) > TILE_WAIT_NS {
            wait_for_previous_grid();
            return;
        }
        nanosleep(256);
    }
}

/// How long [`wait_for_tile`] polls before it waits for the main kernel's grid: longer than a
/// window block's walk at the sizes measured (~0.1 ms).
const TILE_WAIT_NS: u64 = 2_000_000;

/// The entry points of one [`crate::for_each_bwd_instance!`] group and element type.
macro_rules! bwd_entries {
    (() $(($d:tt, $w:literal, $b:literal, $win:tt))*) => {
        $( bwd_entries!(@one F16, "f16", $d, $w, $b, $win);
           bwd_entries!(@one Bf16, "bf16", $d, $w, $b, $win); )*
    };
    // The column-group instance (d = 256) is sm_90a's only: its 211 KiB of shared memory fit no
    // GPU that runs the sm_80 PTX (the registry's `targets` say so).
    (@one $elem:ty, $dt:literal, 256, $w:literal, $b:literal, $win:tt) => {
        bwd_entries!(@body [cfg(target_feature = "sm_90a")] $elem, $dt, 256, $w, $b, $win);
    };
    // The ALiBi instances (window kind 2) are sm_90a's only: they exist for the staged dQ adds,
    // which need `wgmma` (`dq_staged`).
    (@one $elem:ty, $dt:literal, $d:literal, $w:literal, $b:literal, 2) => {
        bwd_entries!(@body [cfg(target_feature = "sm_90a")] $elem, $dt, $d, $w, $b, 2);
    };
    // The window-only instances (window kind 3) likewise: the window instance without its
    // modifier code, which `Auto` takes on sm_90a only (where it was measured).
    (@one $elem:ty, $dt:literal, $d:literal, $w:literal, $b:literal, 3) => {
        bwd_entries!(@body [cfg(target_feature = "sm_90a")] $elem, $dt, $d, $w, $b, 3);
    };
    (@one $elem:ty, $dt:literal, $d:literal, $w:literal, $b:literal, $win:tt) => {
        bwd_entries!(@body [cfg(all())] $elem, $dt, $d, $w, $b, $win);
    };
    (@body [$on:meta] $elem:ty, $dt:literal, $d:literal, $w:literal, $b:literal, $win:tt) => {
        #[$on]
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
                        { C.score_key_warps(WGMMA) as usize },
                        { C.score_query_tiles(WGMMA) as usize },
                        { C.score_key_tiles(WGMMA) as usize },
                        { C.kv_key_warps() as usize },
                        { (C.block_n() / 16 / C.kv_key_warps()) as usize },
                        { (C.head_dim / 8 / (C.warps / C.kv_key_warps())) as usize },
                        { C.dq_query_warps() as usize },
                        { (C.head_dim / 8 / (C.warps / C.dq_query_warps())) as usize },
                        { C.windowed_walk() },
                        { C.window == 2 },
                        { C.window == 3 },
                        { C.col_groups() as usize },
                        { C.tma_query_tiles(WGMMA) },
                        { C.tile_counters() },
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
                unsafe {
                    bwd_prep::<
                        $elem,
                        { C.head_dim as usize },
                        { C.pitch() as usize },
                        { C.prep_stages(WGMMA) as usize },
                        { C.window != 0 },
                        false,
                        { C.tile_counters() },
                    >(&p)
                }
            }

            bwd_entries!(@residual $elem, $dt, $d, $w, $b, $win);
        };
    };
    // The preprocessing kernel that also takes a training forward's residuals (sm_90a:
    // [`prep_from_residuals`]; the window instances' falls back to their masked pass).
    (@residual $elem:ty, $dt:literal, $d:literal, $w:literal, $b:literal, $win:tt) => {
        /// The backward's preprocessing kernel with a training forward's residuals (see
        /// [`prep_from_residuals`]).
        ///
        /// # Safety
        /// See [`bwd_prep`] and [`prep_from_residuals`].
        #[cfg(target_feature = "sm_90a")]
        #[unsafe(export_name = crate::bwd_kernel_name!(prep_res, $dt, $d, $w, $b, $win))]
        pub unsafe extern "ptx-kernel" fn entry_prep_res(p: BwdParams) {
            // SAFETY: forwarded contract.
            unsafe {
                bwd_prep::<
                    $elem,
                    { C.head_dim as usize },
                    { C.pitch() as usize },
                    { C.prep_stages(WGMMA) as usize },
                    { C.window != 0 },
                    true,
                    { C.tile_counters() },
                >(&p)
            }
        }
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

//! The Hopper forward kernel (sm_90a): TMA tile loads, `wgmma` products, a producer warpgroup,
//! the softmax of one key tile under the `P·V` product of the previous one.
//!
//! A block owns `BM = 64·C` query rows of one (sequence, head): `C` consumer warpgroups of 64
//! rows each, and one producer warpgroup after them (its registers given to the consumers with
//! `setmaxnreg`). The producer's first thread loads Q once and then
//! streams the K and V tiles (`BN` keys each) through a ring of `NS` stages with TMA
//! (`cp.async.bulk.tensor`, 128-byte swizzled panels of 64 columns); each load completes a
//! *full* barrier with its bytes. A consumer warpgroup computes, per key tile j:
//! - `S_j = Q·K_jᵀ` with `wgmma` (both operands in shared memory), then releases the K stage
//!   (one arrival on its *empty* barrier per warpgroup);
//! - the mask where the tile crosses the diagonal, a window's edge or the end of the keys, and
//!   the online softmax on the accumulators in registers (the recurrence shared with the CPU,
//!   [`OnlineSoftmax`]; the accumulator layout is `mma.sync`'s, see [`wgmma`]);
//! - `O += P_j·V_j` with P from registers (the scores' accumulators repacked, no shared-memory
//!   round trip) and V by descriptor (N-major), then releases the V stage.
//!
//! These run as FlashAttention-3's pipeline inside the warpgroup: a prologue computes `S_0` and
//! its softmax; then, for every tile but the last, the warpgroup issues `S_{j+1}` and `P_j·V_j`
//! back to back, waits for the first only (`wgmma.wait_group 1`), runs the softmax of `S_{j+1}`
//! while `P_j·V_j` is on the tensor cores, waits for it and packs P_{j+1} (O is rescaled before
//! the next issue); an epilogue issues the last `P·V`. Two score arrays are live in that loop
//! (`S_{j+1}` while `P_j` is still an operand), which the consumers' 240 registers hold. The two
//! consumer warpgroups also take turns issuing (ping-pong: one's softmax under the other's
//! products).
//! The masked d = 256 instances alone wait for both products before the softmax (their
//! modifiers' registers on top of the second score array spilled). The 192-row instances of
//! d ≤ 64 run three consumer warpgroups at 160 registers each and no ping-pong (it pairs two).
//! At d ≥ 128 the inference instances keep a row's running maximum until a tile's exceeds it by
//! 2^8 ([`OnlineSoftmax::step_lazy`]), so the output's rescale is skipped on most tiles.
//!
//! Persistent instances launch about one block an SM; a block walks query tiles one after the
//! other, its producer loading the next tile's Q (once the consumers arrived on *Q empty* after
//! their last `Q·Kᵀ`) and K/V while the consumers finish the current tile, the ring and the
//! ping-pong turns running on across tiles. The static ones (no causal mask) walk tiles
//! `x, x + grid, …`; the dynamic ones (causal) take each next tile from a launch counter, a
//! head's longest tiles first, and hand it to the consumers through a shared-memory slot.
//!
//! With `partial_o` set (a step of context-parallel attention) each row is merged by
//! log-sum-exp with the running result of the earlier steps (f32, in the partial rows) and
//! written back there, or, at the row's last contribution, to O and the log-sum-exp
//! ([`WgmmaParams::merge`], [`WgmmaParams::final_rows`]): no combine kernel, one f32 slot.
//!
//! Causal grids run the longest rows first. TMA zero-fills rows past the end of the sequence
//! (fixed-length batches: the map's seqlen dimension) and columns past the head dim, so
//! partial tiles and padded head dims need no predication on the loads. A variable-length
//! batch is packed (one map over all tokens, each sequence found through `cu_seqlens`): there a
//! sequence's last K/V tile holds the next sequence's rows, whose scores are masked and whose V
//! rows the producer warp zeroes before the consumers see the tile ([`zero_borrowed_rows`]).

use super::arch::global;
use super::arch::mma::{Bf16, F16};
use super::arch::shared;
use super::arch::shuffle;
use super::arch::thread::{
    block_dim_x, block_x, block_y, block_z, claim_registers, grid_dim_x, named_arrive, named_sync, opaque,
    release_registers, sync_threads, thread_x,
};
use super::arch::tma;
use super::arch::wgmma::{self, SWIZZLE_ATOM_BYTES, WgmmaElement, descriptor};
use super::score_mod;
use super::sequence::SeqView;
use crate::config::{WGMMA_PANEL, WgmmaConfig};
use crate::mask;
use crate::math::{exp2, fma};
use crate::params::{TENSOR_MAP_BYTES, WgmmaParams};
use crate::softmax::{FUSED_LIMIT, OnlineSoftmax, SplitMerge};

/// Where everything is in the block's shared memory (offsets from a 1024-byte aligned base). `QB`
/// Q tiles: 1, or 2 in the persistent blocks of [`WgmmaConfig::q_tiles`] (query tile `n` in tile
/// `n % 2`, so that the next tile's Q lands while the current one is read; each query tile's
/// output is staged for its TMA stores in its own Q tile, once its products have read it). A
/// persistent block with one Q tile stages its output in a tile of its own ([`Smem::o`]).
struct Smem<const D: usize, const BM: usize, const BN: usize, const NS: usize, const QB: usize>;

impl<const D: usize, const BM: usize, const BN: usize, const NS: usize, const QB: usize>
    Smem<D, BM, BN, NS, QB>
{
    const Q: u32 = 0;
    const K: u32 = (QB * 2 * BM * D) as u32;
    const V: u32 = Self::K + (NS * 2 * BN * D) as u32;
    const BARS: u32 = Self::V + (NS * 2 * BN * D) as u32;
    /// A persistent block's barriers and tile slots after the others: Q empty, tile slot and Q
    /// full per Q tile (Q tile 0's Q-full barrier is the first barrier).
    const EXTRA: u32 = Self::BARS + 8 * (2 + 4 * NS as u32);

    /// The aligned base.
    #[inline(always)]
    fn base() -> u32 {
        (shared::base() + 1023) & !1023
    }
    /// Q tile `b`.
    #[inline(always)]
    fn q(base: u32, b: u32) -> u32 {
        base + Self::Q + b * (2 * BM * D) as u32
    }
    /// Stage `s` of the K ring.
    #[inline(always)]
    fn k(base: u32, s: u32) -> u32 {
        base + Self::K + s * (2 * BN * D) as u32
    }
    /// Stage `s` of the V ring.
    #[inline(always)]
    fn v(base: u32, s: u32) -> u32 {
        base + Self::V + s * (2 * BN * D) as u32
    }
    /// Barriers: Q tile `b` full; then per stage K full, V full, K empty, V empty.
    #[inline(always)]
    fn q_full(base: u32, b: u32) -> u32 {
        if b == 0 { base + Self::BARS } else { base + Self::EXTRA + 8 * (2 + 3 * (b - 1)) }
    }
    #[inline(always)]
    fn k_full(base: u32, s: u32) -> u32 {
        base + Self::BARS + 8 * (1 + s)
    }
    #[inline(always)]
    fn v_full(base: u32, s: u32) -> u32 {
        base + Self::BARS + 8 * (1 + NS as u32 + s)
    }
    #[inline(always)]
    fn k_empty(base: u32, s: u32) -> u32 {
        base + Self::BARS + 8 * (1 + 2 * NS as u32 + s)
    }
    #[inline(always)]
    fn v_empty(base: u32, s: u32) -> u32 {
        base + Self::BARS + 8 * (1 + 3 * NS as u32 + s)
    }
    /// Where a variable-length batch's last, partial V tile lands (see [`zero_borrowed_rows`]).
    #[inline(always)]
    fn v_landed(base: u32) -> u32 {
        base + Self::BARS + 8 * (1 + 4 * NS as u32)
    }
    /// A persistent block's Q tile `b` is free for its next query tile: both consumer
    /// warpgroups' products have read it and their output's TMA stores too (persistent instances
    /// only: the others' shared memory ends before it).
    #[inline(always)]
    fn q_empty(base: u32, b: u32) -> u32 {
        base + Self::EXTRA + 8 * 3 * b
    }
    /// A dynamic persistent block's query tile for Q tile `b`, written by the producer before
    /// that Q's barrier completes (after its Q-empty barrier).
    #[inline(always)]
    fn tile_slot(base: u32, b: u32) -> u32 {
        base + Self::EXTRA + 8 * (1 + 3 * b)
    }
    /// A persistent block's output tile with one Q tile (the Q tile's size, after the barriers,
    /// 1024-byte aligned): its TMA stores read there while the next query tile's Q lands in
    /// the Q tile.
    #[inline(always)]
    fn o(base: u32) -> u32 {
        base + ((Self::EXTRA + 8 + 1023) & !1023)
    }
}

/// Registers per thread of the producer warpgroup after it releases the rest, and of each
/// consumer warpgroup after it claims them. `setmaxnreg` moves registers inside the block's own
/// allocation (168 a thread at 384 threads: 64512; 128 at 512: 65536), so the two must fit it:
/// two consumers 24·128 + 240·256 = 64512 (32 for the producer deadlocks: the consumers wait
/// forever), three 24·128 + 160·384 = 64512 (168 would need 67584).
const PRODUCER_REGISTERS: u32 = 24;

/// Registers per consumer thread for `consumers` consumer warpgroups (the kernel's `CR`).
const fn consumer_registers(consumers: u32) -> u32 {
    if consumers == 3 { 160 } else { 240 }
}

/// Zeroes rows `first..BN` of a variable-length batch's last, partial V tile, by the 32 lanes of
/// the producer warp, once the tile has landed on [`Smem::v_landed`]; the caller's first lane
/// then completes the stage's `v_full` barrier, which the consumers wait for as usual.
///
/// Why: the tensors of a variable-length batch are packed, and TMA zero-fills only past the
/// packed tensor's end, so a sequence's last tile holds the next sequence's rows (or spare
/// tokens). Their scores are masked (probability exactly 0), but `0 · V` of an Inf or NaN there
/// would be NaN. The tile's panels are contiguous, 128 bytes a row, so the 128-byte swizzle
/// (which permutes 16-byte chunks inside a row) does not matter. A block has at most one such
/// tile (its sequence's last), so `v_landed` completes once: phase 0.
///
/// # Safety
/// Called by all 32 lanes of the producer warp, after its first lane issued the tile's loads
/// onto `v_landed`; `first < BN`.
#[inline(always)]
unsafe fn zero_borrowed_rows<
    const D: usize,
    const BM: usize,
    const BN: usize,
    const NS: usize,
    const DP: usize,
    const QB: usize,
>(
    base: u32,
    tile: u32,
    first: u32,
    lane: u32,
) {
    // SAFETY: the caller's first lane issued the loads onto this barrier.
    unsafe { tma::wait(Smem::<D, BM, BN, NS, QB>::v_landed(base), 0) };
    // Rows `first..BN` of each panel: 8 chunks of 16 bytes a row, the lanes 32 chunks apart.
    for panel in 0..DP as u32 {
        let stop = (panel + 1) * (8 * BN) as u32;
        let mut chunk = (panel * BN as u32 + first) * 8 + lane;
        while chunk < stop {
            // SAFETY: chunk < 8·BN·DP: 16 bytes inside the stage, 16-byte aligned.
            unsafe { shared::store_u32x4(tile + 16 * chunk, [0; 4]) };
            chunk += 32;
        }
    }
    // The zeros are ordinary (generic-proxy) writes that `wgmma` reads through the async proxy.
    wgmma::fence_proxy_async_shared();
    shuffle::sync_warp();
}

/// The key tiles of a query tile (`m0 < len_q`): `[first, end)` of `BN`-key tiles; with a
/// window (`WIN`), from the tile holding its first row's first key to the one holding its last
/// row's last key (tiles outside every row's window are never loaded). (`causal`: the kernel's
/// mask, false in persistent instances.)
#[inline(always)]
fn key_tiles<const WIN: bool>(
    p: &WgmmaParams,
    seq: &SeqView,
    m0: u32,
    bm: u32,
    bn: u32,
    causal: bool,
) -> (u32, u32) {
    let a = &p.attn;
    let row_end = (m0 + bm).min(seq.len_q);
    if WIN {
        let n_end = mask::row_key_end(row_end - 1, seq.len_q, seq.len_k, causal, a.window_right);
        let n_begin = mask::row_key_begin(m0, seq.len_q, seq.len_k, a.window_left);
        let end = n_end.div_ceil(bn);
        ((n_begin / bn).min(end), end)
    } else {
        (0, mask::key_end(row_end, seq.len_q, seq.len_k, causal).div_ceil(bn))
    }
}

/// The kernel body. `D` head dim of the tiles (a multiple of 64), `BM` rows per block (64 per
/// consumer warpgroup), `BN` keys per tile (128; 176 at d = 128 without a mask; 64, 80 or 112 where the output's `D / 2` accumulators a
/// thread leave no room for 128 keys' scores twice over), `NS` stages, `C = BM / 64` consumers,
/// `DP = D / 64` panels, `SN = BN / 2` score accumulators a thread, `PK = BN / 16` P fragments.
///
/// # Safety
/// `p` must describe valid 16-bit tensors, `p.maps` three tensor maps of them as
/// [`WgmmaParams`] says with boxes of 64 columns × `BM` (Q) or `BN` (K, V) rows; launch with
/// `128·(C + 1)` threads and `WgmmaConfig::shared_bytes` of dynamic shared memory (a launch
/// with another block size traps: a launch error rather than a hang).
#[inline(always)]
unsafe fn flash_fwd_wgmma<
    E: WgmmaElement,
    const D: usize,
    const BM: usize,
    const BN: usize,
    const NS: usize,
    const C: usize,
    const DP: usize,
    const SN: usize,
    const PK: usize,
    const WIN: bool,
    const SEQ: bool,
    const TRAIN: bool,
    const OTMA: bool,
    const PERSIST: bool,
    const DYN: bool,
    const CR: u32,
    const QB: usize,
>(
    p: &WgmmaParams,
) {
    const {
        // Q tiles: one, or two in some persistent blocks (see [`Smem`]).
        assert!(QB == 1 || (QB == 2 && PERSIST));
        assert!(
            (BN == 176 || BN == 128 || BN == 112 || BN == 80 || BN == 64) && 2 * SN == BN && 16 * PK == BN
        );
        assert!(D % 64 == 0 && DP * 64 == D && C * 64 == BM && NS >= 1);
    };
    type S<const D: usize, const BM: usize, const BN: usize, const NS: usize, const QB: usize> =
        Smem<D, BM, BN, NS, QB>;
    // The roles (the last warpgroup produces), the named barriers' thread counts and the
    // `setmaxnreg` budget (24·128 + 240·256: all of the block's registers at 168 a thread) hold
    // for exactly `128·(C + 1)` threads. At 288 (a host built against a stale `WgmmaConfig`, the
    // producer-warp layout) one producer warp releases 144·32 registers and the consumers'
    // `setmaxnreg.inc` waits forever for the 72·256 it needs. Such a block stops here instead,
    // before any barrier.
    if block_dim_x() != (128 * (C + 1)) as u32 {
        // SAFETY: `trap` aborts the launch (the host sees a launch error); nothing runs after it.
        unsafe { core::arch::nvptx::trap() }
    }
    let a = &p.attn;
    if PERSIST && ((a.causal != 0) != DYN || a.cu_seqlens_q != 0 || (DYN && p.tile_counter == 0)) {
        // Persistent instances run fixed-length problems, the static ones without a causal mask
        // and the dynamic ones with one and a counter (the host's rule): what follows takes that
        // for granted. A launch error, not wrong rows.
        // SAFETY: `trap` aborts the launch.
        unsafe { core::arch::nvptx::trap() }
    }
    let tid = thread_x();
    let (h, z) = (block_y(), block_z());
    // (Persistent instances: the static ones without a causal mask, the dynamic ones with one.)
    let causal = if PERSIST { DYN } else { a.causal != 0 };
    let m_block = if causal { grid_dim_x() - 1 - block_x() } else { block_x() };
    // SAFETY: offsets valid for every z of the grid (host).
    let seq = unsafe { SeqView::of(a, z) };
    let m0 = m_block * BM as u32;
    if !PERSIST && m0 >= seq.len_q {
        return;
    }
    let keys = key_tiles::<WIN>(p, &seq, m0, BM as u32, BN as u32, causal);
    // The block's query tiles. One-tile instances: the grid's own (block x, y, z above), once.
    // Persistent instances (a grid of about one block an SM, `WgmmaParams::tiles`): tiles
    // `t = x, x + grid, x + 2·grid, …` of all the (head, sequence) pairs' query tiles, numbered
    // query tile first (`tiles_m` a pair), then head, then sequence; the producer and the
    // consumers walk the same. (head, sequence, first row, key tiles) of tile `t`, from the
    // parameters read again each tile (`opaque`): kept across the walk, they spilled from the
    // producer's 24 registers and, at d = 256, from the consumers'.
    let tile_of = |t: u32| -> (u32, SeqView, u32, (u32, u32)) {
        if PERSIST {
            let param = opaque;
            // (`max(1)`: no division that can fail; the host sets both.)
            let (tiles_m, heads) = (param(p.tiles_m).max(1), param(a.heads_q).max(1));
            let hz = t / tiles_m;
            // (Fixed-length batches only, host: `SeqView::of` without its offsets' branch.)
            let (len_q, len_k) = (param(a.seqlen_q), param(a.seqlen_k));
            let seq = SeqView { batch: (hz / heads) as u64, q_start: 0, k_start: 0, len_q, len_k };
            // (Dynamic instances: a pair's longest tiles first.)
            let m_block = if DYN { tiles_m - 1 - (t - hz * tiles_m) } else { t - hz * tiles_m };
            let m0 = m_block * BM as u32;
            (hz % heads, seq, m0, key_tiles::<WIN>(p, &seq, m0, BM as u32, BN as u32, causal))
        } else {
            (h, seq, m0, keys)
        }
    };
    // The first tile, the walk's end and step (one tile without `PERSIST`).
    let (first_t, t_end, t_step) = if PERSIST { (block_x(), p.tiles, grid_dim_x()) } else { (0, 1, 1) };
    let base = S::<D, BM, BN, NS, QB>::base();

    if tid == 0 {
        // SAFETY: the barriers are inside the shared memory; nobody uses them before the sync.
        unsafe {
            tma::init(S::<D, BM, BN, NS, QB>::q_full(base, 0), 1);
            tma::init(S::<D, BM, BN, NS, QB>::v_landed(base), 1);
            if PERSIST {
                // (Dynamic instances: every consumer thread arrives, see below.)
                let arrivals = if DYN { 128 * C as u32 } else { C as u32 };
                for b in 0..QB as u32 {
                    tma::init(S::<D, BM, BN, NS, QB>::q_empty(base, b), arrivals);
                }
                if QB == 2 {
                    tma::init(S::<D, BM, BN, NS, QB>::q_full(base, 1), 1);
                }
            }
            for s in 0..NS as u32 {
                tma::init(S::<D, BM, BN, NS, QB>::k_full(base, s), 1);
                tma::init(S::<D, BM, BN, NS, QB>::v_full(base, s), 1);
                tma::init(S::<D, BM, BN, NS, QB>::k_empty(base, s), C as u32);
                tma::init(S::<D, BM, BN, NS, QB>::v_empty(base, s), C as u32);
            }
        }
        tma::fence_init();
    }
    sync_threads();

    let producer = tid >= (128 * C) as u32;
    if producer {
        // The producer warpgroup needs few registers: it gives them to the consumers.
        release_registers::<PRODUCER_REGISTERS>();
        // One warp produces: its first lane issues every load; all of its lanes zero the rows a
        // variable-length batch's last key tile borrows from the next sequence.
        if tid >= (128 * C + 32) as u32 {
            return;
        }
        let issuer = tid == (128 * C) as u32;
        if PERSIST && !issuer {
            // (Fixed-length batches: no borrowed rows to zero.)
            return;
        }
        // (Persistent grids run fixed-length batches only.)
        let varlen = !PERSIST && a.cu_seqlens_q != 0;
        let (q_map, k_map, v_map) = (p.maps, p.maps + TENSOR_MAP_BYTES, p.maps + 2 * TENSOR_MAP_BYTES);
        let tile_bytes = |rows: usize| (2 * rows * D) as u32;
        // The block's query tiles walked so far, `n` (see the consumers' loop), and, in a dynamic
        // instance (query tiles of unequal key tiles), the K/V ring's position.
        let (mut n, mut dyn_ring) = (0u32, 0usize);
        loop {
            // Query tile `n`'s Q tile, and the phase of its barriers' use by this tile.
            let (qb, q_round) = (n % QB as u32, n / QB as u32);
            let t = if DYN {
                // The next tile from the launch's counter (the host zeroes it), published to the
                // consumers in the Q tile's slot once they are done with its last query tile;
                // past the end, the Q barrier completes without a load and the walk ends.
                if q_round > 0 {
                    // SAFETY: an initialised barrier.
                    unsafe { tma::wait(S::<D, BM, BN, NS, QB>::q_empty(base, qb), (q_round - 1) & 1) };
                }
                // SAFETY: the host's zeroed counter (`WgmmaParams::tile_counter`); the slot lies
                // inside the shared memory (persistent instances).
                let t = unsafe { global::atomic_add_u32(p.tile_counter, 1) };
                unsafe { shared::store_u32(S::<D, BM, BN, NS, QB>::tile_slot(base, qb), t) };
                if t >= t_end {
                    // SAFETY: an initialised barrier; its phase completes on this arrival.
                    unsafe { tma::arrive(S::<D, BM, BN, NS, QB>::q_full(base, qb)) };
                    break;
                }
                t
            } else {
                let t = first_t + n * t_step;
                if t >= t_end {
                    break;
                }
                t
            };
            let (h, seq, m0, (j_begin, j_end)) = tile_of(t);
            let ring = if DYN { dyn_ring } else { (n * (j_end - j_begin)) as usize };
            let kv_h = h / a.group.max(1);
            let (b, q_row, k_row) = (seq.batch as i32, (seq.q_start + m0 as u64) as i32, seq.k_start as i32);
            // The sequence's last key tile reaches into the next one's tokens (varlen only: TMA
            // zero-fills past the packed tensor's end, not past a sequence's): it lands on its
            // own barrier, and `v_full` completes once the borrowed rows are zeroed.
            let borrows = varlen && j_begin < j_end && j_end * BN as u32 > seq.len_k;
            let last_stage = (j_end - j_begin + NS as u32 - 1) % NS as u32;
            // SAFETY: the maps are valid (host); every destination is a 1024-byte aligned panel
            // of its tile; each barrier expects exactly the bytes of the loads completing on it.
            unsafe {
                if issuer {
                    if n == 0 {
                        tma::prefetch_map(q_map);
                        tma::prefetch_map(k_map);
                        tma::prefetch_map(v_map);
                    }
                    if !DYN && q_round > 0 {
                        // Both consumer warpgroups are done with this Q tile's last query tile
                        // (its products and its output's stores). With two Q tiles that was two
                        // query tiles ago: this Q lands while the consumers work on the last.
                        tma::wait(S::<D, BM, BN, NS, QB>::q_empty(base, qb), (q_round - 1) & 1);
                    }
                    let q_full = S::<D, BM, BN, NS, QB>::q_full(base, qb);
                    tma::arrive_expect_tx(q_full, tile_bytes(BM));
                    for panel in 0..DP {
                        let dst = S::<D, BM, BN, NS, QB>::q(base, qb) + (panel * BM * 128) as u32;
                        tma::load_4d(dst, q_map, [(64 * panel) as i32, q_row, h as i32, b], q_full);
                    }
                    for (i, j) in (j_begin..j_end).enumerate() {
                        let i = ring + i;
                        let (s, round) = ((i % NS) as u32, (i / NS) as u32);
                        let row = k_row + (j * BN as u32) as i32;
                        let v_full = if borrows && j + 1 == j_end {
                            S::<D, BM, BN, NS, QB>::v_landed(base)
                        } else {
                            S::<D, BM, BN, NS, QB>::v_full(base, s)
                        };
                        for (map, full, empty, tile) in [
                            (
                                k_map,
                                S::<D, BM, BN, NS, QB>::k_full(base, s),
                                S::<D, BM, BN, NS, QB>::k_empty(base, s),
                                S::<D, BM, BN, NS, QB>::k(base, s),
                            ),
                            (
                                v_map,
                                v_full,
                                S::<D, BM, BN, NS, QB>::v_empty(base, s),
                                S::<D, BM, BN, NS, QB>::v(base, s),
                            ),
                        ] {
                            if round > 0 {
                                // The consumers released this stage's previous tile.
                                tma::wait(empty, (round - 1) & 1);
                            }
                            tma::arrive_expect_tx(full, tile_bytes(BN));
                            for panel in 0..DP {
                                let dst = tile + (panel * BN * 128) as u32;
                                tma::load_4d(dst, map, [(64 * panel) as i32, row, kv_h as i32, b], full);
                            }
                        }
                    }
                }
                if borrows {
                    // (One query tile a block: `ring` is 0 and `v_landed` completes once.)
                    let first = seq.len_k - (j_end - 1) * BN as u32;
                    zero_borrowed_rows::<D, BM, BN, NS, DP, QB>(
                        base,
                        S::<D, BM, BN, NS, QB>::v(base, last_stage),
                        first,
                        tid % 32,
                    );
                    if issuer {
                        tma::arrive(S::<D, BM, BN, NS, QB>::v_full(base, last_stage));
                    }
                }
            }
            dyn_ring += (j_end - j_begin) as usize;
            n += 1;
        }
        return;
    }

    // A consumer warpgroup: rows `64·wg ..` of the block; each warp 16 of them.
    claim_registers::<CR>();
    let wg = tid / 128;
    let lane = tid % 32;
    let warp_in_wg = (tid / 32) % 4;
    let (g, t4) = (lane / 4, lane % 4);
    let leader = tid % 128 == 0;
    let max_fused = FUSED_LIMIT / a.scale_log2;
    let q_panel_bytes = (BM * 128) as u32;
    let kv_panel_bytes = (BN * 128) as u32;
    let q_tile0 = S::<D, BM, BN, NS, QB>::q(base, 0) + wg * (64 * 128);
    // (A persistent block with one Q tile stages its output rows in an output tile of its own.)
    let o_tile0 =
        if PERSIST && QB == 1 { S::<D, BM, BN, NS, QB>::o(base) + wg * (64 * 128) } else { q_tile0 };
    let (my_turn, other_turn) = (1 + wg, 2 - wg);
    if PERSIST && C == 2 && wg == 1 {
        named_arrive::<256>(other_turn);
    }
    // The block's query tiles walked so far, `n`: its tile `t`, the K/V ring's position at its
    // start (the ring runs on from one query tile to the next; every query tile of a static
    // persistent grid has the same key tiles, so `n` times them: one register carried, not
    // three, which d = 128 spilled; a dynamic one's tiles differ, so it carries the position)
    // and its Q tile (`n % QB`) with the parity of that tile's barriers.
    let (mut n, mut dyn_ring) = (0u32, 0usize);
    // Persistent blocks with two Q tiles wait for a query tile's output stores to have read its
    // Q tile a prologue later (`late_read`, NOTES v44), not right after issuing them — but not
    // the d = 64 two-consumer instances, whose key walk is short: there the later wait ran 3.7%
    // (causal) and 7.0% slower at N = 1024 (session 37 `call2`), where d = 128 ran 0.3 to 1.4%
    // and the three-consumer d = 64 instance 2.5% faster.
    let late_read = PERSIST && QB == 2 && !(D <= 64 && C == 2);
    loop {
        let (qb, q_parity) = (n % QB as u32, (n / QB as u32) & 1);
        // The warpgroup's rows of the query tile's Q tile, where the epilogue also stages its
        // output rows for their TMA stores (once its products have read them).
        let q_tile = if QB == 2 { S::<D, BM, BN, NS, QB>::q(base, qb) + wg * (64 * 128) } else { q_tile0 };
        // The `Q·Kᵀ` descriptors: at d = 128, Q tile 0's plus Q tile `qb`'s offset in the
        // start-address field (under 2^14: addresses under 256 KiB), which keeps them out of the
        // key loop (811 SASS instructions against 827 with descriptors of `q_tile`); at d = 64,
        // of `q_tile` itself, which ran 2 to 4% faster there without causal masks (NOTES v42b).
        let q_desc_off: u64 = if QB == 2 && D > 64 { ((qb * (2 * BM * D) as u32) >> 4) as u64 } else { 0 };
        let q_desc_tile = if QB == 2 && D > 64 { q_tile0 } else { q_tile };
        let t = if DYN {
            // The producer's tile for this one (its slot written before the Q barrier completed).
            // SAFETY: the barrier is initialised; the slot lies inside the shared memory.
            unsafe {
                tma::wait(S::<D, BM, BN, NS, QB>::q_full(base, qb), q_parity);
                shared::load_u32(S::<D, BM, BN, NS, QB>::tile_slot(base, qb))
            }
        } else {
            first_t + n * t_step
        };
        if t >= t_end {
            break;
        }
        if PERSIST {
            // The warp is converged here: without this ptxas treated the loop's code as possibly
            // divergent and kept none of it on the uniform datapath (the products' descriptors
            // in ordinary registers: +8 to +12% time at N ≥ 8192, session 19).
            shuffle::sync_warp();
        }
        let (h, seq, m0, (j_begin, j_end)) = tile_of(t);
        let ring = if DYN { dyn_ring } else { (n * (j_end - j_begin)) as usize };
        // Key tiles at or past `free_end` (and, with a window, before `free_begin`) hold keys that
        // some row of the block does not see: only those are masked.
        let (free_end, free_begin) = if WIN {
            let last = (m0 + BM as u32).min(seq.len_q) - 1;
            (
                mask::row_key_end(m0, seq.len_q, seq.len_k, causal, a.window_right),
                mask::row_key_begin(last, seq.len_q, seq.len_k, a.window_left),
            )
        } else {
            (mask::unmasked_end(m0, seq.len_q, seq.len_k, causal).min(seq.len_k), 0)
        };
        let mut o = [[0.0f32; 32]; DP];
        let mut state = [OnlineSoftmax::new(); 2];
        if !DYN {
            // SAFETY: the barrier is initialised; TMA completes it once a query tile.
            unsafe { tma::wait(S::<D, BM, BN, NS, QB>::q_full(base, qb), q_parity) };
        }

        // S = Q·K_jᵀ for the tile of ring position `i`: waits for K, issues D/16 steps of k16
        // (32 bytes apart inside a panel) and commits, without waiting for the products. A macro,
        // not a closure: at D = 256 LLVM kept a closure out of line, its scores in local memory.
        macro_rules! issue_scores {
            ($sc:ident, $i:expr) => {{
                let i: usize = $i;
                let (s, parity) = ((i % NS) as u32, ((i / NS) & 1) as u32);
                let k_tile = S::<D, BM, BN, NS, QB>::k(base, s);
                // SAFETY: the K stage's barrier; descriptors of the loaded, swizzled Q and K panels.
                unsafe {
                    tma::wait(S::<D, BM, BN, NS, QB>::k_full(base, s), parity);
                    wgmma::fence();
                    for kk in 0..D / 16 {
                        let (panel, within) = ((kk / 4) as u32, 32 * (kk % 4) as u32);
                        let qd =
                            descriptor(q_desc_tile + panel * q_panel_bytes + within, 16, SWIZZLE_ATOM_BYTES)
                                + q_desc_off;
                        let kd = descriptor(k_tile + panel * kv_panel_bytes + within, 16, SWIZZLE_ATOM_BYTES);
                        E::ss_scores(&mut $sc, qd, kd, (kk > 0) as u32);
                    }
                    wgmma::commit();
                }
            }};
        }
        // Releases K stage `i % NS` once this warpgroup's products have read it.
        let release_k = |i: usize| {
            if leader {
                // SAFETY: an initialised barrier.
                unsafe { tma::arrive(S::<D, BM, BN, NS, QB>::k_empty(base, (i % NS) as u32)) };
            }
        };

        // The mask and the online softmax of one tile's scores (in place: scores become
        // probabilities), returning each row's rescale factor α for the output; as in the `mma.sync`
        // kernel: rows g (elements 0, 1 of each 8-column block) and g + 8 (elements 2, 3). A macro,
        // so that the arrays stay in registers at both uses.
        let row_base = m0 + wg * 64 + warp_in_wg * 16 + g;
        macro_rules! softmax_tile {
            ($sc:ident, $j:expr) => {{
                let n0 = $j * BN as u32;
                if WIN {
                    // Softcap and ALiBi (problems that have them), then each row's window.
                    // SAFETY: the host sizes the slopes.
                    unsafe { score_mod::apply_flat::<SN>(a, &seq, h, &mut $sc, row_base, n0, t4) };
                    if n0 + BN as u32 > free_end || n0 < free_begin {
                        for half in 0..2 {
                            let row = row_base + 8 * half as u32;
                            let begin = mask::row_key_begin(row, seq.len_q, seq.len_k, a.window_left);
                            let limit = mask::row_key_end(row, seq.len_q, seq.len_k, causal, a.window_right);
                            for nt in 0..BN / 8 {
                                for e in 0..2 {
                                    let key = n0 + 8 * nt as u32 + 2 * t4 + e as u32;
                                    if key >= limit || key < begin {
                                        $sc[4 * nt + 2 * half + e] = f32::NEG_INFINITY;
                                    }
                                }
                            }
                        }
                    }
                } else if n0 + BN as u32 > free_end {
                    // Mask the tiles that cross the diagonal or the end of the keys.
                    for half in 0..2 {
                        let row = row_base + 8 * half as u32;
                        let limit = mask::key_end(row + 1, seq.len_q, seq.len_k, causal);
                        for nt in 0..BN / 8 {
                            for e in 0..2 {
                                if n0 + 8 * nt as u32 + 2 * t4 + e as u32 >= limit {
                                    $sc[4 * nt + 2 * half + e] = f32::NEG_INFINITY;
                                }
                            }
                        }
                    }
                }
                let mut alphas = [1.0f32; 2];
                for half in 0..2 {
                    let mut m = f32::NEG_INFINITY;
                    for nt in 0..BN / 8 {
                        m = m.max($sc[4 * nt + 2 * half]).max($sc[4 * nt + 2 * half + 1]);
                    }
                    // (Inference at d ≥ 128: the lazy step, most tiles after the first skip
                    // `rescale_o` — d = 256 −1 to −5% time, d = 128 −1 to −3%, but d = 64, whose
                    // rescale is 32 products a tile, +1 to +2% at N = 1024: NOTES v37. Training:
                    // a row's largest probability must be exactly 1.)
                    let m = shuffle::max4(m);
                    alphas[half] = if TRAIN || D <= 64 {
                        state[half].step(m, a.scale_log2).alpha
                    } else {
                        state[half].step_lazy(m, a.scale_log2).alpha
                    };
                }
                let largest = state[0].max.abs().max(state[1].max.abs());
                // Training instances always take the two-step form `2^((s − m)·c)`: a row's largest
                // score then has probability exactly 1, which the backward needs (NOTES b18).
                let fused = !TRAIN && shuffle::all(largest < max_fused);
                if !fused {
                    for (k, x) in $sc.iter_mut().enumerate() {
                        let m = state[(k % 4) / 2].max;
                        *x -= if m == f32::NEG_INFINITY { 0.0 } else { m };
                    }
                }
                for half in 0..2 {
                    let offset = if fused { state[half].current(a.scale_log2).neg_max_scaled } else { 0.0 };
                    let mut sum = 0.0;
                    for nt in 0..BN / 8 {
                        for e in 0..2 {
                            let x = exp2(fma($sc[4 * nt + 2 * half + e], a.scale_log2, offset));
                            $sc[4 * nt + 2 * half + e] = x;
                            sum += x;
                        }
                    }
                    state[half].add(sum);
                }
                alphas
            }};
        }
        // P as `wgmma` A fragments (16 keys each: `PK = BN / 16` of them).
        macro_rules! pack_p {
            ($sc:ident) => {{
                let mut pf = [[0u32; 4]; PK];
                for (ks, pk) in pf.iter_mut().enumerate() {
                    let lo = [$sc[8 * ks], $sc[8 * ks + 1], $sc[8 * ks + 2], $sc[8 * ks + 3]];
                    let hi = [$sc[8 * ks + 4], $sc[8 * ks + 5], $sc[8 * ks + 6], $sc[8 * ks + 7]];
                    *pk = E::acc_to_a(&lo, &hi);
                }
                pf
            }};
        }

        // O *= α per row (rows g and g + 8 of each 8-column block), skipped when every α of the
        // warp is 1 (the running maxima did not move). Only where no `P·V` is in flight.
        macro_rules! rescale_o {
            ($alphas:ident) => {{
                if !shuffle::all($alphas[0] == 1.0 && $alphas[1] == 1.0) {
                    for op in o.iter_mut() {
                        for dt in 0..8 {
                            op[4 * dt] *= $alphas[0];
                            op[4 * dt + 1] *= $alphas[0];
                            op[4 * dt + 2] *= $alphas[1];
                            op[4 * dt + 3] *= $alphas[1];
                        }
                    }
                }
            }};
        }
        // O += P·V for the tile of ring position `i` (P as `wgmma` A fragments): waits for V, issues
        // `PK` steps of k16 per V panel (V's panels as N-major B operands, P from registers) and
        // commits, without waiting.
        macro_rules! issue_pv {
            ($pf:ident, $i:expr) => {{
                let i: usize = $i;
                let (s, parity) = ((i % NS) as u32, ((i / NS) & 1) as u32);
                let v_tile = S::<D, BM, BN, NS, QB>::v(base, s);
                // SAFETY: the V stage's barrier; descriptors of its loaded, swizzled panels.
                unsafe {
                    tma::wait(S::<D, BM, BN, NS, QB>::v_full(base, s), parity);
                    wgmma::fence();
                    for (ks, pk) in $pf.iter().enumerate() {
                        for (panel, op) in o.iter_mut().enumerate() {
                            let vd = descriptor(
                                v_tile + panel as u32 * kv_panel_bytes + (ks * 16 * 128) as u32,
                                kv_panel_bytes,
                                SWIZZLE_ATOM_BYTES,
                            );
                            E::rs_n64(op, pk, vd);
                        }
                    }
                    wgmma::commit();
                }
            }};
        }
        // Once `P·V` of ring position `i` completed: the output's accumulators are tied to this point
        // and the V stage is released.
        macro_rules! finish_pv {
            ($i:expr) => {{
                for op in o.iter_mut() {
                    wgmma::settle(op);
                }
                if leader {
                    // SAFETY: an initialised barrier; the products have read the V stage.
                    unsafe { tma::arrive(S::<D, BM, BN, NS, QB>::v_empty(base, ($i % NS) as u32)) };
                }
            }};
        }

        // FlashAttention-3's intra-warpgroup overlap, as three parts:
        // - prologue: `S_0 = Q·K_0ᵀ`, its softmax, P_0 packed;
        // - steady state, for each tile j but the last: O rescaled by tile j's α, then `S_{j+1}` and
        //   `P_j·V_j` issued back to back (two commit groups, in that order); `wait_group 1` (only
        //   `P_j·V_j` in flight), the softmax of `S_{j+1}` — under `P_j·V_j` on the tensor cores —
        //   then `wait_group 0` and P_{j+1} packed;
        // - epilogue: O rescaled by the last tile's α, its `P·V`, `wait_group 0`.
        // ptxas serialises every product of the kernel (info C7514/C7515) when it sees a register of
        // an in-flight `wgmma` read or written, also through control flow it cannot follow. So,
        // between an issue and the wait that completes it, nothing touches that product's registers:
        // the output is rescaled before either product is issued, the softmax works on the second
        // score array `sn` (completed by `wait_group 1`) and P_{j+1} is packed into `pf` (the
        // operand of `P_j·V_j`) only after `wait_group 0`. The last tile is peeled off the loop, so
        // that the loop always has a next tile to issue: an earlier attempt reported C7514 with
        // `S_{j+1}` under an `if`; ptxas 13.0 accepts that form of this code (checked), but its loop
        // is longer (877 against 852 SASS instructions at d = 128) and branches on every tile.
        let mut pf = [[0u32; 4]; PK];
        let mut alphas = [1.0f32; 2];
        let tiles = (j_end - j_begin) as usize;
        // Not in the masked d = 256 instances (the overlap spilled there) nor in the softcap ones
        // (`SEQ`: with the overlap the softcap's forward ran 15% slower, NOTES v25).
        let overlap = !(WIN && (D >= 256 || SEQ));
        if tiles > 0 {
            let mut sc = [0.0f32; SN];
            issue_scores!(sc, ring);
            wgmma::wait::<0>();
            wgmma::settle(&mut sc);
            release_k(ring);
            alphas = softmax_tile!(sc, j_begin);
            pf = pack_p!(sc);
        }
        // Ping-pong between the two consumer warpgroups (FlashAttention-3's): each issues its
        // products (the next `Q·Kᵀ` and `P_j·V_j`) in its turn (named barrier `1 + wg`), then hands
        // the turn to the other, so that one warpgroup's softmax runs while the other's products
        // occupy the tensor cores (besides its own `P·V`). A warpgroup takes one turn per key tile
        // (the last in the epilogue); warpgroup 0 goes first, and its last turn is taken after the
        // epilogue. In a persistent block the turns run on from one query tile to the next (both
        // warpgroups walk the same key tiles), opened before the first and closed after the last
        // (restarted per query tile, warpgroup 1 could hand over its next tile's first turn before
        // warpgroup 0 took this tile's last: two arrivals of one warpgroup would complete the
        // barrier, and both would deadlock).
        let pingpong = C == 2 && tiles > 0;
        if !PERSIST && pingpong && wg == 1 {
            named_arrive::<256>(other_turn);
        }
        if late_read && leader && n > 0 {
            // The previous query tile's output stores (issued by this thread at that tile's end)
            // have read their rows of its Q tile by now, a prologue later: waited for here, not
            // right after they were issued, where the warpgroup's other warps waited for this one
            // at the next `Q·Kᵀ` (NOTES v44). Then that Q tile is free for the query tile after
            // this one, whose Q the producer issues after this tile's K/V.
            tma::bulk_wait_read::<0>();
            // SAFETY: an initialised barrier (persistent instances).
            unsafe { tma::arrive(S::<D, BM, BN, NS, QB>::q_empty(base, (n - 1) % QB as u32)) };
        }
        for i in 0..tiles.saturating_sub(1) {
            if pingpong {
                named_sync::<256>(my_turn);
            }
            rescale_o!(alphas);
            let mut sn = [0.0f32; SN];
            issue_scores!(sn, ring + i + 1);
            issue_pv!(pf, ring + i);
            if pingpong {
                named_arrive::<256>(other_turn);
            }
            // `S_{j+1}` done (groups complete in order), `P_j·V_j` still running. Except in the
            // masked d = 256 instances: there the score modifiers' and the windows' registers on
            // top of the output's 128, `P_j`'s 16 and `S_{j+1}`'s 32 spilled (8 bytes), so they
            // wait for both products here and run the softmax after them, as before the overlap.
            if overlap {
                wgmma::wait::<1>();
            } else {
                wgmma::wait::<0>();
            }
            wgmma::settle(&mut sn);
            alphas = softmax_tile!(sn, j_begin + i as u32 + 1);
            // K_{j+1} is released here, after the softmax, and only by a leader whose row sums
            // are `!(sum < 0)` — every sum is (a sum of exponentials, NaN included), so the test
            // changes nothing but the schedule: the arrival (an `mbarrier` operation, which ptxas
            // keeps before the `wait_group 0` that follows it) now depends on every `ex2` of the
            // tile. ptxas schedules the wait freely among the arithmetic: with the release right
            // after `wait_group 1` it put `WARPGROUP.DEPBAR.LE gsb0, 0x0` in front of every score's
            // `MUFU.EX2` (only the row maxima ran under `P_j·V_j`), and with a plain release here
            // (a branch, which ptxas if-converts) in front of 9 to 32 of them, depending on d.
            // (The producer needs this K stage again only for tile j + 1 + NS.)
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let sums_done = !(state[0].sum < 0.0) & !(state[1].sum < 0.0);
            if sums_done {
                release_k(ring + i + 1);
            }
            wgmma::wait::<0>();
            finish_pv!(ring + i);
            pf = pack_p!(sn);
        }
        if PERSIST && QB == 1 && (leader || DYN) {
            // (One Q tile.) Every `Q·Kᵀ` of this query tile has completed: the producer may load
            // the next Q — and, in a dynamic instance, write the next tile into the slot this
            // thread read at the tile's top: there every thread arrives (its read ordered before
            // the producer's write, which a leader's arrival alone does not order: racecheck,
            // session 20 `call1`).
            // SAFETY: an initialised barrier (persistent instances).
            unsafe { tma::arrive(S::<D, BM, BN, NS, QB>::q_empty(base, 0)) };
        }
        if tiles > 0 {
            let i = tiles - 1;
            if pingpong {
                named_sync::<256>(my_turn);
            }
            rescale_o!(alphas);
            issue_pv!(pf, ring + i);
            if pingpong {
                named_arrive::<256>(other_turn);
            }
            wgmma::wait::<0>();
            finish_pv!(ring + i);
        }
        if !PERSIST && pingpong && wg == 0 {
            // Warpgroup 1's last hand-over opened a turn nobody takes: take it, so that the barrier
            // ends as it started.
            named_sync::<256>(my_turn);
        }

        // Normalise and store: each quad of lanes writes 8 consecutive columns of a row — to O from
        // registers, or, with `o_map` (`WgmmaConfig::o_by_tma`, outside context-parallel steps),
        // into the warpgroup's 64 rows of the Q tile (its last `Q·Kᵀ` has completed; in a
        // persistent block with one Q tile, of the output tile, since the next Q may be landing
        // in the Q tile; with two, the next Q lands in the other), 128-byte
        // swizzled as the map's boxes, from where one thread stores them with TMA (a box a
        // panel). Each thread's stores then cost shared-memory bandwidth only (conflict-free: the
        // 32 lanes of a store write 8 rows' chunk `dt ^ g`, 4 bytes each), where its global stores
        // stalled the warp on their registers and the block's exit on their drain (session 18, ncu:
        // at N = 1024 a sixth of the kernel's samples).
        // Row `half`'s state, its sum completed over the quad, and its result. (Macros, as above:
        // closures here changed the code ptxas got.)
        macro_rules! finish_row {
            ($half:expr) => {{
                let mut st = state[$half];
                st.sum = shuffle::sum4(st.sum);
                let res = st.finish(a.scale_log2);
                (st, res)
            }};
        }
        // A row's log-sum-exp, written by the quad's first lane (`row < len_q`).
        macro_rules! store_lse {
            ($row:expr, $lse:expr) => {{
                if t4 == 0 && a.lse != 0 {
                    let idx = seq.lse_index(a, h, $row);
                    // SAFETY: inside the log-sum-exp output (host sizing).
                    unsafe { global::store_f32(a.lse + 4 * idx, $lse) };
                }
            }};
        }
        if OTMA && p.o_map != 0 && a.partial_o == 0 {
            if PERSIST && QB == 1 {
                // The previous query tile's stores have read the output tile (its leader waited).
                named_sync::<128>(3 + wg);
            }
            // The lane's place, read again in a persistent block (`opaque`): the addresses
            // derived from it would otherwise be computed once before the query tiles' loop and
            // kept (spilled, at d ≥ 128) across it. The output rows go to the warpgroup's rows of
            // the Q tile, which its products no longer read, or of the output tile.
            let o_tile = if QB == 2 { q_tile } else { o_tile0 };
            let (g, t4, o_tile) =
                if PERSIST { (opaque(g), opaque(t4), opaque(o_tile)) } else { (g, t4, o_tile) };
            for half in 0..2 {
                let (_, res) = finish_row!(half);
                // (Rows past the sequence too: TMA leaves out what lies past the tensor.)
                let r = warp_in_wg * 16 + g + 8 * half as u32;
                for (panel, op) in o.iter().enumerate() {
                    for dt in 0..8 {
                        let x =
                            [op[4 * dt + 2 * half] * res.inv_sum, op[4 * dt + 2 * half + 1] * res.inv_sum];
                        // Row r of the panel; its 16-byte chunk dt swizzled by r mod 8 = g.
                        let at =
                            o_tile + panel as u32 * q_panel_bytes + 128 * r + 16 * (dt as u32 ^ g) + 4 * t4;
                        // SAFETY: inside the warpgroup's rows of the Q or output tile, which no
                        // product reads any more; 4-byte aligned.
                        unsafe { shared::store_u32(at, E::pack(x[0], x[1])) };
                    }
                }
                let row = m0 + wg * 64 + r;
                if row < seq.len_q {
                    store_lse!(row, res.lse);
                }
            }
            // The rows visible to the async proxy, then the warpgroup's (named barrier 3 + wg: 1
            // and 2 are the ping-pong's turns).
            wgmma::fence_proxy_async_shared();
            named_sync::<128>(3 + wg);
            if leader {
                let at = [(seq.q_start + (m0 + 64 * wg) as u64) as i32, h as i32, seq.batch as i32];
                // SAFETY: the map is valid (host: O's layout, boxes of 64 columns × 64 rows); each
                // panel's rows are 1024-byte aligned, written and fenced above; the block's shared
                // memory stays until the wait below has seen the copies read it.
                unsafe {
                    for panel in 0..DP as u32 {
                        tma::store_4d(
                            o_tile + panel * q_panel_bytes,
                            p.o_map,
                            [(64 * panel) as i32, at[0], at[1], at[2]],
                        );
                    }
                }
                tma::bulk_commit();
                if !late_read {
                    // (`late_read`: a prologue later, or before the block's exit, below.)
                    tma::bulk_wait_read::<0>();
                }
            }
        } else {
            let d = a.head_dim;
            for half in 0..2 {
                let (st, res) = finish_row!(half);
                let row = m0 + wg * 64 + warp_in_wg * 16 + g + 8 * half as u32;
                if row >= seq.len_q {
                    continue;
                }
                if a.partial_o != 0 {
                    // A step of context-parallel attention: this launch's row, merged with the running
                    // result of earlier steps (f32, in the partial rows) by log-sum-exp, goes back there,
                    // or, at the row's last contribution, to O and the log-sum-exp.
                    let idx = seq.lse_index(a, h, row);
                    let part_row = a.partial_o + 4 * idx * d as u64;
                    let (mut w_prev, mut w_cur, mut lse) = (0.0f32, res.inv_sum, res.lse);
                    if p.merge != 0 {
                        // SAFETY: row `idx` of the partial log-sum-exps, written by an earlier step.
                        let prev = unsafe { global::load_f32_rw(a.partial_lse + 4 * idx) };
                        let mut merge = SplitMerge::new();
                        merge.see(prev);
                        merge.see(res.lse);
                        let (wp, wc) = (merge.weight(prev), merge.weight(res.lse));
                        let fin = merge.finish(wp + wc);
                        (w_prev, w_cur, lse) = (wp * fin.inv_sum, wc * fin.inv_sum * res.inv_sum, fin.lse);
                    }
                    let last = row < p.final_rows;
                    if t4 == 0 {
                        let at = if last { a.lse } else { a.partial_lse };
                        if at != 0 {
                            // SAFETY: row `idx` of the log-sum-exp output or of the partial ones (host
                            // sizing).
                            unsafe { global::store_f32(at + 4 * idx, lse) };
                        }
                    }
                    let o_row = a.o + 2 * seq.offset(&a.o_strides, seq.q_start, row, h);
                    for (panel, op) in o.iter().enumerate() {
                        for dt in 0..8 {
                            let col = (WGMMA_PANEL as usize * panel + 8 * dt) as u32 + 2 * t4;
                            if col < d {
                                let mut x =
                                    [op[4 * dt + 2 * half] * w_cur, op[4 * dt + 2 * half + 1] * w_cur];
                                if p.merge != 0 {
                                    // SAFETY: columns col, col + 1 < d of partial row `idx`, 8-byte
                                    // aligned, written by an earlier step; only this lane rewrites them.
                                    let y = unsafe { global::load_f32x2_rw(part_row + 4 * col as u64) };
                                    x = [fma(y[0], w_prev, x[0]), fma(y[1], w_prev, x[1])];
                                }
                                if last {
                                    // SAFETY: row < len_q, columns col, col + 1 < d: inside O, 4-byte
                                    // aligned.
                                    unsafe { global::store_u32(o_row + 2 * col as u64, E::pack(x[0], x[1])) };
                                } else {
                                    // SAFETY: as for the load (host sizing).
                                    unsafe { global::store_f32x2(part_row + 4 * col as u64, x) };
                                }
                            }
                        }
                    }
                    continue;
                }
                store_lse!(row, res.lse);
                if TRAIN && t4 == 0 {
                    // What the backward recomputes the probabilities from in one FMA,
                    // `2^(s·scale_log2 + offset)/ℓ'`: the offset `−round(m·scale_log2)` is off from the
                    // exact `−m·scale_log2` by `δ = fma(m, scale_log2, offset)` (exact), which scales
                    // every such probability by `2^δ`, so `ℓ' = ℓ·2^δ`. With `|m·scale_log2| ≥`
                    // [`FUSED_LIMIT`] (`2^δ` could overflow) the offset is NaN: the backward then
                    // recomputes the row from its keys.
                    let step = st.current(a.scale_log2);
                    let (offset, l) = if st.max == f32::NEG_INFINITY {
                        (0.0, 0.0)
                    } else if st.max.abs() < max_fused {
                        (step.neg_max_scaled, st.sum * exp2(fma(st.max, a.scale_log2, step.neg_max_scaled)))
                    } else {
                        (f32::NAN, st.sum)
                    };
                    let idx = seq.lse_index(a, h, row);
                    // SAFETY: row `idx` of the residual rows (host sizing: one per log-sum-exp row), 8-byte
                    // aligned.
                    unsafe { global::store_f32x2(p.residual_rows + 8 * idx, [offset, l]) };
                }
                let o_offset = 2 * seq.offset(&a.o_strides, seq.q_start, row, h);
                let row_addr = a.o + o_offset;
                for (panel, op) in o.iter().enumerate() {
                    for dt in 0..8 {
                        let col = (WGMMA_PANEL as usize * panel + 8 * dt) as u32 + 2 * t4;
                        if col < d {
                            let x = [
                                op[4 * dt + 2 * half] * res.inv_sum,
                                op[4 * dt + 2 * half + 1] * res.inv_sum,
                            ];
                            let packed = E::pack(x[0], x[1]);
                            // SAFETY: row < len_q, columns col, col + 1 < d (d is a multiple of 8): inside
                            // O, 4-byte aligned.
                            unsafe { global::store_u32(row_addr + 2 * col as u64, packed) };
                            if TRAIN {
                                // O's residual: what rounding to the storage type dropped.
                                let hi = E::unpack(packed);
                                let lo = E::pack(x[0] - hi[0], x[1] - hi[1]);
                                // SAFETY: as for O: `o_lo` has O's layout (host validation).
                                unsafe { global::store_u32(p.o_lo + o_offset + 2 * col as u64, lo) };
                            }
                        }
                    }
                }
            }
        }
        if QB == 2 && (leader || DYN) && !(late_read && leader) {
            // This Q tile is free for the query tile after the next once its products have
            // completed and its output's stores have read it (the leader waited for them above,
            // or, with `late_read`, arrives in the next query tile after waiting). In a dynamic
            // instance the producer then also writes that tile into the slot this thread read at
            // the tile's top: there every thread arrives (its read ordered before the producer's
            // write, which a leader's arrival alone does not order: racecheck, session 20 `call1`).
            // SAFETY: an initialised barrier (persistent instances).
            unsafe { tma::arrive(S::<D, BM, BN, NS, QB>::q_empty(base, qb)) };
        }
        dyn_ring += (j_end - j_begin) as usize;
        n += 1;
    }
    if late_read && leader {
        // The last query tile's output stores have read the shared memory before the block ends.
        tma::bulk_wait_read::<0>();
    }
    if PERSIST && C == 2 && wg == 0 {
        // Warpgroup 1's last hand-over opened a turn nobody takes (see the ping-pong above).
        named_sync::<256>(my_turn);
    }
}

/// One exported entry per instance of [`crate::for_each_wgmma_instance!`] and element type.
macro_rules! wgmma_entries {
    (() $(($d:literal, $m:literal, $n:literal, $s:literal, $win:tt, $train:tt, $persist:tt))*) => {
        $( wgmma_entries!(@one F16, "f16", $d, $m, $n, $s, $win, $train, $persist);
           wgmma_entries!(@one Bf16, "bf16", $d, $m, $n, $s, $win, $train, $persist); )*
    };
    (@one $elem:ty, $dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, $win:tt, $train:tt,
     $persist:tt) => {
        const _: () = {
            /// Hopper flash-attention forward kernel (see the module docs).
            ///
            /// # Safety
            /// See [`flash_fwd_wgmma`].
            #[unsafe(export_name = crate::wgmma_kernel_name!($dt, $d, $m, $n, $s, $win, $train, $persist))]
            pub unsafe extern "ptx-kernel" fn entry(p: WgmmaParams) {
                const C: WgmmaConfig = WgmmaConfig {
                    head_dim: $d, block_m: $m, block_n: $n, stages: $s, window: $win, train: $train,
                    persistent: $persist,
                };
                // SAFETY: forwarded contract.
                unsafe {
                    flash_fwd_wgmma::<
                        $elem,
                        { C.head_dim as usize },
                        { C.block_m as usize },
                        { C.block_n as usize },
                        { C.stages as usize },
                        { C.consumers() as usize },
                        { (C.head_dim / WGMMA_PANEL) as usize },
                        { (C.block_n / 2) as usize },
                        { (C.block_n / 16) as usize },
                        { C.window != 0 },
                        { C.window == 2 },
                        { C.train != 0 },
                        { C.o_by_tma() },
                        { C.persistent != 0 },
                        { C.persistent == 2 },
                        { consumer_registers(C.consumers()) },
                        { C.q_tiles() as usize },
                    >(&p)
                }
            }
        };
    };
}

crate::for_each_wgmma_instance!(wgmma_entries);

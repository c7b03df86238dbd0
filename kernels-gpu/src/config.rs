//! Tile configurations of every kernel and of the CPU path: one type per kernel family, one place
//! that picks it, and the shared-memory budget checked at compile time. The kernel body reads these numbers and never
//! repeats them; the host picks the instance by head dimension.
//!
//! Why these tiles: see `kernels-gpu/NOTES.md` (the measured steps and the bench rows behind
//! each choice).

use crate::params::{
    BWD_BLOCK_M, BWD_PREP_BLOCK_N, BWD_PREP_THREADS, SIMT_KEY_CHUNK, SIMT_THREADS_PER_ROW, simt_shared_bytes,
};
use crate::registry::SIMT_HEAD_DIMS;

/// A tensor-core kernel configuration. Each warp owns `block_m / warps` query rows (a multiple
/// of 16, the `mma` tile height) and all `block_n` keys of a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmaConfig {
    /// Head dimension (exact: the kernel has no column predication).
    pub head_dim: u32,
    /// Query rows per block.
    pub block_m: u32,
    /// Keys per shared-memory tile.
    pub block_n: u32,
    /// Warps per block.
    pub warps: u32,
    /// Blocks per SM the register allocation must allow (CUDA's `__launch_bounds__(threads,
    /// min_blocks)`): `cargo xtask ptx` writes it into the PTX as `.maxntid` and
    /// `.minnctapersm`, and ptxas caps registers at `65536 / (threads · min_blocks)`.
    pub min_blocks: u32,
    /// V buffers in shared memory: 1 (`V_j` streams in while `S_j` is computed), or 2 (`V_{j+1}`
    /// streams in during the whole of iteration `j`, at the cost of one more V tile).
    pub v_stages: u32,
    /// How the instance's head dim relates to the problem's `d`: [`PAD_EXACT`],
    /// [`PAD_CHUNKS`] or [`PAD_ELEMENTS`].
    pub pad: u32,
    /// 1: a sliding-window instance (the window's bounds are applied and key tiles outside
    /// them skipped; chosen only for problems with a window, [`mma_window`]); 0: the others,
    /// which carry none of that logic.
    pub window: u32,
}

/// An exact instance: `d == head_dim` only, with none of the padding logic (the tuned kernels of
/// the headline head dims).
pub const PAD_EXACT: u32 = 0;
/// A padded instance for any `d ≤ head_dim` that is a multiple of 8, with 16-byte aligned rows:
/// whole 16-byte chunks are copied with `cp.async`, and the chunks at or past `d` are zero in
/// shared memory, never read from or written to device memory.
pub const PAD_CHUNKS: u32 = 1;
/// A padded instance for any `1 ≤ d ≤ head_dim` and rows aligned to the element only (odd head
/// dims such as 59 or 111, or strides that are not multiples of 8): tiles are copied element by
/// element (`ld.global` of 16 bits, then 16-byte shared stores), the columns past `d` zero,
/// and outputs stored element by element. Slower copies, the same tensor-core arithmetic.
pub const PAD_ELEMENTS: u32 = 2;
/// [`smallest_running`]'s wildcard for the padding kind.
const ANY_PAD: u32 = u32::MAX;

/// The largest dynamic shared memory per block on the project's target (H100/H200, compute
/// capability 9.0: 227 KiB). Other devices are checked at run time by the host.
pub const HOPPER_SHARED_LIMIT: u32 = 227 * 1024;

/// Shared memory of one SM of an A100 (sm_80), for all the blocks it holds.
pub const AMPERE_SHARED_PER_SM: u32 = 164 * 1024;

/// Shared memory the hardware reserves per resident block (sm_80 and later).
pub const SHARED_RESERVED_PER_BLOCK: u32 = 1024;

impl MmaConfig {
    /// Threads per block.
    pub const fn threads(&self) -> u32 {
        32 * self.warps
    }

    /// Query rows per warp.
    pub const fn rows_per_warp(&self) -> u32 {
        self.block_m / self.warps
    }

    /// Shared memory: one Q tile (`block_m` rows), one K tile and `v_stages` V tiles (`block_n`
    /// rows), [`MmaConfig::pitch`] 16-bit elements a row.
    pub const fn shared_bytes(&self) -> u32 {
        2 * self.pitch() * (self.block_m + (1 + self.v_stages) * self.block_n)
    }

    /// Elements per shared-memory tile row: the head dim rounded up to a power of two of at
    /// least 64 — whole groups of eight 16-byte chunks (what the XOR swizzle permutes, so every
    /// head dim gets a conflict-free layout), and a chunk count that divides the threads, so that
    /// each thread copies one fixed chunk column of a tile. (Exact instances have head dims that
    /// are 64, 128 or 256, where this is the head dim itself.)
    pub const fn pitch(&self) -> u32 {
        let mut p = 64;
        while p < self.head_dim {
            p *= 2;
        }
        p
    }

    /// Whether this instance runs a problem of head dim `d` (rows aligned as its padding kind
    /// requires: 16 bytes, except for [`PAD_ELEMENTS`]).
    pub const fn runs(&self, d: u32) -> bool {
        match self.pad {
            PAD_CHUNKS => d <= self.head_dim && d % 8 == 0,
            PAD_ELEMENTS => d >= 1 && d <= self.head_dim,
            _ => d == self.head_dim,
        }
    }

    /// Whether each warp keeps its Q fragments in registers for the whole block (loaded from
    /// shared memory once) instead of reloading them for every key tile: with one 16-row slab
    /// per warp and d ≤ 128 (at most 32 registers). With two slabs the accumulators leave no
    /// room for them (ptxas spills).
    pub const fn q_in_registers(&self) -> bool {
        self.rows_per_warp() == 16 && self.head_dim <= 128
    }

    /// Whether this is a decode instance: one warp, 16 query rows (see [`mma_decode`]).
    pub const fn is_decode(&self) -> bool {
        self.warps == 1 && self.block_m == 16
    }

    /// Whether the configuration is one the kernel can run: whole `mma` tiles per warp, a head
    /// dim of whole `k16` steps (exact instances: 64, 128 or 256, the tile row itself), tile rows
    /// every thread copies in whole passes, and the Hopper shared-memory budget.
    pub const fn is_valid(&self) -> bool {
        self.warps > 0
            && self.block_m % (16 * self.warps) == 0
            && self.block_n % 16 == 0
            && self.head_dim % 16 == 0
            && self.head_dim <= 256
            && (self.pad == PAD_CHUNKS
                || self.pad == PAD_ELEMENTS
                || (self.pad == PAD_EXACT && self.pitch() == self.head_dim))
            && self.threads() % (self.pitch() / 8) == 0
            && self.min_blocks > 0
            && (self.v_stages == 1 || self.v_stages == 2)
            && self.window <= 1
            && self.shared_bytes() <= HOPPER_SHARED_LIMIT
    }
}

pub use crate::registry::{MMA_CONFIGS, MMA_KERNELS};

const _: () = {
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        assert!(MMA_CONFIGS[i].is_valid(), "an MMA tile configuration breaks the kernel's constraints");
        i += 1;
    }
};

/// Index into [`MMA_CONFIGS`] of the configuration the library runs for head dim `head_dim`
/// when the query tiles are full: the first exact instance of that head dim if there is one
/// (the tuned default, `NOTES.md`), else the first padded instance of the smallest head dim that
/// holds it. Decode instances ([`MmaConfig::is_decode`]) are [`mma_decode`]'s. The shape is an
/// argument so that a choice by causality or length stays in this one place if measurements
/// ever call for it.
pub const fn mma_default(head_dim: u32, causal: bool, max_seqlen_q: usize) -> Option<usize> {
    let _ = (causal, max_seqlen_q);
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        let c = MMA_CONFIGS[i];
        if c.pad == PAD_EXACT && c.head_dim == head_dim && !c.is_decode() && c.window == 0 {
            return Some(i);
        }
        i += 1;
    }
    smallest_running(head_dim, PAD_CHUNKS, false, 0, 0, 0)
}

/// Index of the sliding-window instance for head dim `head_dim` (16-byte aligned rows): the
/// decode one (16 rows, one warp) when `decode` and one runs it, else the exact instance of that
/// head dim if there is one, else the padded one of the smallest head dim that holds it.
pub const fn mma_window(head_dim: u32, decode: bool) -> Option<usize> {
    if decode {
        if let Some(i) = smallest_running(head_dim, PAD_CHUNKS, true, 1, 0, 0) {
            return Some(i);
        }
    }
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        let c = MMA_CONFIGS[i];
        if c.pad == PAD_EXACT && c.head_dim == head_dim && !c.is_decode() && c.window == 1 {
            return Some(i);
        }
        i += 1;
    }
    smallest_running(head_dim, PAD_CHUNKS, false, 1, 0, 0)
}

/// Index of the element-wise instance ([`PAD_ELEMENTS`]) of the smallest head dim that holds
/// `head_dim`: the tensor-core path for head dims that are not multiples of 8 and for rows that
/// are not 16-byte aligned.
pub const fn mma_elementwise(head_dim: u32) -> Option<usize> {
    smallest_running(head_dim, PAD_ELEMENTS, false, 0, 0, 0)
}

/// Index of the decode instance for head dim `head_dim`: one warp and 16 query rows per block,
/// for problems whose query tiles hold at most 16 rows (one query token per sequence, its
/// query heads packed into the rows), so that no warp computes on empty rows and more blocks
/// share an SM to keep K/V loads in flight.
pub const fn mma_decode(head_dim: u32) -> Option<usize> {
    smallest_running(head_dim, PAD_CHUNKS, true, 0, 0, 0)
}

/// The first instance of the smallest head dim that runs `head_dim`, with padding kind `pad`
/// (or any, for [`ANY_PAD`]), decode or not, and these tiles (0: any).
const fn smallest_running(
    head_dim: u32,
    pad: u32,
    decode: bool,
    window: u32,
    block_m: u32,
    block_n: u32,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        let c = MMA_CONFIGS[i];
        let tiles = (block_m == 0 || c.block_m == block_m) && (block_n == 0 || c.block_n == block_n);
        let kind = (pad == ANY_PAD || c.pad == pad) && c.window == window;
        if kind && c.is_decode() == decode && c.runs(head_dim) && tiles {
            best = match best {
                Some(b) if MMA_CONFIGS[b].head_dim <= c.head_dim => Some(b),
                _ => Some(i),
            };
        }
        i += 1;
    }
    best
}

/// Index of the configuration with these tiles among those of the kind of `MMA_CONFIGS[base]`
/// (the instance [`mma_default`] or [`mma_elementwise`] picked for `head_dim`: the same head dim
/// and padding kind), else, for 16-byte aligned rows, among the decode instances that run it,
/// if one is instantiated.
pub const fn mma_find(base: usize, head_dim: u32, block_m: u32, block_n: u32) -> Option<usize> {
    if block_m == 0 || block_n == 0 || base >= MMA_CONFIGS.len() {
        return None;
    }
    let base = MMA_CONFIGS[base];
    let mut i = 0;
    while i < MMA_CONFIGS.len() {
        let c = MMA_CONFIGS[i];
        let same_kind = c.head_dim == base.head_dim && c.pad == base.pad && c.window == base.window;
        if same_kind && c.block_m == block_m && c.block_n == block_n {
            return Some(i);
        }
        i += 1;
    }
    if base.pad == PAD_ELEMENTS || base.window == 1 {
        return None;
    }
    smallest_running(head_dim, ANY_PAD, true, 0, block_m, block_n)
}

/// A tensor-core backward configuration (FlashAttention-2's algorithm; `gpu/flash_bwd.rs`).
/// The main kernel's block owns `block_n = 16·warps / col_groups` keys
/// ([`BwdConfig::col_groups`]: 2 above d = 128) and their dK and dV in registers for the
/// whole walk over the query tiles ([`BWD_BLOCK_M`] rows a step) that see them; its warp
/// grids for the three products are [`BwdConfig::score_key_warps`],
/// [`BwdConfig::kv_key_warps`] and [`BwdConfig::dq_query_warps`]. Instances are padded: they run
/// every head dim `d ≤ head_dim` that is a multiple of 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BwdConfig {
    /// Head dimension the instance computes with (a problem's `d` is padded up to it).
    pub head_dim: u32,
    /// Warps per block of the main kernel.
    pub warps: u32,
    /// Blocks per SM its register allocation must allow (launch bounds, as [`MmaConfig`]).
    pub min_blocks: u32,
    /// 1: a sliding-window instance (as [`MmaConfig::window`]; chosen by [`bwd_window`]): windows
    /// and every score modifier. 2: an ALiBi instance ([`bwd_alibi`], sm_90a): the plain
    /// instance's walk and staged dQ adds with ALiBi on every score, for problems whose only
    /// feature beyond causal is ALiBi. 3: a window instance for windows without score modifiers
    /// ([`bwd_window_only`], sm_90a, d = 128): the window instance's code with the modifiers
    /// compiled out (1–2% faster on windows alone, `NOTES.md` b44).
    pub window: u32,
}

impl BwdConfig {
    /// Column groups of the main kernel: 2 above d = 128 (the d = 256 instance), else 1. Each
    /// key's dK and dV then live in two warpgroups (sm_90a) that split the head dim's columns
    /// between them, 128 each, so that a warpgroup's accumulators stay those of d = 128; both
    /// compute the same scores (each stores half of P and dS). On `mma.sync` the block's warps
    /// split its keys and columns as for every instance; the groups only halve the keys a block.
    pub const fn col_groups(&self) -> u32 {
        if self.head_dim > 128 { 2 } else { 1 }
    }

    /// Whether the main kernel takes its Q and dO tiles by TMA on `wgmma` (sm_90a), from the
    /// tensor maps the host passes (`BwdParams::maps`): in the column-group instances (d = 256),
    /// where it measured −1.0 to −3.3% time (NOTES b31); at d = 64 and 128 it measured −1.3 to
    /// +2.3%, so they keep `cp.async` and their code is compiled without it.
    pub const fn tma_query_tiles(&self, wgmma: bool) -> bool {
        wgmma && self.col_groups() > 1
    }

    /// Whether the instance exists in the sm_90a PTX only: the column-group instances (211 KiB
    /// of shared memory), the ALiBi instances (staged dQ adds, which need `wgmma`) and the
    /// window-only instances (`Auto` takes them on sm_90a only, where they were measured).
    pub const fn sm90a_only(&self) -> bool {
        self.col_groups() > 1 || self.window >= 2
    }

    /// Whether the main kernel walks with a window (kinds 1 and 3: each key block visits only the
    /// query tiles whose windows hold its keys, `mask::query_range`). These instances read their
    /// grid head-major only (`x` = key tile, `y` = K/V head, `z` = sequence: reading it through
    /// the key-major selection cost their walk 1–3%, NOTES b40), so the planner never orders
    /// them key-major; the kernel's `WIN` parameter and the planner both ask this function.
    pub const fn windowed_walk(&self) -> bool {
        self.window == 1 || self.window == 3
    }

    /// Whether the main kernel counts down the dQ conversion's tile counters
    /// (`BwdParams::dq_ready`, sm_90a) at the end of its walk; the host sets the counters only
    /// for these instances. The d = 64 window walk, where they measured −4.6% (H200) and −5.2%
    /// (H100) backward time at window 1024 (NOTES b47). Not the others: at d = 128 they
    /// measured −0.6 to −3.7% on an H100 but −0.4 to +1.7% on an H200 (its faster conversion
    /// leaves less to hide than the blocks' end-of-walk barrier and fence cost), d = 128's
    /// window instance with score modifiers spilled 8 bytes with them, and d = 32 and 256 were
    /// not measured.
    pub const fn tile_counters(&self) -> bool {
        self.windowed_walk() && self.head_dim == 64
    }

    /// Keys per block of the main kernel: 16 a warp, shared by [`BwdConfig::col_groups`].
    pub const fn block_n(&self) -> u32 {
        16 * self.warps / self.col_groups()
    }

    /// Threads per block of the main kernel.
    pub const fn threads(&self) -> u32 {
        32 * self.warps
    }

    /// Elements per shared tile row (as [`MmaConfig::pitch`]).
    pub const fn pitch(&self) -> u32 {
        let mut p = 64;
        while p < self.head_dim {
            p *= 2;
        }
        p
    }

    /// Warps along the keys in the score products (`S = Q·Kᵀ`, `dP = dO·Vᵀ`). On `mma.sync`
    /// (`wgmma` false) the block's [`BWD_BLOCK_M`] × `block_n` scores are split 2 × `warps / 2`,
    /// each warp 32 queries × 32 keys (16 accumulator tiles for S and dP together: independent
    /// `mma` chains). On `wgmma` (sm_90a) each warpgroup computes all [`BWD_BLOCK_M`] = 64
    /// queries × [`BWD_WGMMA_KEYS`] keys (`m64n64k16`, the preprocessing kernel's shape), each
    /// of its warps 16 queries of them: `warps / 4` along the keys.
    pub const fn score_key_warps(&self, wgmma: bool) -> u32 {
        if wgmma { self.warps / 4 / self.col_groups() } else { self.warps / 2 }
    }

    /// Query tiles (16 rows) a warp of the score products: on `wgmma` one (each warpgroup of a
    /// column group computes all [`BWD_BLOCK_M`] queries, 16 a warp), on `mma.sync` 2.
    pub const fn score_query_tiles(&self, wgmma: bool) -> u32 {
        let groups = if wgmma { self.col_groups() } else { 1 };
        BWD_BLOCK_M / 16 / (self.warps / groups / self.score_key_warps(wgmma))
    }

    /// Key tiles (8 keys) a warp of the score products.
    pub const fn score_key_tiles(&self, wgmma: bool) -> u32 {
        self.block_n() / 8 / self.score_key_warps(wgmma)
    }

    /// Warps along the keys in the key-side products (`dV += Pᵀ·dO`, `dK += dSᵀ·Q`): 32 keys
    /// each, the head dim split over the rest.
    pub const fn kv_key_warps(&self) -> u32 {
        self.block_n() / 32
    }

    /// Warps along the queries in `dQ += dS·K`: 16 queries each, the head dim split over the
    /// rest.
    pub const fn dq_query_warps(&self) -> u32 {
        BWD_BLOCK_M / 16
    }

    /// Whether the main kernel computes `dQ += dS·K` on `wgmma` (sm_90a): where each warpgroup
    /// owns 64 of the head dim's columns (d = 64 on one warpgroup, d = 128 on two).
    pub const fn dq_on_wgmma(&self, wgmma: bool) -> bool {
        dq_on_wgmma(wgmma, self.head_dim, self.warps)
    }

    /// 64-column panels of dQ each warpgroup computes, where [`BwdConfig::dq_on_wgmma`]: one
    /// group of `m64n64k16` each, one after the other (2 at d = 256, else 1).
    pub const fn dq_panels(&self) -> u32 {
        dq_panels(self.head_dim, self.warps)
    }

    /// Whether its warps stage their dQ share (16 queries × 64 columns, f32) in shared memory
    /// and add it to the accumulator with one bulk reduction per row (`cp.reduce.async.bulk`;
    /// in deterministic mode they add with `red` as elsewhere): [`dq_staged`].
    pub const fn dq_staged(&self, wgmma: bool) -> bool {
        dq_staged(wgmma, self.head_dim, self.warps, self.window)
    }

    /// Shared memory of the main kernel: K and V tiles (`block_n` rows), two stages of Q and dO
    /// tiles ([`BWD_BLOCK_M`] rows), the P and dS tiles (`BWD_BLOCK_M × block_n`, 16-bit),
    /// two stages of the query rows' statistics (log-sum-exp, `1/Σ P`, pivot, `D − pivot`: 16
    /// bytes a row) and, with [`BwdConfig::dq_staged`], each warp's dQ staging rows (16 of
    /// [`BWD_DQ_STAGE_PITCH`] f32); with `wgmma` (the sm_90a PTX) 1024 bytes of alignment
    /// slack besides (the tiles `wgmma` reads start on 1024-byte boundaries) and, with
    /// [`BwdConfig::tma_query_tiles`], the two stages' TMA barriers.
    pub const fn shared_bytes(&self, wgmma: bool) -> u32 {
        wgmma_slack(wgmma)
            + 2 * self.pitch() * (2 * self.block_n() + 4 * BWD_BLOCK_M)
            + 2 * 2 * self.block_n() * BWD_BLOCK_M
            + 2 * 16 * BWD_BLOCK_M
            + if self.tma_query_tiles(wgmma) { BWD_STAGE_BARRIER_BYTES } else { 0 }
            + if self.dq_staged(wgmma) { self.warps * 16 * 4 * BWD_DQ_STAGE_PITCH } else { 0 }
    }

    /// Stages of K and V tiles in the preprocessing kernel: one on `wgmma` at tile rows of 128
    /// elements or more (d > 64: three blocks of 65 KiB share an SM instead of two of 97 KiB,
    /// the kernel being issue-bound at 8 warps per SM; the next tile's copies then overlap only
    /// the probabilities), two otherwise.
    pub const fn prep_stages(&self, wgmma: bool) -> u32 {
        if wgmma && self.pitch() >= 128 { 1 } else { 2 }
    }

    /// Shared memory of the preprocessing kernel: Q and dO tiles, and
    /// [`BwdConfig::prep_stages`] stages of K and V tiles ([`BWD_PREP_BLOCK_N`] rows); with
    /// `wgmma`, the slack of [`BwdConfig::shared_bytes`].
    pub const fn prep_shared_bytes(&self, wgmma: bool) -> u32 {
        wgmma_slack(wgmma)
            + 2 * self.pitch() * (2 * BWD_BLOCK_M + 2 * self.prep_stages(wgmma) * BWD_PREP_BLOCK_N)
    }

    /// Blocks per SM the main kernel's launch bounds ask for in the PTX of one target: its
    /// `min_blocks` on Hopper (`wgmma`); on sm_80 at most as many as the A100's shared memory
    /// per SM ([`AMPERE_SHARED_PER_SM`]) holds, since a bound that no SM can reach would only
    /// take registers from the kernel (the d = 32 and 64 instances ask for three, of which an
    /// A100 fits two).
    pub const fn launch_min_blocks(&self, wgmma: bool) -> u32 {
        let fit = AMPERE_SHARED_PER_SM / (self.shared_bytes(false) + SHARED_RESERVED_PER_BLOCK);
        if wgmma || self.min_blocks <= fit {
            self.min_blocks
        } else if fit > 0 {
            fit
        } else {
            1
        }
    }

    /// Blocks per SM the residual preprocessing kernel's registers allow (launch bounds): 3 (170
    /// registers), or 1 at d = 256, whose O, dO and O's residual tiles (96 KiB, 129 KiB of
    /// shared memory in all) let one block on an SM anyway and whose product spills at 170.
    pub const fn prep_res_min_blocks(&self) -> u32 {
        if self.col_groups() > 1 { 1 } else { 3 }
    }

    /// Whether this instance runs head dim `d`.
    pub const fn runs(&self, d: u32) -> bool {
        d <= self.head_dim && d % 8 == 0 && d > 0
    }

    /// Whether the kernels can run it: whole 16-wide `k` steps, a warp count whose dQ split
    /// is whole (4 or 8 warps), tile rows every thread copies in whole passes, and the Hopper
    /// shared-memory budget.
    pub const fn is_valid(&self) -> bool {
        self.head_dim % 16 == 0
            && self.head_dim <= 256
            && (self.warps == 4 || self.warps == 8)
            && self.threads() % (self.pitch() / 8) == 0
            && BWD_PREP_THREADS % (self.pitch() / 8) == 0
            && BWD_BLOCK_M == 64
            && self.block_n() / self.score_key_warps(true) == BWD_WGMMA_KEYS
            && BWD_PREP_BLOCK_N == BWD_WGMMA_KEYS
            && (self.head_dim / 8) % (2 * (self.warps / self.kv_key_warps())) == 0
            && (self.head_dim / 8) % (2 * (self.warps / self.dq_query_warps())) == 0
            && self.min_blocks > 0
            && self.window <= 3
            && self.shared_bytes(true) <= HOPPER_SHARED_LIMIT
            && self.prep_shared_bytes(true) <= HOPPER_SHARED_LIMIT
    }
}

/// [`BwdConfig::dq_on_wgmma`] of an instance with `head_dim` and `warps`: each warpgroup owns
/// whole 64-column panels of dQ (d = 64 on one warpgroup, 128 and 256 on two).
pub const fn dq_on_wgmma(wgmma: bool, head_dim: u32, warps: u32) -> bool {
    wgmma && head_dim % 64 == 0 && (head_dim / 64) % (warps / 4) == 0
}

/// [`BwdConfig::dq_panels`] of an instance with `head_dim` and `warps`.
pub const fn dq_panels(head_dim: u32, warps: u32) -> u32 {
    let p = head_dim / 64 / (warps / 4);
    if p > 1 { p } else { 1 }
}

/// [`BwdConfig::dq_staged`]: the plain (`window` 0) and ALiBi (2) instances with dQ on `wgmma`
/// over two warpgroups (d = 128), where it cut the backward's time 3–5% (session 14, `NOTES.md`
/// b21). Not the one-warpgroup d = 64 block (+4–8% time without a causal mask) nor the window
/// instances, with modifiers or without (+2–4%, b21; +1–2% on the window-only instance, b44),
/// which add with the lanes' `red`s.
pub const fn dq_staged(wgmma: bool, head_dim: u32, warps: u32, window: u32) -> bool {
    dq_on_wgmma(wgmma, head_dim, warps)
        && dq_panels(head_dim, warps) == 1
        && warps == 8
        && (window == 0 || window == 2)
}

/// f32 per row of a warp's dQ staging rows: 64 columns and 4 of padding, so that the rows
/// start 16 bytes apart modulo 128 and the lanes' pair stores (8 rows × 4 lanes) meet no bank
/// twice beyond the two wavefronts 256 bytes need; 272-byte rows keep the bulk reduction's
/// 16-byte source alignment.
pub const BWD_DQ_STAGE_PITCH: u32 = 68;

/// Bytes of the backward main kernel's TMA barriers ([`BwdConfig::tma_query_tiles`]): one
/// 8-byte `mbarrier` for each of the two stages of Q and dO, after the statistics.
pub const BWD_STAGE_BARRIER_BYTES: u32 = 16;

/// The backward's alignment slack: 1024 bytes where its kernels run `wgmma` (sm_90a), none
/// before.
const fn wgmma_slack(wgmma: bool) -> u32 {
    if wgmma { 1024 } else { 0 }
}

/// Keys per `wgmma` score product of the backward on sm_90a (`m64n64k16`): one warpgroup's
/// share of the main kernel's block, and the preprocessing kernel's key tile. Both kernels
/// compute the scores with this one instruction shape and the same `k` order, so that they
/// agree bit for bit (the numerics' requirement, `NOTES.md`).
pub const BWD_WGMMA_KEYS: u32 = 64;

pub use crate::registry::{BWD_CONFIGS, BWD_KERNELS, BWD_PREP_KERNELS, BWD_PREP_RES_KERNELS};

const _: () = {
    let mut i = 0;
    while i < BWD_CONFIGS.len() {
        assert!(BWD_CONFIGS[i].is_valid(), "a backward configuration breaks the kernels' constraints");
        i += 1;
    }
};

/// Index of the backward's window instance without score modifiers for head dim `head_dim`
/// (window kind 3): only where it computes the same padded head dim as [`bwd_window`]'s
/// instance.
pub const fn bwd_window_only(head_dim: u32) -> Option<usize> {
    match (bwd_smallest(head_dim, 3), bwd_window(head_dim)) {
        (Some(a), Some(w)) if BWD_CONFIGS[a].head_dim == BWD_CONFIGS[w].head_dim => Some(a),
        _ => None,
    }
}

/// Index into [`BWD_CONFIGS`] of the instance that runs head dim `head_dim`: the smallest
/// instantiated head dim that holds it.
pub const fn bwd_default(head_dim: u32) -> Option<usize> {
    bwd_smallest(head_dim, 0)
}

/// Index of the backward's sliding-window instance for head dim `head_dim` (as
/// [`bwd_default`], among the window instances).
pub const fn bwd_window(head_dim: u32) -> Option<usize> {
    bwd_smallest(head_dim, 1)
}

/// Index of the backward's ALiBi instance for head dim `head_dim`: only where it computes the
/// same padded head dim as [`bwd_window`]'s instance (a smaller head dim is not padded further to
/// reach it).
pub const fn bwd_alibi(head_dim: u32) -> Option<usize> {
    match (bwd_smallest(head_dim, 2), bwd_window(head_dim)) {
        (Some(a), Some(w)) if BWD_CONFIGS[a].head_dim == BWD_CONFIGS[w].head_dim => Some(a),
        _ => None,
    }
}

/// Index of the backward instance with `block_n` keys a block among those of the head dim and
/// window kind of `BWD_CONFIGS[base]` (the instance [`bwd_default`] or [`bwd_window`] picked):
/// a tile override's choice.
pub const fn bwd_find(base: usize, block_n: u32) -> Option<usize> {
    if base >= BWD_CONFIGS.len() {
        return None;
    }
    let b = BWD_CONFIGS[base];
    let mut i = 0;
    while i < BWD_CONFIGS.len() {
        let c = BWD_CONFIGS[i];
        if c.head_dim == b.head_dim && c.window == b.window && c.block_n() == block_n {
            return Some(i);
        }
        i += 1;
    }
    None
}

const fn bwd_smallest(head_dim: u32, window: u32) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut i = 0;
    while i < BWD_CONFIGS.len() {
        let c = BWD_CONFIGS[i];
        if c.runs(head_dim) && c.window == window {
            best = match best {
                Some(b) if BWD_CONFIGS[b].head_dim <= c.head_dim => Some(b),
                _ => Some(i),
            };
        }
        i += 1;
    }
    best
}

/// The general (CUDA-core) kernel's tile choice: query rows per block and keys per shared tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimtConfig {
    /// Head dimension the kernel is instantiated for (a problem's `d` is padded up to it).
    pub padded_dim: u32,
    /// Query rows per block (4 threads per row).
    pub block_m: u32,
    /// Keys per shared-memory tile (a multiple of [`SIMT_KEY_CHUNK`]).
    pub block_n: u32,
}

/// Query rows per block the general kernel can run (4 threads per row, ≤ 256 threads).
pub const SIMT_BLOCK_M: [u32; 3] = [16, 32, 64];
/// The largest `block_n` of the general kernel.
pub const SIMT_MAX_BLOCK_N: u32 = 256;

impl SimtConfig {
    /// The default tiles for a head dimension (`None` above 256): more rows per block where
    /// the accumulator is small; fewer keys per tile where the K/V tiles are large (d = 256), so
    /// that two blocks fit on an SM.
    pub const fn default_for(head_dim: u32) -> Option<SimtConfig> {
        let mut i = 0;
        while i < SIMT_HEAD_DIMS.len() {
            let p = SIMT_HEAD_DIMS[i];
            if p >= head_dim {
                let block_m = if p <= 64 { 64 } else { 32 };
                let block_n = if p <= 128 { 64 } else { 32 };
                return Some(SimtConfig { padded_dim: p, block_m, block_n });
            }
            i += 1;
        }
        None
    }

    /// Threads per block.
    pub const fn threads(&self) -> u32 {
        self.block_m * SIMT_THREADS_PER_ROW
    }

    /// Dynamic shared memory per block.
    pub const fn shared_bytes(&self) -> u32 {
        simt_shared_bytes(self.block_m, self.block_n, self.padded_dim)
    }

    /// Whether the kernel can run these tiles (before the device's shared-memory limit).
    pub const fn tiles_valid(block_m: u32, block_n: u32) -> bool {
        let mut ok_m = false;
        let mut i = 0;
        while i < SIMT_BLOCK_M.len() {
            ok_m |= SIMT_BLOCK_M[i] == block_m;
            i += 1;
        }
        ok_m && block_n > 0 && block_n % SIMT_KEY_CHUNK == 0 && block_n <= SIMT_MAX_BLOCK_N
    }

    /// The keys a block treats as one unit for masking and accumulation: non-finite values in V
    /// reach every row of the block that visits their chunk (see the README).
    pub const fn key_chunk(&self) -> u32 {
        SIMT_KEY_CHUNK
    }
}

/// A Hopper forward configuration (`gpu/flash_wgmma.rs`, sm_90a only): `block_m` query rows per
/// block in two consumer warpgroups of 64 rows, `block_n` keys per tile, `stages` K and V tiles
/// in flight, loaded by TMA from a producer warpgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgmmaConfig {
    /// Head dimension of the tiles: a multiple of 64 (whole 128-byte swizzled panels); smaller
    /// problem head dims (multiples of 8) are zero-filled by TMA past `d`.
    pub head_dim: u32,
    /// Query rows per block (64 per consumer warpgroup).
    pub block_m: u32,
    /// Keys per tile (the N of `S = Q·Kᵀ`'s `wgmma`): 128, or 64 for head dims above 128 (a
    /// consumer thread holds `head_dim / 2` output accumulators and two tiles of `block_n / 2`
    /// scores — the current tile's and the next one's in flight — within 240 registers); also
    /// 80 at d = 256 (its default: −2 to −11% time against 64, `kernels-gpu/NOTES.md` v39),
    /// 112 at d = 192 and 176 at d = 128 (one query tile a block, a tile override away).
    pub block_n: u32,
    /// K and V tiles in flight (a ring of `stages` buffers each).
    pub stages: u32,
    /// 1: a masked instance (sliding windows — key tiles outside every row's window are never
    /// loaded — and score modifiers; chosen only for problems with one, [`wgmma_masked`]);
    /// 2: the same without the intra-warpgroup overlap (the next tile's softmax under this
    /// tile's `P·V`), for softcaps ([`wgmma_softcap`]): with the overlap the softcap's forward
    /// ran 15% slower (session 10, `kernels-gpu/NOTES.md` v25), ALiBi and windows 2–18% faster;
    /// 0: the others.
    pub window: u32,
    /// 1: a training instance (of any `window` kind): every probability in the two-step form
    /// `2^((s − m)·scale_log2)` (a row's largest score exactly 1, as the backward needs), and
    /// the epilogue writes what the backward needs to skip its preprocessing pass over the keys
    /// — O's residual `O_lo = round(O_f32 − O)` and each row's probability offset and sum
    /// ([`crate::params::WgmmaParams::residual_rows`]); chosen by [`wgmma_train`] for
    /// `Device::attention_for_backward`, masked problems included (their backward's residual
    /// preprocessing kernel is the window instance's). 0: the others.
    pub train: u32,
    /// 1: a persistent instance (plain inference only: `window` and `train` 0): launched with
    /// a grid of about one block an SM (`WgmmaParams::tiles`), each block walks query tiles one
    /// after the other, its producer loading the next tile's Q and K/V while the consumers
    /// finish the current one (its last `P·V`, the epilogue) — at d ≤ 128 into the second of two
    /// Q tiles, [`WgmmaConfig::q_tiles`] —, its output staged for its TMA stores in a tile of
    /// its own ([`WgmmaConfig::output_tile_bytes`]) or, with two Q tiles, in its own Q tile.
    /// For fixed-length problems
    /// without a causal mask (every query tile the same work; the planner's
    /// [`wgmma_persistent`]). 2: the same for causal problems, each block taking its next tile
    /// from a launch counter (`WgmmaParams::tile_counter`), a head's longest tiles first.
    /// 0: one query tile a block.
    pub persistent: u32,
}

/// Rows per consumer warpgroup of the Hopper kernel (the M of `wgmma`).
pub const WGMMA_ROWS: u32 = 64;
/// Columns per 128-byte swizzled panel (16-bit elements).
pub const WGMMA_PANEL: u32 = 64;

impl WgmmaConfig {
    /// Consumer warpgroups.
    pub const fn consumers(&self) -> u32 {
        self.block_m / WGMMA_ROWS
    }

    /// Whether the instance runs one query tile of 128 rows a block: what the training forward,
    /// context-parallel steps and outputs stored from registers take (the persistent and
    /// 192-row instances' tests do not reach their register-store epilogue).
    pub const fn one_tile_128(&self) -> bool {
        self.persistent == 0 && self.block_m == 128
    }

    /// Whether the instance stores its output tiles by TMA from shared memory (given O's tensor
    /// map, `WgmmaParams::o_map`): the inference instances, except d = 128's masked instance
    /// with the overlap, which spilled 8 bytes with that epilogue beside the other (the training
    /// instances also write O's residual, from registers).
    pub const fn o_by_tma(&self) -> bool {
        self.train == 0 && !(self.window == 1 && self.head_dim == 128)
    }

    /// Threads per block: the consumer warpgroups, then one producer warpgroup (one of its
    /// threads issues the TMA loads; the warpgroup gives its registers to the consumers with
    /// `setmaxnreg`, which works per warpgroup).
    pub const fn threads(&self) -> u32 {
        128 * (self.consumers() + 1)
    }

    /// Bytes of one tile of `rows` rows in 128-byte panels.
    pub const fn tile_bytes(&self, rows: u32) -> u32 {
        2 * rows * self.head_dim
    }

    /// Shared memory: 1024 bytes of alignment slack (swizzled tiles start on 1024-byte
    /// boundaries), the Q tiles, `stages` K and V tiles, and the barriers (8 bytes each: Q, and a
    /// full and an empty barrier per K and V stage, and one for a variable-length batch's last,
    /// partial V tile, which lands there before the producer zeroes its borrowed rows; a
    /// persistent instance's second Q-full barrier, its Q-empty barriers and tile slots).
    pub const fn shared_bytes(&self) -> u32 {
        let end =
            self.q_tiles() * self.tile_bytes(self.block_m) + 2 * self.stages * self.tile_bytes(self.block_n);
        if self.output_tile_bytes() != 0 {
            1024 + (end + self.barrier_bytes()).next_multiple_of(1024) + self.output_tile_bytes()
        } else {
            1024 + end + self.barrier_bytes()
        }
    }

    /// Bytes of the barriers (a persistent instance's Q-empty barriers and tile slots among
    /// them, and with two Q tiles the second Q-full barrier).
    pub const fn barrier_bytes(&self) -> u32 {
        8 * (2 + 4 * self.stages + if self.q_tiles() == 2 { 5 } else { self.persistent })
    }

    /// Bytes of the output tile of a persistent instance with one Q tile (the Q tile's
    /// layout), 0 for the others.
    pub const fn output_tile_bytes(&self) -> u32 {
        if self.persistent != 0 && self.q_tiles() == 1 { self.tile_bytes(self.block_m) } else { 0 }
    }

    /// Q tiles: 2 in the persistent instances at d ≤ 128 — query tile `n` in Q tile `n % 2`, so
    /// that the next tile's Q lands while the current one runs (with one, its load starts only
    /// once the current tile's last `Q·Kᵀ` has completed), each tile's output staged in its own
    /// Q tile —; 1 in the others (d = 192: not tried). Against one Q tile (ncu, H100, session
    /// 35): d = 128 −0.5 / −3.3% at N = 1024 (non-causal / causal), −0.3 / −0.7% at 16384; d = 64
    /// −2 / −7% at 1024 (session 34). `kernels-gpu/NOTES.md` v42, v42b.
    pub const fn q_tiles(&self) -> u32 {
        if self.persistent != 0 && self.head_dim <= 128 { 2 } else { 1 }
    }

    /// Whether this instance runs head dim `d` (16-byte rows: a multiple of 8).
    pub const fn runs(&self, d: u32) -> bool {
        d <= self.head_dim && d % 8 == 0 && d > self.head_dim - WGMMA_PANEL
    }

    /// Whether the kernel can run the configuration.
    pub const fn is_valid(&self) -> bool {
        self.head_dim % WGMMA_PANEL == 0
            && self.head_dim <= 256
            && self.block_m % WGMMA_ROWS == 0
            && (self.consumers() == 2 || self.consumers() == 3)
            && (self.block_n == 128
                || self.block_n == 64
                || (self.block_n == 176 && self.head_dim <= 128)
                || (self.block_n == 80 && self.head_dim > 128)
                || (self.block_n == 112 && self.head_dim == 192))
            && self.stages >= 1
            && self.window <= 2
            && self.train <= 1
            // (Persistent: plain inference instances whose output tile fits beside the rest, d ≤
            // 192. At d = 256 a variant staging its output in its one Q tile ran 2–4% slower than
            // the one-tile instance at N ≥ 4096, session 19 `call5`, and two Q tiles do not fit
            // beside 80-key stages: not instantiated.)
            && (self.persistent == 0
                || (self.persistent <= 2 && self.window == 0 && self.train == 0 && self.head_dim <= 192))
            && self.shared_bytes() <= HOPPER_SHARED_LIMIT
    }
}

pub use crate::registry::{WGMMA_CONFIGS, WGMMA_KERNELS};

const _: () = {
    let mut i = 0;
    while i < WGMMA_CONFIGS.len() {
        assert!(WGMMA_CONFIGS[i].is_valid(), "a Hopper tile configuration breaks the kernel's constraints");
        i += 1;
    }
};

/// The Hopper instance for head dim `d`, if one runs it.
pub const fn wgmma_default(head_dim: u32) -> Option<usize> {
    wgmma_find(head_dim, 0, 0)
}

/// The Hopper training instance for head dim `d` of the inference instance kind `window`
/// ([`WgmmaConfig::window`]: 0 plain, 1 masked, 2 softcap), if one is instantiated:
/// [`WgmmaConfig::train`].
pub const fn wgmma_train(head_dim: u32, window: u32) -> Option<usize> {
    wgmma_find(head_dim, window, 1)
}

/// The masked Hopper instance (sliding windows, score modifiers) for head dim `d`.
pub const fn wgmma_masked(head_dim: u32) -> Option<usize> {
    wgmma_find(head_dim, 1, 0)
}

/// The masked Hopper instance for problems with a softcap: the one without the intra-warpgroup
/// overlap ([`WgmmaConfig::window`] 2), or the masked one where none is instantiated (d = 256,
/// whose masked instance does not overlap either).
pub const fn wgmma_softcap(head_dim: u32) -> Option<usize> {
    match wgmma_find(head_dim, 2, 0) {
        Some(i) => Some(i),
        None => wgmma_find(head_dim, 1, 0),
    }
}

/// The persistent Hopper instance for head dim `d` ([`WgmmaConfig::persistent`]), if one is
/// instantiated: the static one without a causal mask, the dynamic one (`persistent` 2: tiles
/// taken from a counter, longest first) with one.
pub const fn wgmma_persistent(head_dim: u32, causal: bool) -> Option<usize> {
    wgmma_find_in(head_dim, 0, 0, if causal { 2 } else { 1 }, 0)
}

/// The instance of the same kind as instance `index` (head dims, `window`, `train`,
/// `persistent`) with `block_m` query rows a tile, if one is instantiated (the default
/// instances are the first of their kind; a tile override picks among the rest).
pub const fn wgmma_with_rows(index: usize, block_m: u32) -> Option<usize> {
    wgmma_with_tiles(index, block_m, 0)
}

/// The instance of the same kind as instance `index` with `block_m` query rows and `block_n`
/// keys a tile (0: any), if one is instantiated.
pub const fn wgmma_with_tiles(index: usize, block_m: u32, block_n: u32) -> Option<usize> {
    let c = WGMMA_CONFIGS[index];
    let mut i = 0;
    while i < WGMMA_CONFIGS.len() {
        let o = WGMMA_CONFIGS[i];
        if o.head_dim == c.head_dim
            && o.window == c.window
            && o.train == c.train
            && o.persistent == c.persistent
            && (block_m == 0 || o.block_m == block_m)
            && (block_n == 0 || o.block_n == block_n)
        {
            return Some(i);
        }
        i += 1;
    }
    None
}

const fn wgmma_find(head_dim: u32, window: u32, train: u32) -> Option<usize> {
    wgmma_find_in(head_dim, window, train, 0, 0)
}

/// The first instance of a kind running head dim `d` (with `block_m` rows, or any for 0).
const fn wgmma_find_in(
    head_dim: u32,
    window: u32,
    train: u32,
    persistent: u32,
    block_m: u32,
) -> Option<usize> {
    let mut i = 0;
    while i < WGMMA_CONFIGS.len() {
        let c = WGMMA_CONFIGS[i];
        if c.runs(head_dim)
            && c.window == window
            && c.train == train
            && c.persistent == persistent
            && (block_m == 0 || c.block_m == block_m)
        {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The CPU implementation's default tiles (rows of Q × rows of K per step).
pub const CPU_TILES: (usize, usize) = (64, 64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simt_defaults_pad_up() {
        let c = SimtConfig::default_for(59).unwrap();
        assert_eq!((c.padded_dim, c.block_m, c.block_n), (64, 64, 64));
        assert_eq!(SimtConfig::default_for(256).unwrap().padded_dim, 256);
        assert_eq!(SimtConfig::default_for(257), None);
        assert!(SimtConfig::tiles_valid(64, 64) && !SimtConfig::tiles_valid(48, 64));
        assert!(!SimtConfig::tiles_valid(64, 0) && !SimtConfig::tiles_valid(64, 288));
    }

    #[test]
    fn defaults_and_lookup() {
        for d in [64, 128, 256] {
            let i = mma_default(d, false, 4096).unwrap();
            assert_eq!(MMA_CONFIGS[i].head_dim, d);
            let c = MMA_CONFIGS[i];
            assert_eq!(mma_find(i, d, c.block_m, c.block_n), Some(i));
        }
        // Other head dims run on padded instances of the next instantiated head dim.
        let pad = |d: u32| MMA_CONFIGS[mma_default(d, false, 1).unwrap()];
        for (d, inst) in
            [(8, 32), (32, 32), (40, 64), (56, 64), (80, 96), (96, 96), (112, 128), (200, 224), (248, 256)]
        {
            assert_eq!((pad(d).head_dim, pad(d).pad), (inst, 1), "d = {d}");
        }
        assert_eq!(mma_default(257, false, 1), None);
        // Head dims that are not multiples of 8 have no 16-byte instance, but an element-wise one.
        assert_eq!(mma_default(59, false, 1), None);
        let elem = |d: u32| MMA_CONFIGS[mma_elementwise(d).unwrap()];
        for (d, inst) in [(1, 64), (59, 64), (64, 64), (65, 128), (111, 128), (129, 256), (255, 256)] {
            assert_eq!((elem(d).head_dim, elem(d).pad), (inst, PAD_ELEMENTS), "d = {d}");
            assert!(elem(d).runs(d) && !elem(d).is_decode());
        }
        assert_eq!(mma_elementwise(0), None);
        assert_eq!(mma_elementwise(257), None);
        assert_eq!(pad(96).pitch(), 128);
        assert_eq!(pad(160).pitch(), 256);
        // The tile override names each configuration of a head dim uniquely, among those of
        // the kind the planner picked.
        for (i, c) in MMA_CONFIGS.iter().enumerate().filter(|(_, c)| c.window == 0) {
            let d = if c.pad == PAD_CHUNKS && c.head_dim % 64 == 0 { c.head_dim - 8 } else { c.head_dim };
            let base = if c.pad == PAD_ELEMENTS {
                mma_elementwise(c.head_dim - 1).unwrap()
            } else {
                mma_default(d, false, 1).unwrap()
            };
            let d = if c.pad == PAD_ELEMENTS { c.head_dim - 1 } else { d };
            assert_eq!(mma_find(base, d, c.block_m, c.block_n), Some(i), "{c:?}");
        }
        // No decode fallback for element-wise rows (the decode instances copy 16-byte chunks).
        let e = mma_elementwise(59).unwrap();
        assert_eq!(mma_find(e, 59, 16, 64), None);
    }

    #[test]
    fn window_instances_run_every_aligned_head_dim() {
        for d in (8..=256).step_by(8) {
            let c = MMA_CONFIGS[mma_window(d, false).unwrap()];
            assert!(c.window == 1 && c.runs(d) && !c.is_decode(), "d = {d}: {c:?}");
            let decode = MMA_CONFIGS[mma_window(d, true).unwrap()];
            assert!(decode.window == 1 && decode.runs(d), "d = {d}: {decode:?}");
            assert_eq!(decode.is_decode(), d <= 128, "d = {d}");
            assert_eq!(MMA_CONFIGS[mma_default(d, false, 1).unwrap()].window, 0);
        }
        assert_eq!(MMA_CONFIGS[mma_window(128, false).unwrap()].pad, PAD_EXACT);
        assert_eq!(mma_window(59, false), None);
    }

    #[test]
    fn decode_instances_run_every_head_dim() {
        for d in (8..=256).step_by(8) {
            let c = MMA_CONFIGS[mma_decode(d).unwrap()];
            assert!(c.is_decode() && c.runs(d), "d = {d}: {c:?}");
            assert!(!MMA_CONFIGS[mma_default(d, false, 1).unwrap()].is_decode(), "d = {d}");
        }
        assert_eq!(mma_decode(59), None);
        assert_eq!(mma_decode(264), None);
    }
}

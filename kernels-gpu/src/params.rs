//! Launch parameters shared by the host and the kernels.
//!
//! Every struct here is `#[repr(C)]`, built by the host crate and passed *by value* as the one
//! kernel parameter (PTX `.param .align 8 .b8 name[size]`), so both sides agree on the layout by
//! construction. Device addresses travel as `u64`; strides are in elements, not bytes.

/// Parameters of the `fill_u16` / `fill_u32` kernels: write `value` to `len` words at `ptr`.
///
/// The tests use them to poison outputs (NaN) before every launch, so an element that a kernel
/// forgot to write shows up as NaN instead of as a stale correct value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillParams {
    /// Device address of the first word.
    pub ptr: u64,
    /// Number of words (of 2 or 4 bytes, by kernel).
    pub len: u64,
    /// The bit pattern to write (the low 16 bits for `fill_u16`).
    pub value: u32,
    /// Padding to a multiple of 8 bytes; must be 0.
    pub _pad: u32,
}

/// Threads per block of the fill kernels.
pub const FILL_THREADS: u32 = 256;

/// Parameters of the flash attention forward kernels (general and tensor-core).
///
/// Grid: `x` = query tiles of the longest sequence (× `splits` for split-KV), `y` = query
/// heads, `z` = sequences. The split-KV combine kernel takes the same struct, with `x` = groups of
/// [`COMBINE_WARPS`] query rows.
/// Tensors are addressed as `(batch, seq, head, dim)` with the strides below (in elements).
/// With `cu_seqlens_q != 0` the batch is variable-length: sequence `z` holds query tokens
/// `cu_seqlens_q[z]..cu_seqlens_q[z+1]` and key tokens `cu_seqlens_k[z]..cu_seqlens_k[z+1]` of
/// packed tensors (batch index 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnParams {
    /// Q, K, V (read) and O (written): device addresses.
    pub q: u64,
    /// K.
    pub k: u64,
    /// V.
    pub v: u64,
    /// O.
    pub o: u64,
    /// Log-sum-exp output (f32), or 0 to skip it. Row `(z, h, t)` is at
    /// `(batch_index·heads_q + h)·lse_seq_stride + q_start + t`.
    pub lse: u64,
    /// Cumulative query offsets (u32, `batch + 1`), or 0 for fixed-length batches.
    pub cu_seqlens_q: u64,
    /// Cumulative key offsets (u32), used when `cu_seqlens_q != 0`.
    pub cu_seqlens_k: u64,
    /// Strides (batch, seq, head) of Q.
    pub q_strides: [u64; 3],
    /// Strides of K.
    pub k_strides: [u64; 3],
    /// Strides of V.
    pub v_strides: [u64; 3],
    /// Strides of O.
    pub o_strides: [u64; 3],
    /// Query tokens per sequence (fixed-length batches).
    pub seqlen_q: u32,
    /// Key tokens per sequence (fixed-length batches).
    pub seqlen_k: u32,
    /// Query heads.
    pub heads_q: u32,
    /// Query heads per key/value head.
    pub group: u32,
    /// Head dimension (≤ the kernel's padded dimension).
    pub head_dim: u32,
    /// `scale·log2(e)`.
    pub scale_log2: f32,
    /// 1 for causal (bottom-right aligned), 0 otherwise.
    pub causal: u32,
    /// Sliding window: keys a query sees before its diagonal key (`mask::UNBOUNDED`: all). Only
    /// the tensor-core forward kernel reads it (the host refuses windows elsewhere).
    pub window_left: u32,
    /// Sliding window: keys a query sees after its diagonal key (`mask::UNBOUNDED`: all; 0 is
    /// implied by `causal`).
    pub window_right: u32,
    /// Keys per shared-memory tile (general kernel: a multiple of [`SIMT_KEY_CHUNK`]).
    pub block_n: u32,
    /// Row stride of the log-sum-exp output (seqlen_q, or total query tokens for varlen).
    pub lse_seq_stride: u32,
    /// Split-KV: how many blocks share each query tile's keys (1: no split). With more than one,
    /// grid `x` is `query tiles × splits`, and block `x` takes split `x % splits` of its query
    /// tile's key tiles; it writes its normalised output and log-sum-exp in f32 to `partial_o` /
    /// `partial_lse` instead of `o` / `lse`, and the combine kernel merges the splits.
    pub splits: u32,
    /// Split-KV partial outputs (f32): split `s`, row `r` (a log-sum-exp index, [`lse_index`]),
    /// column `c` at `(s·partial_rows + r)·head_dim + c`. The tensor-core kernel writes these and
    /// `partial_lse` instead of `o` and `lse` when `splits > 1`; the Hopper kernel whenever this
    /// is set (not 0; a step of context-parallel attention, one split).
    pub partial_o: u64,
    /// Split-KV partial log-sum-exps (f32): split `s`, row `r` at `s·partial_rows + r`.
    pub partial_lse: u64,
    /// Rows of one split's partial results (the log-sum-exp output's length).
    pub partial_rows: u64,
    /// A K/V cache (FlashAttention's `cache_seqlens`, its `seqused_k`): in a fixed-length batch,
    /// sequence `z` uses only the first `seqused_k[z]` (u32) of its `seqlen_k` keys; 0 when every
    /// sequence uses all of them. Keys past a sequence's length are never read.
    pub seqused_k: u64,
    /// A paged K/V cache (FlashAttention's `block_table`): `pages_per_entry` page indices (u32) per
    /// sequence of a fixed-length batch, or 0 when K and V are not paged. Then K and V are page
    /// pools (their batch stride is the page stride) and token `t` of sequence `z` is row
    /// `t % 2^page_shift` of page `block_table[z·pages_per_entry + t >> page_shift]`; `seqlen_k`
    /// is an entry's capacity. Only the decode instances of the tensor-core kernel read it.
    pub block_table: u64,
    /// Page slots per sequence (the table's row length), with `block_table`.
    pub pages_per_entry: u32,
    /// log2 of the tokens per page (at least 4: pages of 16 tokens or more), with `block_table`.
    pub page_shift: u32,
    /// ALiBi slopes: one f32 per query head (device address), or 0 for none. Read, with
    /// `softcap`, by the tensor-core kernels' masked instances (forward and backward) only; the
    /// host sends score modifiers to no other kernel.
    pub alibi_slopes: u64,
    /// Logit softcap `c` (0: none; [`crate::softmax::ScoreMod`]).
    pub softcap: f32,
    /// With score modifiers (`softcap > 0` or `alibi_slopes != 0`): the softmax scale, which
    /// turns a raw score into the scaled score the modifiers take; `scale_log2` is then
    /// `log2(e)`, as the recurrence runs on the logits. 0 otherwise.
    pub logit_scale: f32,
}

impl AttnParams {
    /// Whether the problem has score modifiers (a softcap or ALiBi slopes).
    #[inline(always)]
    pub fn has_score_mod(&self) -> bool {
        self.softcap > 0.0 || self.alibi_slopes != 0
    }
}

/// Threads per block of the K/V append kernel (one block per (entry, new token, K/V head)).
pub const APPEND_THREADS: u32 = 64;

/// Parameters of `append_kv_u16`: writes `new_tokens` new K and V tokens of every entry of a
/// fixed-length batch into its cache right after the entry's `cache_seqlens[b]` tokens (through
/// a paged cache's table when `block_table` is set). Grid: `x` = entries × new tokens × K/V
/// heads, `y` = 0 for K and 1 for V. Rows are copied as `row_units` 16-bit words, and every
/// stride is in 16-bit words (an f32 element is two), so one kernel serves every dtype.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AppendParams {
    /// K's and V's caches (written) and their new tokens (read): device addresses.
    pub cache: [u64; 2],
    /// The new tokens of K and V.
    pub new: [u64; 2],
    /// Strides (entry or page, token, head) of K's and V's caches, in 16-bit words.
    pub cache_strides: [[u64; 3]; 2],
    /// Strides (entry, token, head) of the new K and V tokens, in 16-bit words.
    pub new_strides: [[u64; 3]; 2],
    /// Each entry's tokens before the append (u32, one per entry).
    pub cache_seqlens: u64,
    /// A paged cache's table (u32, `pages_per_entry` per entry), or 0 for contiguous caches.
    pub block_table: u64,
    /// Page slots per entry, with `block_table`.
    pub pages_per_entry: u32,
    /// log2 of the tokens per page, with `block_table`.
    pub page_shift: u32,
    /// New tokens per entry.
    pub new_tokens: u32,
    /// K/V heads.
    pub heads: u32,
    /// 16-bit words per row (head dim × element bytes / 2).
    pub row_units: u32,
    /// Unused (keeps the struct a multiple of 8 bytes).
    pub reserved: u32,
}

/// Parameters of the backward kernels (preprocessing, main, dQ conversion). `attn` is the
/// forward's struct, re-read: Q, K, V, the log-sum-exp, varlen offsets, strides and shapes,
/// with `attn.o`/`attn.o_strides` the **upstream gradient dO** (laid out as O), and
/// `attn.partial_rows` the number of log-sum-exp rows (the length of each statistics array).
///
/// Grids: preprocessing and dQ conversion as the forward (`x` = query tiles, `y` = query heads,
/// `z` = sequences); the main kernel `x` = key tiles, `y` = K/V heads, `z` = sequences, or with
/// [`BwdParams::key_major`] `x` = (K/V head, sequence) pairs of a group, `y` = key tiles, `z` =
/// groups.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwdParams {
    /// The forward's parameters (see above: `o` is dO).
    pub attn: AttnParams,
    /// dQ (written, storage type, strided as `dq_strides`).
    pub dq: u64,
    /// dK (written, strided as `dk_strides`; the shape of K).
    pub dk: u64,
    /// dV (written, strided as `dv_strides`; the shape of V).
    pub dv: u64,
    /// dQ's (batch, seq, head) strides, elements.
    pub dq_strides: [u64; 3],
    /// dK's strides.
    pub dk_strides: [u64; 3],
    /// dV's strides.
    pub dv_strides: [u64; 3],
    /// The f32 dQ accumulator: row `r` (a log-sum-exp index), column `c` at `r·head_dim + c`.
    /// Zeroed by the preprocessing kernel, added to by the main kernel, read by the conversion.
    pub dq_acc: u64,
    /// Per-row statistics, one 16-byte row per log-sum-exp row (`attn.partial_rows` of them,
    /// 16-byte aligned): f32 `[offset, 1/Σ P, pivot, D − pivot]` (`offset` =
    /// [`crate::softmax::lse_offset`] of the row's log-sum-exp; the rest
    /// [`crate::softmax::GradRow`]'s), written by the preprocessing kernel.
    pub stats: u64,
    /// The softmax scale (natural units): dQ and dK are `scale·dS·K` and `scale·dSᵀ·Q`.
    pub scale: f32,
    /// Query tiles ([`BWD_BLOCK_M`] rows) of the longest sequence: the stride of `locks`.
    pub q_tiles: u32,
    /// The main kernel's grid order. 0: head-major, `x` = key tile, `y` = K/V head, `z` =
    /// sequence. `G > 0`: key-major in groups of `G` (K/V head, sequence) pairs (`G` divides
    /// their count), `x` = pair within the group, `y` = key tile, `z` = group; a pair is
    /// `K/V head + kv_heads·sequence`. The hardware starts blocks `x` first, then `y`, then `z`:
    /// so each group's first key tiles start before any of its later ones — with a causal mask
    /// the longest walks first and the shortest last — while a group's blocks stay together
    /// (their query tiles shared in the L2). The host's rule: `backward_key_major` (causal, more
    /// than 16 pairs, not the window instances).
    pub key_major: u32,
    /// K/V heads (with `key_major`; passed so that the kernel need not divide `heads_q` by `group`).
    pub kv_heads: u32,
    /// Deterministic mode: one u32 turn counter per (sequence, query head, query tile), at
    /// `(z·heads_q + h)·q_tiles + tile`, zeroed by the preprocessing kernel; the main kernel's
    /// key tile `j` adds its dQ contribution to a query tile when the counter reads `j`, then
    /// sets it to `j + 1`. 0: atomic adds in any order.
    pub locks: u64,
    /// Window walks on sm_90a, the instances where [`crate::config::BwdConfig::tile_counters`]
    /// holds (the host's rule adds an accumulator of 16 MiB or more): one u32 per (sequence,
    /// query head, query tile), indexed as
    /// `locks`, that the preprocessing kernel sets to the number of key blocks whose walk visits
    /// the tile ([`crate::mask::window_tile_visitors`]) and each of those blocks decrements,
    /// with release semantics, once its walk is over. The conversion kernel, a programmatic
    /// dependent of the main kernel, then converts each tile as soon as its word reads 0 —
    /// under the main kernel's last blocks — instead of after the whole grid. 0: the
    /// conversion waits for the main kernel's grid.
    pub dq_ready: u64,
    /// The forward's residuals (a training forward, [`WgmmaParams::residual_rows`]), or 0: the
    /// rows' `[offset, ℓ]`. With them the preprocessing kernel takes `D = dO·(O + O_lo)` from the
    /// forward's output instead of a pass over the keys (query tiles with a flagged row excepted).
    pub residual_rows: u64,
    /// With `residual_rows`: the forward's output O (storage type, strided as `o_strides`).
    pub o: u64,
    /// With `residual_rows`: O's residual `O_lo` (storage type, O's strides).
    pub o_lo: u64,
    /// O's (batch, seq, head) strides, elements (`attn.o_strides` are dO's).
    pub o_strides: [u64; 3],
    /// sm_90a: the device address of two TMA tensor maps, Q at `maps` and dO at `maps + 128`
    /// (as [`WgmmaParams::maps`], boxes of one 64-column panel × [`BWD_BLOCK_M`] rows), through
    /// which the main kernel copies its query tiles; 0: by `cp.async` (the sm_80 PTX, and layouts
    /// TMA cannot describe).
    pub maps: u64,
}

/// Parameters of the Hopper forward kernel: the forward's struct, and the device address of
/// its TMA tensor maps (Q, K, V and, where it stores O by TMA, O: 128 bytes each, consecutive,
/// 64-byte aligned), which describe each tensor as 4-D `(head_dim, seqlen, heads, batch)` with
/// the struct's strides and a box of one 64-column panel × the kernel's rows (O's: 64 rows),
/// 128-byte swizzled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WgmmaParams {
    /// Shapes, strides, outputs, mask.
    pub attn: AttnParams,
    /// The tensor maps: Q at `maps`, K at `maps + 128`, V at `maps + 256`.
    pub maps: u64,
    /// With `attn.partial_o` set (a step of context-parallel attention): 1 when the partial rows
    /// hold the running result of earlier steps, merged with this launch's by log-sum-exp (the
    /// combine's rule, [`crate::softmax::SplitMerge`]) before anything is written; 0 when this
    /// launch is the rows' first contribution.
    pub merge: u32,
    /// With `attn.partial_o` set: the launch's rows below this one are final (their last
    /// contribution): the merged rows go to `attn.o` and `attn.lse` in the storage type, the
    /// others back to the partial rows in f32.
    pub final_rows: u32,
    /// A training instance ([`crate::config::WgmmaConfig::train`]): O's residual, written in
    /// the storage type with O's layout (`attn.o_strides`): `O_lo = round(O_f32 − O)`, so that
    /// `O + O_lo` is the f32 output to about twice the type's precision. 0 elsewhere.
    pub o_lo: u64,
    /// A training instance: each log-sum-exp row's `[offset, ℓ']` (two f32, 8-byte aligned, at
    /// `8·`[`lse_index`]) such that `2^(s·scale_log2 + offset)/ℓ'` is the probability the
    /// forward formed, `2^((s − max)·scale_log2)/ℓ`, in one FMA: `offset = −round(max·scale_log2)`
    /// and `ℓ' = ℓ·2^δ` with `δ` that rounding's error; `(0, 0)` for a row without keys; the
    /// offset NaN where `|max·scale_log2| ≥` [`crate::softmax::FUSED_LIMIT`] (the backward then
    /// recomputes the row from its keys). 0 elsewhere.
    pub residual_rows: u64,
    /// The device address of a TMA tensor map of O (as Q's, with boxes of one 64-column panel ×
    /// 64 rows: one consumer warpgroup's), through which an instance that takes it
    /// ([`crate::config::WgmmaConfig::o_by_tma`]) stores its output tiles from shared memory; 0:
    /// each thread stores its elements from registers (the other instances, context-parallel
    /// steps, variable-length batches, addresses TMA cannot take).
    pub o_map: u64,
    /// A persistent instance's work ([`crate::config::WgmmaConfig::persistent`]): the query
    /// tiles of all (head, sequence) pairs, numbered query tile first (`tiles_m` a pair), then
    /// head, then sequence; block x walks tiles x, x + grid, x + 2·grid, … 0 for the others.
    pub tiles: u32,
    /// With `tiles`: the query tiles of one (head, sequence) pair.
    pub tiles_m: u32,
    /// A dynamic persistent instance (causal: tiles of unequal work): the device address of a
    /// zeroed 32-bit counter from which the blocks take their next tile; 0 for the others.
    pub tile_counter: u64,
}

/// Bytes of one TMA tensor map (`CUtensorMap`).
pub const TENSOR_MAP_BYTES: u64 = 128;

/// Query rows per block of the backward's preprocessing and dQ-conversion kernels (4 warps of
/// 16), and query rows per step of the main kernel.
pub const BWD_BLOCK_M: u32 = 64;
/// Keys per tile of the backward's preprocessing kernel.
pub const BWD_PREP_BLOCK_N: u32 = 64;
/// Threads per block of the preprocessing and dQ-conversion kernels.
pub const BWD_PREP_THREADS: u32 = 128;

/// Query rows (one per warp) per block of the split-KV combine kernel.
pub const COMBINE_WARPS: u32 = 4;

/// The most key splits of one query tile (split-KV): the combine kernel holds 128 / 32 of them
/// per lane.
pub const MAX_SPLITS: u32 = 128;

/// Element offset of split `split`'s row `row` in the partial outputs (f32, `head_dim` a row).
#[inline(always)]
pub const fn partial_index(split: u64, partial_rows: u64, row: u64) -> u64 {
    split * partial_rows + row
}

/// The most tokens one sequence (and one packed tensor) may hold: the kernels count tokens in
/// 32 bits, and a tile's end (`start + block`) must not wrap. Checked by the host for every path.
pub const MAX_TOKENS: usize = (1 << 31) - 1;

/// Index of the log-sum-exp row of query `t` of a sequence whose queries start at token
/// `q_start` of batch entry `batch_index`, head `h` of `heads_q`: the output is laid out
/// `(batch, heads, seq)` with `seq_stride` rows per head (`seqlen_q`, or the packed token count
/// for variable-length batches, whose sequences all have `batch_index` 0). The one definition,
/// used by the kernels, the host's paths and the tests.
#[inline(always)]
pub const fn lse_index(batch_index: u64, heads_q: u64, h: u64, seq_stride: u64, q_start: u64, t: u64) -> u64 {
    (batch_index * heads_q + h) * seq_stride + q_start + t
}

/// Query rows each thread group of the general kernel shares: 4 threads per row.
pub const SIMT_THREADS_PER_ROW: u32 = 4;
/// Keys the general kernel scores per register chunk (8 per thread × 4 threads).
pub const SIMT_KEY_CHUNK: u32 = 32;
/// Row padding (in f32) of the general kernel's Q and K tiles: keeps 16-byte shared loads of
/// different rows in different banks.
pub const SIMT_ROW_PAD: u32 = 4;

/// Shared memory of the general kernel: Q tile `block_m × (D+pad)`, K tile `block_n × (D+pad)`
/// and V tile `block_n × D`, all f32.
pub const fn simt_shared_bytes(block_m: u32, block_n: u32, padded_dim: u32) -> u32 {
    4 * (block_m * (padded_dim + SIMT_ROW_PAD) + block_n * (padded_dim + SIMT_ROW_PAD) + block_n * padded_dim)
}

/// Parameters of the row-softmax kernel of standard attention: one block per row of the score
/// matrix `S` (f32, rows of `len_k`), writing probabilities `P` (storage type) and the
/// log-sum-exp.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SoftmaxParams {
    /// Scores S, f32, `rows × len_k`, row-major.
    pub s: u64,
    /// Probabilities P (storage type), `rows × len_k`, row-major.
    pub p: u64,
    /// Log-sum-exp output (f32) or 0. Row `r` = (head `r / len_q`, query `r % len_q`) goes to
    /// `lse + (head·lse_head_stride + query)·4`.
    pub lse: u64,
    /// Rows (`heads × len_q`).
    pub rows: u32,
    /// Queries per head.
    pub len_q: u32,
    /// Keys per row.
    pub len_k: u32,
    /// Elements between heads in the log-sum-exp output.
    pub lse_head_stride: u32,
    /// `scale·log2(e)`.
    pub scale_log2: f32,
    /// 1 for causal (bottom-right aligned).
    pub causal: u32,
}

/// Threads per block of the row-softmax kernel.
pub const SOFTMAX_THREADS: u32 = 256;

/// Dynamic shared memory of the row-softmax kernel: one (max, sum) state per warp.
pub const SOFTMAX_SHARED_BYTES: u32 = 8 * SOFTMAX_THREADS / 32;

/// Parameters of the `fill_rows_u16` / `fill_rows_u32` kernels: write `value` to `cols`
/// elements of each of `tokens × heads` rows of a strided `(token, head, col)` tensor. Standard
/// attention uses it for sequences with no keys, whose outputs are 0 by definition but which no
/// matrix product writes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillRowsParams {
    /// Device address of element (token 0, head 0, col 0).
    pub ptr: u64,
    /// Elements between tokens.
    pub seq_stride: u64,
    /// Elements between heads.
    pub head_stride: u64,
    /// Tokens.
    pub tokens: u32,
    /// Heads.
    pub heads: u32,
    /// Elements per row.
    pub cols: u32,
    /// The bit pattern (the low 16 bits for `fill_rows_u16`).
    pub value: u32,
}

//! What an attention call computes, independent of where the data lives: tensor layouts,
//! options, and the validation that every path (CPU, GPU flash, GPU standard) shares.

use std::sync::Arc;

use crate::error::InvalidInput;
pub use flashattn_kernels::params::MAX_TOKENS;
pub use flashattn_kernels::softmax::ScoreMod;

/// Largest supported head dimension.
pub const MAX_HEAD_DIM: usize = 256;

/// Shape and strides of a Q, K, V or O tensor, addressed as `(batch, seqlen, heads, head_dim)`.
///
/// Strides are in elements; the head dimension is always contiguous (stride 1). The memory
/// order is free: [`Layout::bshd`] is `(batch, seqlen, heads, head_dim)` in memory (the
/// FlashAttention convention), [`Layout::bhsd`] is `(batch, heads, seqlen, head_dim)` in memory
/// (PyTorch's `scaled_dot_product_attention` convention): both work without a copy.
///
/// The constructors never wrap: a stride whose product overflows `usize` saturates, and
/// [`Layout::required_len`] (which every call checks) then reports the overflow as
/// [`InvalidInput::LayoutOverflow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Batch entries (1 for packed variable-length input).
    pub batch: usize,
    /// Tokens per batch entry (the total token count for packed variable-length input).
    pub seqlen: usize,
    /// Heads.
    pub heads: usize,
    /// Head dimension `d`, 1..=256.
    pub head_dim: usize,
    /// Elements between consecutive batch entries.
    pub batch_stride: usize,
    /// Elements between consecutive tokens.
    pub seq_stride: usize,
    /// Elements between consecutive heads.
    pub head_stride: usize,
}

impl Layout {
    /// Contiguous `(batch, seqlen, heads, head_dim)` memory order.
    pub const fn bshd(batch: usize, seqlen: usize, heads: usize, head_dim: usize) -> Layout {
        Layout {
            batch,
            seqlen,
            heads,
            head_dim,
            batch_stride: seqlen.saturating_mul(heads).saturating_mul(head_dim),
            seq_stride: heads.saturating_mul(head_dim),
            head_stride: head_dim,
        }
    }

    /// Contiguous `(batch, heads, seqlen, head_dim)` memory order, addressed as
    /// `(batch, seqlen, heads, head_dim)` like every layout.
    pub const fn bhsd(batch: usize, seqlen: usize, heads: usize, head_dim: usize) -> Layout {
        Layout {
            batch,
            seqlen,
            heads,
            head_dim,
            batch_stride: heads.saturating_mul(seqlen).saturating_mul(head_dim),
            seq_stride: head_dim,
            head_stride: seqlen.saturating_mul(head_dim),
        }
    }

    /// Variable-length sequences packed along the token axis: `(total_tokens, heads, head_dim)`.
    pub const fn packed(total_tokens: usize, heads: usize, head_dim: usize) -> Layout {
        Layout::bshd(1, total_tokens, heads, head_dim)
    }

    /// Element offset of `(b, s, h, 0)`, for coordinates inside a layout that
    /// [`Layout::required_len`] accepted (then it cannot overflow).
    #[inline]
    pub const fn offset(&self, b: usize, s: usize, h: usize) -> usize {
        b * self.batch_stride + s * self.seq_stride + h * self.head_stride
    }

    /// Elements a buffer must hold for this layout (0 when any extent is 0); `None` on overflow.
    pub fn required_len(&self) -> Option<usize> {
        if self.batch == 0 || self.seqlen == 0 || self.heads == 0 || self.head_dim == 0 {
            return Some(0);
        }
        let last = (self.batch - 1)
            .checked_mul(self.batch_stride)?
            .checked_add((self.seqlen - 1).checked_mul(self.seq_stride)?)?
            .checked_add((self.heads - 1).checked_mul(self.head_stride)?)?;
        last.checked_add(self.head_dim)
    }

    /// Whether the `(batch, heads)` pairs are one uniform stride apart (`batch_stride ==
    /// heads·head_stride`), so that one strided-batched GEMM covers them.
    pub const fn heads_uniform_across_batch(&self) -> bool {
        self.batch <= 1 || self.batch_stride == self.heads.saturating_mul(self.head_stride)
    }

    /// The (extent, stride) pairs of the three outer dimensions, leaving out dimensions of extent
    /// 1, whose stride never moves an address (and so must not be held to any rule).
    pub fn moving_strides(&self) -> impl Iterator<Item = (usize, usize)> {
        [(self.batch, self.batch_stride), (self.seqlen, self.seq_stride), (self.heads, self.head_stride)]
            .into_iter()
            .filter(|&(n, _)| n > 1)
    }

    /// Whether two different `(batch, token, head, element)` coordinates can address the same
    /// element. Checked by sorting the moving dimensions by stride: each stride must step past
    /// everything the smaller ones span (the head dimension spans `head_dim` elements). This is
    /// sufficient for distinct addresses; layouts that interleave dimensions in stranger ways
    /// are refused too.
    pub fn overlaps(&self) -> bool {
        if self.required_len() == Some(0) {
            return false;
        }
        let mut dims: Vec<(usize, usize)> = self.moving_strides().collect();
        dims.sort_by_key(|&(_, stride)| stride);
        let mut span = self.head_dim;
        for (n, stride) in dims {
            if stride < span {
                return true;
            }
            span = match (n - 1).checked_mul(stride).and_then(|x| x.checked_add(span)) {
                Some(s) => s,
                None => return true,
            };
        }
        false
    }
}

/// Variable-length batch: cumulative token offsets into packed Q and K/V (FlashAttention's
/// `cu_seqlens`). Sequence `i` holds query tokens `q[i]..q[i+1]` and key tokens `k[i]..k[i+1]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarLen {
    /// `batch + 1` non-decreasing query offsets starting at 0.
    pub cu_seqlens_q: Vec<u32>,
    /// `batch + 1` non-decreasing key/value offsets starting at 0.
    pub cu_seqlens_k: Vec<u32>,
}

impl VarLen {
    /// From per-sequence lengths; [`InvalidInput::VarLenOverflow`] when a cumulative offset
    /// does not fit in `u32`.
    pub fn from_lengths(q_lens: &[u32], k_lens: &[u32]) -> Result<VarLen, InvalidInput> {
        let cum = |tensor: &'static str, lens: &[u32]| {
            let mut v = Vec::with_capacity(lens.len() + 1);
            v.push(0u32);
            let mut acc = 0u32;
            for (index, &l) in lens.iter().enumerate() {
                acc = acc.checked_add(l).ok_or(InvalidInput::VarLenOverflow { tensor, index })?;
                v.push(acc);
            }
            Ok(v)
        };
        Ok(VarLen { cu_seqlens_q: cum("q", q_lens)?, cu_seqlens_k: cum("k", k_lens)? })
    }

    /// Number of sequences.
    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.len().saturating_sub(1)
    }

    /// Query and key length of sequence `i` (0 for an index past the end or decreasing
    /// offsets, which validation refuses).
    pub fn lens(&self, i: usize) -> (usize, usize) {
        let len = |c: &[u32]| match (c.get(i), c.get(i + 1)) {
            (Some(&a), Some(&b)) => b.saturating_sub(a) as usize,
            _ => 0,
        };
        (len(&self.cu_seqlens_q), len(&self.cu_seqlens_k))
    }
}

/// Which implementation runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Method {
    /// The fastest that supports the problem: the tensor-core flash kernel where it applies,
    /// the general flash kernel otherwise.
    #[default]
    Auto,
    /// The general tiled flash kernel (CUDA cores, any head dim, f16/bf16/f32).
    Flash,
    /// The tensor-core flash kernel (`mma.sync`; f16/bf16, head dims with a tuned config).
    FlashTensorCore,
    /// The Hopper flash kernel (sm_90 only: TMA loads, `wgmma` products, a producer warpgroup;
    /// f16/bf16, head dims that are multiples of 8 up to 256, fixed-length batches, no window).
    FlashHopper,
    /// Standard attention: S = Q·Kᵀ and O = P·V by cuBLAS, S and P stored in device memory.
    Standard,
}

impl Method {
    /// Every method.
    pub const ALL: [Method; 5] =
        [Method::Auto, Method::Flash, Method::FlashTensorCore, Method::FlashHopper, Method::Standard];

    /// Lower-case name used in reports and on command lines.
    pub const fn name(self) -> &'static str {
        match self {
            Method::Auto => "auto",
            Method::Flash => "flash",
            Method::FlashTensorCore => "flash-tc",
            Method::FlashHopper => "flash-hopper",
            Method::Standard => "standard",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Method, String> {
        Method::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            format!("unknown method `{s}`: expected one of auto, flash, flash-tc, flash-hopper, standard")
        })
    }
}

/// Tile sizes: query rows per block × key rows per step. `None` fields are chosen by the library.
///
/// On the Hopper kernel (`Method::FlashHopper`) a tile override picks among its instances: head
/// dims up to 64 have 128-row and 192-row ones (the library takes 192 rows from 2048 queries a
/// sequence in fixed-length batches), head dims 65–128 a 128 × 176 one (one query tile a
/// block) beside their 128 × 128 ones, head dims 129–192 a 128 × 112 one beside their 128 × 64
/// ones, and head dims 193–256 run 128 × 80 tiles (128 × 64 by override); other sizes are
/// refused with the ones that exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tiles {
    /// Query rows per thread block.
    pub block_m: Option<usize>,
    /// Keys per tile streamed through shared memory.
    pub block_n: Option<usize>,
}

/// A sliding window around each query's diagonal, FlashAttention's `window_size`: query `t`
/// (diagonal key `t + len_k − len_q`, bottom-right aligned like the causal mask) sees keys from
/// `left` before its diagonal to `right` after it; `None` is unbounded on that side. With
/// `causal`, `right` is 0 whatever it says. `Window::default()` is no window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Window {
    /// Keys before the diagonal a query sees (`None`: all).
    pub left: Option<usize>,
    /// Keys after the diagonal a query sees (`None`: all).
    pub right: Option<usize>,
}

impl Window {
    /// Whether this is no window at all.
    pub fn is_none(&self) -> bool {
        self.left.is_none() && self.right.is_none()
    }
}

/// Options of an attention call. `Default` is plain (non-causal) attention with scale `1/√d`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttentionOptions {
    /// Softmax scale; `None` means `1/√head_dim`. Must be finite and positive.
    pub scale: Option<f32>,
    /// Causal masking, aligned to the bottom-right corner when `seqlen_q != seqlen_k` (query `i`
    /// sees keys `j <= i + seqlen_k - seqlen_q`), as FlashAttention ≥ 2.1 does. Query rows that
    /// see no key get output 0 and log-sum-exp `-inf`.
    pub causal: bool,
    /// Variable-length sequences packed along the token axis (Q, K, V, O with `batch == 1`).
    pub varlen: Option<VarLen>,
    /// Which implementation runs.
    pub method: Method,
    /// Tile-size override (checked; an invalid one is an error, not a failed launch).
    pub tiles: Tiles,
    /// Sliding window: the tensor-core forward kernel and the CPU path apply it (key tiles
    /// outside every row's window are never loaded); the other GPU methods and the GPU backward
    /// refuse it with `Reason::Window`.
    pub window: Window,
    /// Split-KV override for the tensor-core kernel: how many blocks share each query tile's
    /// keys (`Some(1)`: no split). `None` lets the planner choose from the SM count and the
    /// shape ([`crate::Plan::splits`] says what it chose). At most [`MAX_SPLITS`].
    pub splits: Option<usize>,
    /// The backward pass only: bit-identical dQ, dK and dV from run to run. The key tiles add
    /// their dQ contributions to each query tile in a fixed order (each waits for the previous
    /// one's turn) instead of in whatever order atomic adds land; it costs time
    /// (`kernels-gpu/NOTES.md`, backward). dK and dV are reproducible either way, and the
    /// forward always is.
    pub deterministic: bool,
    /// Logit softcapping (Gemma-2's `c`): scaled scores `s` become `c·tanh(s/c)` before the
    /// softmax. `None`: none. On the GPU the tensor-core kernels apply it (forward and backward,
    /// rows of 16 bytes); the other methods refuse it (`Reason::ScoreMod`); `flashattn::cpu`
    /// applies it everywhere.
    pub softcap: Option<f32>,
    /// ALiBi: one slope per query head; the logit of query `t` and key `j` gets
    /// `−slope·|t + Nk − Nq − j|` (FlashAttention's `alibi_slopes`). `None`: none. Where it runs:
    /// as `softcap`.
    pub alibi_slopes: Option<Vec<f32>>,
    /// A K/V cache (FlashAttention's `cache_seqlens`): in a fixed-length batch, entry `b` uses only
    /// the first `cache_seqlens[b]` keys of K and V (their `seqlen` is the cache's capacity);
    /// causal masking aligns to the end of those keys. `None`: every entry uses all of them. See
    /// [`crate::cpu::append_kv`] for writing new tokens into a cache. On the GPU the tensor-core
    /// kernel's decode instances (query chunks of up to 16 rows) and the CUDA-core kernel read the
    /// lengths (`Method::Auto` picks between them); the other instances, the Hopper kernel,
    /// standard attention and the GPU backward refuse them (`Reason::KvCache`). The lengths are
    /// copied to the device with each call.
    pub cache_seqlens: Option<Vec<u32>>,
    /// A paged K/V cache (vLLM's layout; FlashAttention's `block_table`): K and V are pools of
    /// pages, laid out `(pages, page_size, heads_kv, d)`, and entry `b`'s token `j` is row
    /// `j % page_size` of page `block_table.pages[b·pages_per_entry + j / page_size]`. Needs a
    /// fixed-length batch; `cache_seqlens` gives each entry's length (else all its pages' tokens).
    /// On the GPU the tensor-core kernel's decode instances read it (up to 16 query rows a tile,
    /// 16-byte rows: decoding and short chunks, which `Method::Auto` sends there); every other
    /// GPU path refuses it (`Reason::KvCache`). The table is copied to the device when a call
    /// first sees it and kept there while calls on the [`crate::Device`]'s own stream pass the
    /// same table again (the same `Arc` of pages: clone the `BlockTable`, do not rebuild it).
    pub block_table: Option<BlockTable>,
}

/// The page table of a paged K/V cache ([`AttentionOptions::block_table`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    /// Tokens per page: a power of two, at least 16.
    pub page_size: usize,
    /// Page slots per batch entry (the table's row length).
    pub pages_per_entry: usize,
    /// `batch × pages_per_entry` page indices into the pools (slots past an entry's length are
    /// not read, but must still name a page that exists). Shared and immutable, so that a call
    /// takes it without a copy and a `Device` can keep its device copy for the next call that
    /// passes the same table (`vec.into()` makes one; a changed table is a new one).
    pub pages: Arc<[u32]>,
}

impl BlockTable {
    /// Entry `b`'s token `j`: (page, row in the page).
    pub fn locate(&self, b: usize, j: usize) -> (usize, usize) {
        (self.pages[b * self.pages_per_entry + j / self.page_size] as usize, j % self.page_size)
    }
}

/// The most key splits one query tile may have (split-KV; the combine kernel's limit).
pub const MAX_SPLITS: usize = flashattn_kernels::params::MAX_SPLITS as usize;

/// A validated attention problem: shapes, strides and options that every path agrees on.
///
/// Made only by [`Problem::new`], which checks everything; its fields are read through
/// accessors, so a problem cannot be changed after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    q: Layout,
    k: Layout,
    v: Layout,
    o: Layout,
    scale: f32,
    causal: bool,
    window: Window,
    varlen: Option<VarLen>,
    softcap: f32,
    alibi_slopes: Option<Vec<f32>>,
    /// Whether any head has a score modifier (decided once: the CPU path asks per score).
    score_mod: bool,
    cache_seqlens: Option<Vec<u32>>,
    block_table: Option<BlockTable>,
}

impl Problem {
    /// Checks shapes, strides and options against each other. `len` are the element counts of
    /// the Q, K, V and O buffers. Nothing is run or written.
    ///
    /// An empty problem (no sequence, no query head or no query token) is valid: every path runs
    /// nothing for it. K/V with no head while Q has heads is refused.
    pub fn new(
        q: Layout,
        k: Layout,
        v: Layout,
        o: Layout,
        len: [usize; 4],
        opts: &AttentionOptions,
    ) -> Result<Problem, InvalidInput> {
        let d = q.head_dim;
        if d == 0 || d > MAX_HEAD_DIM {
            return Err(InvalidInput::HeadDim { head_dim: d });
        }
        for (name, l) in [("k", &k), ("v", &v)] {
            if l.head_dim != d {
                return Err(InvalidInput::ShapeMismatch {
                    what: "head_dim",
                    tensor: name,
                    expected: d,
                    actual: l.head_dim,
                });
            }
        }
        // A paged cache's K and V are page pools: their batch is the number of pages.
        let kv_batch_free = opts.block_table.is_some();
        for (name, l) in [("k", &k), ("v", &v), ("o", &o)] {
            if l.batch != q.batch && !(kv_batch_free && name != "o") {
                return Err(InvalidInput::ShapeMismatch {
                    what: "batch",
                    tensor: name,
                    expected: q.batch,
                    actual: l.batch,
                });
            }
        }
        if o.seqlen != q.seqlen || o.heads != q.heads || o.head_dim != d {
            let (what, expected, actual) = if o.seqlen != q.seqlen {
                ("seqlen", q.seqlen, o.seqlen)
            } else if o.heads != q.heads {
                ("heads", q.heads, o.heads)
            } else {
                ("head_dim", d, o.head_dim)
            };
            return Err(InvalidInput::ShapeMismatch { what, tensor: "o", expected, actual });
        }
        if v.seqlen != k.seqlen {
            return Err(InvalidInput::ShapeMismatch {
                what: "seqlen",
                tensor: "v",
                expected: k.seqlen,
                actual: v.seqlen,
            });
        }
        if v.heads != k.heads {
            return Err(InvalidInput::ShapeMismatch {
                what: "heads",
                tensor: "v",
                expected: k.heads,
                actual: v.heads,
            });
        }
        let groups_ok = if k.heads == 0 { q.heads == 0 } else { q.heads % k.heads == 0 };
        if !groups_ok {
            return Err(InvalidInput::HeadGroups { q_heads: q.heads, kv_heads: k.heads });
        }
        for ((name, l), have) in [("q", &q), ("k", &k), ("v", &v), ("o", &o)].into_iter().zip(len) {
            if l.seqlen > MAX_TOKENS {
                return Err(InvalidInput::TooManyTokens {
                    tensor: name,
                    tokens: l.seqlen,
                    limit: MAX_TOKENS,
                });
            }
            let need = l.required_len().ok_or(InvalidInput::LayoutOverflow { tensor: name })?;
            if need > have {
                return Err(InvalidInput::BufferTooSmall { tensor: name, needed: need, len: have });
            }
        }
        if o.overlaps() {
            return Err(InvalidInput::OverlappingOutput {
                strides: [o.batch_stride, o.seq_stride, o.head_stride],
                head_dim: o.head_dim,
            });
        }
        let scale = opts.scale.unwrap_or(1.0 / (d as f32).sqrt());
        // The kernels work with `scale·log2(e)`: it must be finite too (scales up to ~2.3e38).
        if !scale.is_finite() || scale <= 0.0 || !(scale * flashattn_kernels::math::LOG2_E).is_finite() {
            return Err(InvalidInput::Scale { scale });
        }
        if let Some(vl) = &opts.varlen {
            validate_varlen(vl, &q, &k)?;
        }
        check_splits(opts)?;
        let softcap = match opts.softcap {
            None => 0.0,
            Some(c) if c.is_finite() && c > 0.0 => c,
            Some(c) => return Err(InvalidInput::Softcap { softcap: c }),
        };
        if let Some(slopes) = &opts.alibi_slopes
            && (slopes.len() != q.heads || slopes.iter().any(|s| !s.is_finite() || *s < 0.0))
        {
            return Err(InvalidInput::AlibiSlopes { len: slopes.len(), heads: q.heads });
        }
        if v.batch != k.batch {
            return Err(InvalidInput::ShapeMismatch {
                what: "batch",
                tensor: "v",
                expected: k.batch,
                actual: v.batch,
            });
        }
        // The capacity of one entry: K's seqlen, or its pages' tokens.
        let capacity = match &opts.block_table {
            Some(t) => {
                check_block_table(t, &q, &k, opts.varlen.is_some())?;
                t.pages_per_entry * t.page_size
            }
            None => k.seqlen,
        };
        if let Some(lens) = &opts.cache_seqlens
            && (opts.varlen.is_some() || lens.len() != q.batch || lens.iter().any(|&l| l as usize > capacity))
        {
            return Err(InvalidInput::CacheSeqlens {
                len: lens.len(),
                batch: q.batch,
                capacity,
                varlen: opts.varlen.is_some(),
            });
        }
        // The log-sum-exp output's length must be a number.
        q.batch
            .checked_mul(q.heads)
            .and_then(|x| x.checked_mul(q.seqlen))
            .ok_or(InvalidInput::LayoutOverflow { tensor: "lse" })?;
        Ok(Problem {
            q,
            k,
            v,
            o,
            scale,
            causal: opts.causal,
            window: opts.window,
            varlen: opts.varlen.clone(),
            softcap,
            score_mod: softcap > 0.0
                || opts.alibi_slopes.as_ref().is_some_and(|s| s.iter().any(|&x| x != 0.0)),
            alibi_slopes: opts.alibi_slopes.clone(),
            cache_seqlens: opts.cache_seqlens.clone(),
            block_table: opts.block_table.clone(),
        })
    }

    /// The paged cache's table, if K and V are page pools.
    pub fn block_table(&self) -> Option<&BlockTable> {
        self.block_table.as_ref()
    }

    /// Element offset of token `j` (of the packed key axis: `seq.k_start + j` for varlen) of
    /// sequence entry `b`'s K/V head `h`, in K (`v = false`) or V: through the page table for a
    /// paged cache, else the layout's own. Every K/V read of the CPU path goes through it.
    pub fn kv_offset(&self, v: bool, b: usize, j: usize, h: usize) -> usize {
        let (bp, row) = self.kv_position(b, j);
        if v { self.v.offset(bp, row, h) } else { self.k.offset(bp, row, h) }
    }

    /// Where token `j` of entry `b` lives in K/V-shaped tensors (K, V, and the gradients dK, dV
    /// laid out like them): `(page, row)` of a paged cache, else `(b, j)`.
    pub fn kv_position(&self, b: usize, j: usize) -> (usize, usize) {
        match &self.block_table {
            Some(t) => t.locate(b, j),
            None => (b, j),
        }
    }

    /// The K/V cache's used lengths per batch entry, if the keys come from a cache.
    pub fn cache_seqlens(&self) -> Option<&[u32]> {
        self.cache_seqlens.as_deref()
    }

    /// The score modifiers of query head `h` (softcap, ALiBi slope; [`ScoreMod`]).
    pub fn score_mod(&self, h: usize) -> ScoreMod {
        ScoreMod::new(self.softcap, self.alibi_slopes.as_ref().and_then(|s| s.get(h)).copied().unwrap_or(0.0))
    }

    /// Whether any head has a score modifier (a softcap or non-zero ALiBi slopes).
    pub fn has_score_mod(&self) -> bool {
        self.score_mod
    }

    /// The ALiBi slopes, one per query head, when some slope is not 0 (`None` otherwise: no
    /// bias at all).
    pub fn alibi_slopes(&self) -> Option<&[f32]> {
        self.alibi_slopes.as_deref().filter(|s| s.iter().any(|&x| x != 0.0))
    }

    /// Q's layout.
    pub fn q(&self) -> &Layout {
        &self.q
    }

    /// K's layout.
    pub fn k(&self) -> &Layout {
        &self.k
    }

    /// V's layout.
    pub fn v(&self) -> &Layout {
        &self.v
    }

    /// O's layout (the shape of Q).
    pub fn o(&self) -> &Layout {
        &self.o
    }

    /// The softmax scale actually used.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Causal masking (bottom-right aligned).
    pub fn causal(&self) -> bool {
        self.causal
    }

    /// The sliding window (`Window::default()`: none).
    pub fn window(&self) -> Window {
        self.window
    }

    /// Packed variable-length sequences, if any.
    pub fn varlen(&self) -> Option<&VarLen> {
        self.varlen.as_ref()
    }

    /// Head dimension.
    pub fn head_dim(&self) -> usize {
        self.q.head_dim
    }

    /// `scale·log2(e)`: the factor the kernels apply to raw scores before `exp2`.
    pub fn scale_log2(&self) -> f32 {
        self.scale * flashattn_kernels::math::LOG2_E
    }

    /// Number of sequences (batch entries, or varlen sequences).
    pub fn batch(&self) -> usize {
        self.varlen.as_ref().map_or(self.q.batch, VarLen::batch)
    }

    /// Whether there is nothing to compute: no sequence, no query head, or no query token.
    pub fn is_empty(&self) -> bool {
        self.batch() == 0 || self.q.heads == 0 || self.max_lens().0 == 0
    }

    /// Query and key length of sequence `i`, and its first query and key token.
    pub fn sequence(&self, i: usize) -> Sequence {
        match &self.varlen {
            Some(vl) => {
                let (len_q, len_k) = vl.lens(i);
                Sequence {
                    batch_index: 0,
                    q_start: vl.cu_seqlens_q.get(i).map_or(0, |&x| x as usize),
                    k_start: vl.cu_seqlens_k.get(i).map_or(0, |&x| x as usize),
                    len_q,
                    len_k,
                }
            }
            None => Sequence {
                batch_index: i,
                q_start: 0,
                k_start: 0,
                len_q: self.q.seqlen,
                len_k: self.cache_seqlens.as_ref().and_then(|l| l.get(i)).map_or_else(
                    || self.block_table.as_ref().map_or(self.k.seqlen, |t| t.pages_per_entry * t.page_size),
                    |&l| l as usize,
                ),
            },
        }
    }

    /// Every sequence, in order.
    pub fn sequences(&self) -> impl Iterator<Item = Sequence> + '_ {
        (0..self.batch()).map(|i| self.sequence(i))
    }

    /// The longest query and key sequence.
    pub fn max_lens(&self) -> (usize, usize) {
        self.sequences().fold((0, 0), |(a, b), s| (a.max(s.len_q), b.max(s.len_k)))
    }

    /// Query heads per key/value head (1 for multi-head, `heads` for multi-query attention; 1
    /// for a problem without heads).
    pub fn group_size(&self) -> usize {
        (self.q.heads / self.k.heads.max(1)).max(1)
    }

    /// Elements of the log-sum-exp output: `heads × batch × seqlen_q` (`heads × total_q` varlen).
    /// (Checked at validation: it does not overflow.)
    pub fn lse_len(&self) -> usize {
        self.q.batch * self.q.heads * self.q.seqlen
    }

    /// Checks that a log-sum-exp buffer of `len` elements (if one is given) holds
    /// [`Problem::lse_len`] of them.
    pub fn check_lse_len(&self, len: Option<usize>) -> Result<(), InvalidInput> {
        match len {
            Some(len) if len < self.lse_len() => {
                Err(InvalidInput::LseTooSmall { needed: self.lse_len(), len })
            }
            _ => Ok(()),
        }
    }

    /// The backward pass's extra tensors: the upstream gradient `d_o` (read like O: O's shape,
    /// any strides) and the gradients (written like Q, K and V: their shapes, any strides that do
    /// not overlap), each with the length of the buffer behind it.
    pub fn check_backward(
        &self,
        d_o: (&Layout, usize),
        grads: [(&'static str, &Layout, usize); 3],
    ) -> Result<(), InvalidInput> {
        check_like("d_o", d_o.0, &self.o, d_o.1, false)?;
        for ((name, layout, len), like) in grads.into_iter().zip([&self.q, &self.k, &self.v]) {
            check_like(name, layout, like, len, true)?;
        }
        Ok(())
    }

    /// Rows of the log-sum-exp output per head: `seqlen_q` (the packed token count for varlen).
    pub fn lse_seq_stride(&self) -> usize {
        self.q.seqlen
    }

    /// Index of row `(sequence i, head h, query t)` in the log-sum-exp output, laid out
    /// `(batch, heads, seqlen_q)`, or `(heads, total_q)` for varlen: the kernels' own
    /// [`flashattn_kernels::params::lse_index`].
    pub fn lse_index(&self, i: usize, h: usize, t: usize) -> usize {
        let s = self.sequence(i);
        flashattn_kernels::params::lse_index(
            s.batch_index as u64,
            self.q.heads as u64,
            h as u64,
            self.lse_seq_stride() as u64,
            s.q_start as u64,
            t as u64,
        ) as usize
    }

    /// Whether query `t` may see key `j` of a sequence with `len_q` queries and `len_k` keys
    /// (always, without causal masking or window): the kernels' own [`flashattn_kernels::mask`]
    /// rule, and the window's bounds ([`Window`]).
    #[inline]
    pub fn visible(&self, t: usize, j: usize, len_q: usize, len_k: usize) -> bool {
        if self.window.is_none() {
            return !self.causal || flashattn_kernels::mask::visible_usize(t, j, len_q, len_k);
        }
        self.key_begin(t, len_q, len_k) <= j && j < self.key_end(t, len_q, len_k)
    }

    /// One past the last key query `t` sees (its keys are `key_begin..key_end`).
    #[inline]
    pub fn key_end(&self, t: usize, len_q: usize, len_k: usize) -> usize {
        let causal_end =
            if self.causal { flashattn_kernels::mask::key_end_usize(t + 1, len_q, len_k) } else { len_k };
        match (self.causal, self.window.right) {
            (false, Some(r)) => {
                // diagonal + r + 1, clamped to the keys.
                let end = (t as i128 + len_k as i128 - len_q as i128) + r as i128 + 1;
                end.clamp(0, len_k as i128) as usize
            }
            _ => causal_end,
        }
    }

    /// The first key query `t` sees (0 without a left window bound).
    #[inline]
    pub fn key_begin(&self, t: usize, len_q: usize, len_k: usize) -> usize {
        match self.window.left {
            None => 0,
            Some(l) => {
                let begin = (t as i128 + len_k as i128 - len_q as i128) - l as i128;
                begin.clamp(0, len_k as i128) as usize
            }
        }
    }

    /// The same problem with the query heads that share a K/V head packed into the rows of one
    /// query tile, so that K and V are read once per group instead of once per query head: for
    /// one query token per sequence (decoding) in a fixed-length batch with grouped K/V heads.
    /// Query head `h = kv·G + g` of batch entry `b` becomes query token `g` of head `kv`: Q and
    /// O are re-addressed (token stride = the head stride, head stride = `G·` the head stride),
    /// nothing is copied, and the log-sum-exp rows keep their places (`(b·H_kv + kv)·G + g`
    /// = `b·H + h`). A single query sees every key with or without the causal mask.
    pub(crate) fn gqa_packed(&self) -> Option<Problem> {
        let g = self.group_size();
        // (A window is relative to each query's position: packing would move it.)
        // (ALiBi too: its bias depends on the position and its slope on the query head.)
        if self.varlen.is_some()
            || self.q.seqlen != 1
            || g < 2
            || !self.window.is_none()
            || self.alibi_slopes().is_some()
        {
            return None;
        }
        let pack = |l: &Layout| Layout {
            seqlen: g,
            heads: l.heads / g,
            seq_stride: l.head_stride,
            head_stride: l.head_stride.saturating_mul(g),
            ..*l
        };
        Some(Problem { q: pack(&self.q), o: pack(&self.o), causal: false, varlen: None, ..self.clone() })
    }

    /// Attention FLOPs by the usual convention: `4·Σ(Nq·Nk)·heads·d` (two matrix products),
    /// halved for causal attention.
    pub fn flops(&self) -> f64 {
        let per_pair = 4.0 * self.q.heads as f64 * self.q.head_dim as f64;
        if !self.window.is_none() {
            // A window: the visible pairs, counted.
            let pairs: f64 = self
                .sequences()
                .flat_map(|s| {
                    (0..s.len_q).map(move |t| {
                        self.key_end(t, s.len_q, s.len_k).saturating_sub(self.key_begin(t, s.len_q, s.len_k))
                            as f64
                    })
                })
                .sum();
            return per_pair * pairs;
        }
        let pairs: f64 = self.sequences().map(|s| s.len_q as f64 * s.len_k as f64).sum();
        let f = per_pair * pairs;
        if self.causal { f / 2.0 } else { f }
    }
}

/// One sequence of a problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequence {
    /// Batch index into the layouts (0 for varlen).
    pub batch_index: usize,
    /// First query token (along the seq axis).
    pub q_start: usize,
    /// First key/value token.
    pub k_start: usize,
    /// Query tokens.
    pub len_q: usize,
    /// Key/value tokens.
    pub len_k: usize,
}

/// The split-KV override must be 1..=[`MAX_SPLITS`] (checked by [`Problem::new`] and by the
/// planner, which reads the options it is given).
pub(crate) fn check_splits(opts: &AttentionOptions) -> Result<(), InvalidInput> {
    match opts.splits {
        Some(splits) if splits == 0 || splits > MAX_SPLITS => Err(InvalidInput::Tiles {
            method: opts.method,
            block_m: opts.tiles.block_m,
            block_n: opts.tiles.block_n,
            reason: crate::plan::TileError::Splits { splits },
        }),
        _ => Ok(()),
    }
}

fn validate_varlen(vl: &VarLen, q: &Layout, k: &Layout) -> Result<(), InvalidInput> {
    if q.batch != 1 {
        return Err(InvalidInput::VarLenBatch { batch: q.batch });
    }
    if vl.cu_seqlens_q.len() != vl.cu_seqlens_k.len() || vl.cu_seqlens_q.is_empty() {
        return Err(InvalidInput::VarLenCounts { q: vl.cu_seqlens_q.len(), k: vl.cu_seqlens_k.len() });
    }
    for (name, offsets, total) in [("q", &vl.cu_seqlens_q, q.seqlen), ("k", &vl.cu_seqlens_k, k.seqlen)] {
        if offsets[0] != 0 {
            return Err(InvalidInput::VarLenOffsets {
                tensor: name,
                index: 0,
                value: offsets[0] as usize,
                limit: 0,
            });
        }
        for (i, w) in offsets.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(InvalidInput::VarLenOffsets {
                    tensor: name,
                    index: i + 1,
                    value: w[1] as usize,
                    limit: w[0] as usize,
                });
            }
        }
        let last = *offsets.last().unwrap_or(&0) as usize;
        if last > total {
            return Err(InvalidInput::VarLenTotal { tensor: name, last, tokens: total });
        }
    }
    Ok(())
}

/// A paged cache's table against Q (the batch) and K (the page pool): a power-of-two page size
/// of at least 16 that is K's seqlen, one row of `pages_per_entry` slots per batch entry, every
/// slot a page of the pool; not with varlen offsets.
pub(crate) fn check_block_table(
    t: &BlockTable,
    q: &Layout,
    k: &Layout,
    varlen: bool,
) -> Result<(), InvalidInput> {
    let bad = |why: String| Err(InvalidInput::BlockTable { why });
    if varlen {
        return bad("a paged cache needs a fixed-length batch (no cu_seqlens)".into());
    }
    if !t.page_size.is_power_of_two() || t.page_size < 16 {
        return bad(format!("page_size {} is not a power of two of at least 16", t.page_size));
    }
    if k.seqlen != t.page_size {
        return bad(format!(
            "K/V page pools have {} tokens a page, the table says {}",
            k.seqlen, t.page_size
        ));
    }
    if Some(t.pages.len()) != q.batch.checked_mul(t.pages_per_entry) {
        return bad(format!(
            "{} page slots for {} entries × {} slots each",
            t.pages.len(),
            q.batch,
            t.pages_per_entry
        ));
    }
    // The largest index first (a vectorised pass over a table of up to ~10⁵ slots per call),
    // the offending slot only when there is one.
    let largest = t.pages.iter().copied().max().unwrap_or(0);
    if largest as usize >= k.batch {
        if let Some((i, &p)) = t.pages.iter().enumerate().find(|&(_, &p)| p as usize >= k.batch) {
            return bad(format!("slot {i} names page {p}, the pools hold {} pages", k.batch));
        }
    }
    Ok(())
}

/// A tensor that must have `like`'s shape (any strides): the same four extents, a buffer of
/// `len` elements that holds the layout, and for an `output` elements that do not overlap.
pub(crate) fn check_like(
    name: &'static str,
    what: &Layout,
    like: &Layout,
    len: usize,
    output: bool,
) -> Result<(), InvalidInput> {
    for (dim, a, b) in [
        ("batch", what.batch, like.batch),
        ("seqlen", what.seqlen, like.seqlen),
        ("heads", what.heads, like.heads),
        ("head_dim", what.head_dim, like.head_dim),
    ] {
        if a != b {
            return Err(InvalidInput::ShapeMismatch { what: dim, tensor: name, expected: b, actual: a });
        }
    }
    let need = what.required_len().ok_or(InvalidInput::LayoutOverflow { tensor: name })?;
    if need > len {
        return Err(InvalidInput::BufferTooSmall { tensor: name, needed: need, len });
    }
    if output && what.overlaps() {
        return Err(InvalidInput::OverlappingOutput {
            strides: [what.batch_stride, what.seq_stride, what.head_stride],
            head_dim: what.head_dim,
        });
    }
    Ok(())
}

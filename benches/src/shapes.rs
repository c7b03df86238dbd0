//! What a sweep measures: shapes (dtype, batch, heads, sequence lengths, head dim, mask), the
//! method variants run on each, the named presets, and the expansion of a preset plus command-line
//! overrides into the list of cases.

use flashattn::{DType, Method};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Tokens per batch (B·N) of the headline grid.
pub const HEADLINE_TOKENS: usize = 16_384;
/// Hidden size (H·d) of the headline grid.
pub const HEADLINE_HIDDEN: usize = 2_048;
/// Sequence lengths of the headline grid.
pub const HEADLINE_SEQLENS: [usize; 5] = [1024, 2048, 4096, 8192, 16_384];
/// Largest tensor (Q, K, V or O) a sweep may ask for, in bytes: far beyond the presets, it
/// catches a typo before any memory is touched.
pub const MAX_TENSOR_BYTES: u64 = 16 << 30;

/// Which pass of attention a row times: the forward, the backward alone (given the forward's O
/// and log-sum-exp, computed beforehand), or the forward then the backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum Pass {
    /// The forward pass.
    #[value(name = "fwd")]
    Fwd,
    /// The backward pass alone.
    #[value(name = "bwd")]
    Bwd,
    /// The forward, then the backward.
    #[value(name = "fwd+bwd")]
    FwdBwd,
}

impl Pass {
    /// The name in records and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Pass::Fwd => "fwd",
            Pass::Bwd => "bwd",
            Pass::FwdBwd => "fwd+bwd",
        }
    }

    /// FLOPs of the pass over the forward's (FlashAttention's benchmark rule: the backward's five
    /// matmuls, S recomputed, dP, dV, dQ and dK, over the forward's two: 2.5; both: 3.5).
    pub fn flops_factor(self) -> f64 {
        match self {
            Pass::Fwd => 1.0,
            Pass::Bwd => 2.5,
            Pass::FwdBwd => 3.5,
        }
    }
}

/// Which keys each query sees.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum, Serialize, Deserialize,
)]
pub enum Mask {
    /// Every query sees every key.
    #[value(name = "none")]
    #[serde(rename = "none")]
    Dense,
    /// Query `i` sees keys `j ≤ i + Nk − Nq` (bottom-right aligned).
    #[value(name = "causal")]
    #[serde(rename = "causal")]
    Causal,
    /// Ragged sequence lengths around N (same total tokens), packed, no causal mask.
    #[value(name = "varlen")]
    #[serde(rename = "varlen")]
    Varlen,
    /// Ragged sequence lengths with the causal mask.
    #[value(name = "varlen-causal")]
    #[serde(rename = "varlen-causal")]
    VarlenCausal,
}

impl Mask {
    /// The name used on the command line and in records.
    pub const fn name(self) -> &'static str {
        match self {
            Mask::Dense => "none",
            Mask::Causal => "causal",
            Mask::Varlen => "varlen",
            Mask::VarlenCausal => "varlen-causal",
        }
    }

    /// Whether the causal mask applies.
    pub const fn causal(self) -> bool {
        matches!(self, Mask::Causal | Mask::VarlenCausal)
    }

    /// Whether the batch is packed variable-length sequences.
    pub const fn varlen(self) -> bool {
        matches!(self, Mask::Varlen | Mask::VarlenCausal)
    }
}

/// The element types a sweep may ask for (clap's view of [`DType`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DTypeArg {
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
}

impl From<DTypeArg> for DType {
    fn from(d: DTypeArg) -> DType {
        match d {
            DTypeArg::Bf16 => DType::BF16,
            DTypeArg::F16 => DType::F16,
            DTypeArg::F32 => DType::F32,
        }
    }
}

/// A tile override `block_m × block_n` for the flash kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileSpec {
    /// Query rows per block.
    pub block_m: usize,
    /// Keys per tile.
    pub block_n: usize,
}

impl std::fmt::Display for TileSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.block_m, self.block_n)
    }
}

impl std::str::FromStr for TileSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<TileSpec, String> {
        let bad =
            || format!("malformed tiles `{s}`: expected BLOCK_MxBLOCK_N with positive integers, e.g. 64x64");
        let (m, n) = s.trim().split_once(['x', 'X']).ok_or_else(bad)?;
        let m: usize = m.trim().parse().map_err(|_| bad())?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        if m == 0 || n == 0 {
            return Err(bad());
        }
        Ok(TileSpec { block_m: m, block_n: n })
    }
}

/// One method run on a shape: the method and, for the flash kernels, an optional tile override.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Which implementation.
    pub method: Method,
    /// Tile override (`None`: the library's choice).
    pub tiles: Option<TileSpec>,
}

impl Variant {
    /// `flash`, or `flash 32x64` with a tile override.
    pub fn label(&self) -> String {
        match self.tiles {
            Some(t) => format!("{} {t}", self.method),
            None => self.method.name().to_string(),
        }
    }
}

/// Whether a method takes tile overrides (the flash kernels do; standard attention does not).
pub fn takes_tiles(method: Method) -> bool {
    !matches!(method, Method::Standard)
}

/// A logit softcap `c` (`--softcap`): a positive finite number, so that shapes holding one can
/// be compared and hashed by its bits.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Softcap(f32);

impl Softcap {
    /// `c` if it is a positive finite number.
    pub fn new(c: f32) -> Option<Softcap> {
        (c.is_finite() && c > 0.0).then_some(Softcap(c))
    }

    /// The cap.
    pub fn get(self) -> f32 {
        self.0
    }
}

impl Eq for Softcap {}

impl std::hash::Hash for Softcap {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl std::fmt::Display for Softcap {
    /// The shortest decimal that reads back as the same `f32`: `30`, `50.5`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Softcap {
    type Err = String;
    fn from_str(s: &str) -> Result<Softcap, String> {
        s.trim().parse::<f32>().ok().and_then(Softcap::new).ok_or_else(|| {
            format!(
                "softcap `{s}` is not a positive finite number (scaled scores s become C·tanh(s/C), C > 0)"
            )
        })
    }
}

/// ALiBi slopes for `heads` query heads, BLOOM's: head `h` gets `2^(−8(h+1)/heads)`.
pub fn alibi_slopes(heads: usize) -> Vec<f32> {
    (0..heads).map(|h| (-8.0 * (h + 1) as f64 / heads as f64).exp2() as f32).collect()
}

/// One problem shape. K and V have `kv_heads` heads (grouped-query attention when fewer than Q's:
/// query head `h` attends with K/V head `h / (heads / kv_heads)`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Element type of Q, K, V and O.
    pub dtype: DType,
    /// Sequences (for varlen: how many ragged sequences are packed).
    pub batch: usize,
    /// Query (and output) heads.
    pub heads: usize,
    /// K and V heads: `heads` without grouped-query attention, else a divisor of it.
    pub kv_heads: usize,
    /// Query tokens per sequence (for varlen: with ragged lengths, the mean).
    pub seqlen_q: usize,
    /// Key tokens per sequence (for varlen: the mean).
    pub seqlen_k: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Mask.
    pub mask: Mask,
    /// Sliding window: keys a query sees before its (bottom-right-aligned) diagonal, combined
    /// with the mask (`flashattn::Window { left, right: None }`); `None`: no window.
    pub window: Option<usize>,
    /// Logit softcap (`AttentionOptions::softcap`); `None`: none.
    pub softcap: Option<Softcap>,
    /// ALiBi with BLOOM's slopes ([`alibi_slopes`]; `AttentionOptions::alibi_slopes`).
    pub alibi: bool,
}

impl Shape {
    /// The key that identifies this shape in every record (ours and the peers'), e.g.
    /// `bf16/B16/H16/N1024x1024/d128/causal`; with grouped-query attention the K/V heads follow
    /// the query heads, e.g. `bf16/B16/H32/KV8/N1x16384/d128/none` (so keys without it are the
    /// keys every earlier run recorded). A sliding window adds its left extent last, e.g.
    /// `bf16/B1/H16/N16384x16384/d128/causal/w1024` (keys without one are unchanged). Score
    /// modifiers follow: a softcap `/capC`, then ALiBi `/alibi`, e.g.
    /// `bf16/B4/H16/N4096x4096/d128/causal/w1024/cap30/alibi`.
    pub fn key(&self) -> String {
        let kv = if self.kv_heads == self.heads { String::new() } else { format!("/KV{}", self.kv_heads) };
        let w = self.window.map_or(String::new(), |l| format!("/w{l}"));
        let cap = self.softcap.map_or(String::new(), |c| format!("/cap{c}"));
        let alibi = if self.alibi { "/alibi" } else { "" };
        format!(
            "{}/B{}/H{}{kv}/N{}x{}/d{}/{}{w}{cap}{alibi}",
            self.dtype,
            self.batch,
            self.heads,
            self.seqlen_q,
            self.seqlen_k,
            self.head_dim,
            self.mask.name()
        )
    }

    /// Per-sequence (query, key) lengths: all equal, or ragged for varlen.
    pub fn lengths(&self) -> (Vec<u32>, Vec<u32>) {
        lengths(self.mask.varlen(), self.batch, self.seqlen_q, self.seqlen_k)
    }

    /// Elements of Q (= O, with `heads`) and of K (= V, with `kv_heads`).
    pub fn elems(&self) -> (u64, u64) {
        let (q_row, kv_row) = ((self.heads * self.head_dim) as u64, (self.kv_heads * self.head_dim) as u64);
        (self.batch as u64 * self.seqlen_q as u64 * q_row, self.batch as u64 * self.seqlen_k as u64 * kv_row)
    }

    /// Bytes of K plus V in the storage type that a call must read at least: the keys some query
    /// row sees ([`visible_keys`]: all of them without a window), K and V once each. What a
    /// decode step (Nq = 1) is judged by.
    pub fn kv_bytes(&self) -> u64 {
        let keys = kv_read_keys(self.mask.varlen(), self.batch, self.seqlen_q, self.seqlen_k, self.window);
        2 * keys * (self.kv_heads * self.head_dim) as u64 * self.dtype.size_bytes() as u64
    }

    /// Whether PyTorch can compute the same thing: no varlen, and causal only with Nq == Nk
    /// (`scaled_dot_product_attention`'s `is_causal` is top-left aligned, ours bottom-right),
    /// except with a window: only FlexAttention runs those (its mask aligns bottom-right, as
    /// ours), and the SDPA backends record them unsupported. The same for a score modifier
    /// (softcap, ALiBi): only FlexAttention applies one (its `score_mod`).
    pub fn peer_comparable(&self) -> bool {
        !self.mask.varlen()
            && (!self.mask.causal()
                || self.seqlen_q == self.seqlen_k
                || self.window.is_some()
                || self.has_score_mod())
    }

    /// Whether a softcap or ALiBi modifies the scores.
    pub fn has_score_mod(&self) -> bool {
        self.softcap.is_some() || self.alibi
    }
}

/// Per-sequence (query, key) lengths of `batch` sequences of (mean, for varlen) lengths `nq` and
/// `nk`: all equal, or ragged for varlen ([`varlen_lengths`]; the queries as the keys when
/// `nq == nk`, else `nq` each).
pub fn lengths(varlen: bool, batch: usize, nq: usize, nk: usize) -> (Vec<u32>, Vec<u32>) {
    if !varlen {
        return (vec![nq as u32; batch], vec![nk as u32; batch]);
    }
    let k = varlen_lengths(batch, nk);
    let q = if nq == nk { k.clone() } else { vec![nq as u32; batch] };
    (q, k)
}

/// Keys of one sequence (`nq` queries, `nk` keys) that at least one query row sees, so that a
/// call must read: all `nk` without a window; with a left window of `left` keys before each
/// query's bottom-right-aligned diagonal (query `i`'s is key `i + nk − nq`), the keys from the
/// first query's window start on, `min(nk, nq + left)` (`min(nk, left + 1)` for a decode step).
/// The causal mask removes no key from the union (the last query sees the last key).
pub fn visible_keys(nq: usize, nk: usize, window: Option<usize>) -> usize {
    window.map_or(nk, |left| nk.min(nq.saturating_add(left)))
}

/// [`visible_keys`] summed over the sequences of a shape (see [`lengths`]).
pub fn kv_read_keys(varlen: bool, batch: usize, nq: usize, nk: usize, window: Option<usize>) -> u64 {
    if window.is_none() || !varlen {
        return batch as u64 * visible_keys(nq, nk, window) as u64;
    }
    let (q, k) = lengths(varlen, batch, nq, nk);
    q.iter().zip(&k).map(|(&q, &k)| visible_keys(q as usize, k as usize, window) as u64).sum()
}

/// Ragged lengths around `n` for `batch` sequences, summing to `batch·n`, each at least 1:
/// uniform in about [n/2, 3n/2), drawn from a generator seeded by `(batch, n)`, so every run and
/// every machine gets the same lengths.
pub fn varlen_lengths(batch: usize, n: usize) -> Vec<u32> {
    if batch <= 1 || n <= 1 {
        return vec![n as u32; batch];
    }
    let mut rng = SmallRng::seed_from_u64((batch as u64) << 32 ^ n as u64 ^ 0x5eed_1e45);
    let mut lens: Vec<i64> =
        (0..batch).map(|_| ((n as f64) * (0.5 + rng.random::<f64>())).round().max(1.0) as i64).collect();
    let target = (batch * n) as i64;
    let mut diff = target - lens.iter().sum::<i64>();
    let mut i = 0;
    while diff != 0 {
        let step = diff.signum();
        if lens[i] + step >= 1 {
            lens[i] += step;
            diff -= step;
        }
        i = (i + 1) % batch;
    }
    lens.into_iter().map(|l| l as u32).collect()
}

/// How the batch (or the heads) of a block is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// A fixed number.
    Fixed(usize),
    /// `total / N` for the batch (B·N = total tokens), `total / d` for heads (H·d = hidden).
    Per(usize),
}

impl Size {
    /// The count for a divisor (N for the batch, d for the heads), at least 1.
    pub fn resolve(self, divisor: usize) -> usize {
        match self {
            Size::Fixed(x) => x,
            Size::Per(total) => (total / divisor.max(1)).max(1),
        }
    }
}

/// A grid of shapes and the variants run on each, part of a preset.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Which part of the sweep this is (headline, d256, varlen, decode, tiles, wall, …).
    pub group: &'static str,
    /// Element types.
    pub dtypes: Vec<DType>,
    /// Head dimensions.
    pub head_dims: Vec<usize>,
    /// Key sequence lengths N.
    pub seqlens: Vec<usize>,
    /// Query length when it differs from N (decode-like), else `None` (Nq = N).
    pub seqlen_q: Option<usize>,
    /// Batch rule.
    pub batch: Size,
    /// Heads rule.
    pub heads: Size,
    /// K/V heads (grouped-query attention); `None`: as many as the query heads.
    pub kv_heads: Option<usize>,
    /// Masks.
    pub masks: Vec<Mask>,
    /// Methods.
    pub methods: Vec<Method>,
    /// Tile overrides for the flash methods (`None` entry: the library default).
    pub tiles: Vec<Option<TileSpec>>,
    /// Whether to measure the complete path (upload, layout, launch overhead, download).
    pub complete: bool,
}

/// Named sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// A small cut of everything (headline shapes at N = 1024 and 4096, a varlen, a decode, an f32
    /// and an f16 row, a few tile overrides): about a minute on one GPU.
    Quick,
    /// Exactly bf16 and f16 × d ∈ {64, 128} × causal ∈ {no, yes} × N ∈ {1024 … 16384}, with
    /// B = 16384/N and H = 2048/d.
    Headline,
    /// The headline grid plus d = 256, f32, varlen, decode (Nq = 1), tile and memory-wall sweeps.
    Full,
    /// `full` without the headline grid (to split a full sweep into two runs).
    Extras,
    /// The CPU sweep (what `run` falls back to without a GPU).
    Cpu,
    /// Every head dim real models use, d ∈ {32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 224,
    /// 256}, bf16 and f16, N = 4096, causal and not, B·N = 16384 and H = 2048/d (rounded down),
    /// through `auto` (the tensor-core kernel, head dims padded up to an instantiated one).
    HeadDims,
    /// Named models' attention, bf16, through `auto` (the library's default plan, no tile
    /// overrides), each case's group naming its model: LLM prefill and decode (Nq = 1 against a
    /// K/V cache up to 128k, grouped-query K/V heads), SD 1.5 UNet and ViT-B/16.
    ///
    /// Query heads / K/V heads / head dim:
    /// - LLM prefill (causal, Nq = Nk = 4096 with B = 4 and Nq = Nk = 1024 with B = 16):
    ///   Llama-3-8B 32/8/128 (Mistral-7B has exactly this attention, so its rows are these:
    ///   group `llama3-8b+mistral-7b-prefill`), Phi-3-mini 32/32/96, Gemma-2-9B 16/8/256 (its
    ///   4096-token sliding window equals full causal attention at these lengths; its logit
    ///   soft-capping is not modeled).
    /// - LLM decode (Nq = 1 query against a K/V cache of Nk, no mask: with one query the
    ///   bottom-right causal mask hides nothing): Llama-3-8B with B ∈ {1, 4, 16, 64} ×
    ///   Nk ∈ {1024, 4096, 16384, 65536, 131072}; Phi-3-mini and Gemma-2-9B with B ∈ {1, 16} ×
    ///   Nk ∈ {4096, 65536}. Combinations whose K + V exceed 24 GiB
    ///   ([`MODELS_MAX_KV_BYTES`]) are left out: only Llama-3-8B B = 64 × Nk = 131072
    ///   (2·64·131072·8·128·2 bytes = 32 GiB).
    /// - Stable Diffusion 1.5 UNet self-attention, 8 heads, B = 2, no mask: d = 40 at N = 4096,
    ///   d = 80 at N = 1024, d = 160 at N = 256 (group `sd15-unet`).
    /// - ViT-B/16: 12/12/64, N = 197, B = 64, no mask (group `vit-b16`).
    Models,
}

/// The head dims of the `head-dims` preset.
pub const HEAD_DIMS_SWEEP: [usize; 12] = [32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256];

/// The most K + V bytes a decode shape of the `models` preset may hold; larger combinations of
/// batch and cache length are left out of it.
pub const MODELS_MAX_KV_BYTES: u64 = 24 << 30;
/// Batch sizes of the Llama-3-8B decode grid.
pub const LLAMA_DECODE_BATCHES: [usize; 4] = [1, 4, 16, 64];
/// K/V cache lengths of the Llama-3-8B decode grid.
pub const LLAMA_DECODE_CACHE: [usize; 5] = [1024, 4096, 16_384, 65_536, 131_072];

/// One model's attention: query heads, K/V heads, head dim.
#[derive(Clone, Copy, Debug)]
struct ModelAttn {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

const LLAMA3_8B: ModelAttn = ModelAttn { heads: 32, kv_heads: 8, head_dim: 128 };
const PHI3_MINI: ModelAttn = ModelAttn { heads: 32, kv_heads: 32, head_dim: 96 };
const GEMMA2_9B: ModelAttn = ModelAttn { heads: 16, kv_heads: 8, head_dim: 256 };

/// A `models` block: bf16, one model's heads and head dim, `auto` with the library's tiles.
fn model_block(group: &'static str, m: ModelAttn, seqlens: &[usize], batch: Size, mask: Mask) -> Block {
    Block {
        batch,
        heads: Size::Fixed(m.heads),
        kv_heads: (m.kv_heads != m.heads).then_some(m.kv_heads),
        masks: vec![mask],
        methods: vec![Method::Auto],
        ..block(group, &[DType::BF16], &[m.head_dim], seqlens)
    }
}

/// Causal prefill of an LLM: Nq = Nk = 1024 with B = 16 and 4096 with B = 4.
fn prefill(group: &'static str, m: ModelAttn) -> Block {
    model_block(group, m, &[1024, 4096], Size::Per(HEADLINE_TOKENS), Mask::Causal)
}

/// Decode steps of an LLM (Nq = 1, no mask), one block per batch size, without the cache
/// lengths whose K + V exceed [`MODELS_MAX_KV_BYTES`].
fn decode(group: &'static str, m: ModelAttn, batches: &[usize], cache: &[usize]) -> Vec<Block> {
    let e = DType::BF16.size_bytes() as u64;
    let kv_bytes = |b: usize, n: usize| 2 * (b * n * m.kv_heads * m.head_dim) as u64 * e;
    batches
        .iter()
        .map(|&b| {
            let fits: Vec<usize> =
                cache.iter().copied().filter(|&n| kv_bytes(b, n) <= MODELS_MAX_KV_BYTES).collect();
            Block { seqlen_q: Some(1), ..model_block(group, m, &fits, Size::Fixed(b), Mask::Dense) }
        })
        .filter(|b| !b.seqlens.is_empty())
        .collect()
}

/// The blocks of the `models` preset (see [`Preset::Models`]).
fn models_blocks() -> Vec<Block> {
    let sd = |d: usize, n: usize| {
        let m = ModelAttn { heads: 8, kv_heads: 8, head_dim: d };
        model_block("sd15-unet", m, &[n], Size::Fixed(2), Mask::Dense)
    };
    let vit = ModelAttn { heads: 12, kv_heads: 12, head_dim: 64 };
    let mut v = vec![prefill("llama3-8b+mistral-7b-prefill", LLAMA3_8B)];
    v.extend(decode("llama3-8b-decode", LLAMA3_8B, &LLAMA_DECODE_BATCHES, &LLAMA_DECODE_CACHE));
    v.push(prefill("phi3-mini-prefill", PHI3_MINI));
    v.extend(decode("phi3-mini-decode", PHI3_MINI, &[1, 16], &[4096, 65_536]));
    v.push(prefill("gemma2-9b-prefill", GEMMA2_9B));
    v.extend(decode("gemma2-9b-decode", GEMMA2_9B, &[1, 16], &[4096, 65_536]));
    v.extend([sd(40, 4096), sd(80, 1024), sd(160, 256)]);
    v.push(model_block("vit-b16", vit, &[197], Size::Fixed(64), Mask::Dense));
    v
}

const ALL_GPU_METHODS: [Method; 3] = [Method::Flash, Method::FlashTensorCore, Method::Standard];

fn block(group: &'static str, dtypes: &[DType], head_dims: &[usize], seqlens: &[usize]) -> Block {
    Block {
        group,
        dtypes: dtypes.to_vec(),
        head_dims: head_dims.to_vec(),
        seqlens: seqlens.to_vec(),
        seqlen_q: None,
        batch: Size::Per(HEADLINE_TOKENS),
        heads: Size::Per(HEADLINE_HIDDEN),
        kv_heads: None,
        masks: vec![Mask::Dense, Mask::Causal],
        methods: ALL_GPU_METHODS.to_vec(),
        tiles: vec![None],
        complete: false,
    }
}

/// Every valid tile of the general flash kernel that the tile sweep visits.
fn tile_grid() -> Vec<Option<TileSpec>> {
    let mut v = Vec::new();
    for block_m in [16, 32, 64] {
        for block_n in [32, 64, 128] {
            v.push(Some(TileSpec { block_m, block_n }));
        }
    }
    v
}

/// The tiles the tensor-core kernel has for a head dim (from the kernel crate's configuration
/// table), each once.
pub fn mma_tiles(head_dim: usize) -> Vec<Option<TileSpec>> {
    let mut v: Vec<Option<TileSpec>> = Vec::new();
    for c in flashattn::kernels::config::MMA_CONFIGS.iter().filter(|c| c.head_dim as usize == head_dim) {
        let t = Some(TileSpec { block_m: c.block_m as usize, block_n: c.block_n as usize });
        if !v.contains(&t) {
            v.push(t);
        }
    }
    v
}

impl Preset {
    /// The blocks of this preset, before command-line overrides.
    pub fn blocks(self) -> Vec<Block> {
        use DType::{BF16, F16, F32};
        let headline =
            Block { complete: true, ..block("headline", &[BF16, F16], &[64, 128], &HEADLINE_SEQLENS) };
        match self {
            Preset::Headline => vec![headline],
            Preset::Quick => vec![
                Block { complete: true, ..block("headline", &[BF16], &[64, 128], &[1024, 4096]) },
                Block {
                    masks: vec![Mask::VarlenCausal],
                    methods: vec![Method::Flash, Method::Standard],
                    ..block("varlen", &[BF16], &[128], &[2048])
                },
                Block {
                    seqlen_q: Some(1),
                    batch: Size::Fixed(16),
                    masks: vec![Mask::Dense],
                    methods: vec![Method::Flash, Method::Standard],
                    ..block("decode", &[BF16], &[128], &[4096])
                },
                Block {
                    masks: vec![Mask::Dense],
                    methods: vec![Method::Flash, Method::Standard],
                    ..block("dtype", &[F32, F16], &[128], &[1024])
                },
                Block {
                    masks: vec![Mask::Dense],
                    methods: vec![Method::Flash],
                    tiles: [(16, 64), (32, 64), (64, 32), (64, 128)]
                        .map(|(block_m, block_n)| Some(TileSpec { block_m, block_n }))
                        .to_vec(),
                    ..block("tiles", &[BF16], &[128], &[4096])
                },
                Block {
                    masks: vec![Mask::Dense],
                    methods: vec![Method::FlashTensorCore],
                    tiles: mma_tiles(128),
                    ..block("tiles", &[BF16], &[128], &[4096])
                },
            ],
            Preset::Extras => Preset::Full.blocks().into_iter().filter(|b| b.group != "headline").collect(),
            Preset::Full => vec![
                headline,
                block("d256", &[BF16], &[256], &HEADLINE_SEQLENS),
                Block {
                    methods: vec![Method::Flash, Method::Standard],
                    ..block("dtype", &[F32], &[64, 128], &[1024, 2048, 4096])
                },
                Block {
                    masks: vec![Mask::Varlen, Mask::VarlenCausal],
                    methods: vec![Method::Flash, Method::Standard],
                    ..block("varlen", &[BF16], &[64, 128], &[1024, 2048, 4096])
                },
                Block {
                    seqlen_q: Some(1),
                    batch: Size::Fixed(16),
                    masks: vec![Mask::Dense],
                    ..block("decode", &[BF16], &[64, 128], &[1024, 4096, 16_384])
                },
                Block {
                    methods: vec![Method::Flash],
                    tiles: tile_grid(),
                    ..block("tiles", &[BF16], &[64, 128], &[4096])
                },
                Block {
                    methods: vec![Method::FlashTensorCore],
                    tiles: mma_tiles(64),
                    ..block("tiles", &[BF16], &[64], &[4096])
                },
                Block {
                    methods: vec![Method::FlashTensorCore],
                    tiles: mma_tiles(128),
                    ..block("tiles", &[BF16], &[128], &[4096])
                },
                // The memory wall: one sequence, N growing until standard attention's N×N buffers
                // no longer fit (at N = 65536 they need about 412 GB).
                Block {
                    batch: Size::Fixed(1),
                    heads: Size::Fixed(16),
                    masks: vec![Mask::Dense],
                    methods: vec![Method::Standard],
                    ..block("wall", &[BF16], &[128], &[4096, 8192, 16_384, 32_768, 65_536])
                },
                Block {
                    batch: Size::Fixed(1),
                    heads: Size::Fixed(16),
                    masks: vec![Mask::Dense],
                    methods: vec![Method::Flash],
                    ..block("wall", &[BF16], &[128], &[4096, 8192, 16_384, 32_768])
                },
            ],
            Preset::HeadDims => vec![Block {
                methods: vec![Method::Auto],
                ..block("head-dims", &[BF16, F16], &HEAD_DIMS_SWEEP, &[4096])
            }],
            Preset::Models => models_blocks(),
            Preset::Cpu => vec![Block {
                batch: Size::Fixed(1),
                heads: Size::Fixed(2),
                methods: vec![],
                ..block("cpu", &[F32], &[64], &[128, 256, 512, 1024])
            }],
        }
    }
}

/// Command-line overrides of a preset's axes; `None` keeps the preset's value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Key sequence lengths.
    pub seqlens: Option<Vec<usize>>,
    /// Head dims.
    pub head_dims: Option<Vec<usize>>,
    /// Batch rule.
    pub batch: Option<Size>,
    /// Heads rule.
    pub heads: Option<Size>,
    /// K/V heads (a divisor of the query heads).
    pub kv_heads: Option<usize>,
    /// Masks.
    pub masks: Option<Vec<Mask>>,
    /// Dtypes.
    pub dtypes: Option<Vec<DType>>,
    /// Query length (decode-like when different from N).
    pub seqlen_q: Option<usize>,
    /// Tile overrides for the flash methods.
    pub tiles: Option<Vec<Option<TileSpec>>>,
    /// Methods.
    pub methods: Option<Vec<Method>>,
    /// Complete-path measurements: `Some(true)` for every shape, `Some(false)` for none.
    pub complete: Option<bool>,
    /// Left sliding windows: every shape runs once per entry, with that window (see
    /// [`with_windows`]); `None`: no window.
    pub windows: Option<Vec<usize>>,
    /// Logit softcaps: every shape runs once per entry, with that softcap (see
    /// [`with_score_mods`]); `None`: no softcap.
    pub softcaps: Option<Vec<Softcap>>,
    /// ALiBi (BLOOM's slopes) on every shape.
    pub alibi: bool,
}

impl Overrides {
    /// Applies the overrides to one block.
    pub fn apply(&self, mut b: Block) -> Block {
        if let Some(x) = &self.seqlens {
            b.seqlens = x.clone();
        }
        if let Some(x) = &self.head_dims {
            b.head_dims = x.clone();
        }
        if let Some(x) = self.batch {
            b.batch = x;
        }
        if let Some(x) = self.heads {
            b.heads = x;
        }
        if let Some(x) = self.kv_heads {
            b.kv_heads = Some(x);
        }
        if let Some(x) = &self.masks {
            b.masks = x.clone();
        }
        if let Some(x) = &self.dtypes {
            b.dtypes = x.clone();
        }
        if let Some(x) = self.seqlen_q {
            b.seqlen_q = Some(x);
        }
        if let Some(x) = &self.tiles {
            b.tiles = x.clone();
        }
        if let Some(x) = &self.methods {
            b.methods = x.clone();
        }
        if let Some(x) = self.complete {
            b.complete = x;
        }
        b
    }

    /// Expanded cases with the windows and score modifiers asked for: each case once per window,
    /// and each of those once per softcap ([`with_windows`], [`with_score_mods`]).
    pub fn modify(&self, cases: Vec<Case>) -> Vec<Case> {
        with_score_mods(with_windows(cases, self.windows.as_deref()), self.softcaps.as_deref(), self.alibi)
    }
}

/// One shape and everything run on it.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The shape.
    pub shape: Shape,
    /// Which block it came from first.
    pub group: &'static str,
    /// Methods and tile overrides, each one row.
    pub variants: Vec<Variant>,
    /// Whether to measure the complete path on this shape.
    pub complete: bool,
}

/// Expands blocks into cases, one per distinct shape (a shape that two blocks produce runs once,
/// with the variants of both), in the order the blocks list them.
pub fn expand(blocks: &[Block]) -> Result<Vec<Case>, String> {
    let mut cases: Vec<Case> = Vec::new();
    for b in blocks {
        for &dtype in &b.dtypes {
            for &head_dim in &b.head_dims {
                for &mask in &b.masks {
                    for &n in &b.seqlens {
                        let heads = b.heads.resolve(head_dim);
                        let shape = Shape {
                            dtype,
                            batch: b.batch.resolve(n),
                            heads,
                            kv_heads: b.kv_heads.unwrap_or(heads),
                            seqlen_q: b.seqlen_q.unwrap_or(n),
                            seqlen_k: n,
                            head_dim,
                            mask,
                            window: None,
                            softcap: None,
                            alibi: false,
                        };
                        check_shape(&shape)?;
                        let mut variants = Vec::new();
                        for &method in &b.methods {
                            if takes_tiles(method) {
                                variants.extend(b.tiles.iter().map(|&tiles| Variant { method, tiles }));
                            } else {
                                variants.push(Variant { method, tiles: None });
                            }
                        }
                        match cases.iter_mut().find(|c| c.shape == shape) {
                            Some(c) => {
                                for v in variants {
                                    if !c.variants.contains(&v) {
                                        c.variants.push(v);
                                    }
                                }
                                c.complete |= b.complete;
                            }
                            None => {
                                cases.push(Case { shape, group: b.group, variants, complete: b.complete })
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(cases)
}

/// Each case once per left window of `windows` (a case's windowed copies next to each other, in
/// the order of `windows`), the window set on its shape; `None` leaves the cases as they are (no window).
pub fn with_windows(cases: Vec<Case>, windows: Option<&[usize]>) -> Vec<Case> {
    let Some(windows) = windows else { return cases };
    let mut out = Vec::with_capacity(cases.len() * windows.len());
    for c in cases {
        for &w in windows {
            let mut c = c.clone();
            c.shape.window = Some(w);
            if !out.iter().any(|o: &Case| o.shape == c.shape) {
                out.push(c);
            }
        }
    }
    out
}

/// Each case once per softcap of `softcaps` (`None`: as they are, no softcap; a case's copies
/// next to each other, in the order of `softcaps`), the softcap set on its shape, and with
/// `alibi`, ALiBi on every shape. Applied after [`with_windows`], so that every window meets every
/// softcap.
pub fn with_score_mods(cases: Vec<Case>, softcaps: Option<&[Softcap]>, alibi: bool) -> Vec<Case> {
    let mut out: Vec<Case> = Vec::with_capacity(cases.len() * softcaps.map_or(1, <[_]>::len));
    for c in cases {
        let caps: Vec<Option<Softcap>> = match softcaps {
            Some(v) => v.iter().copied().map(Some).collect(),
            None => vec![c.shape.softcap],
        };
        for cap in caps {
            let mut c = c.clone();
            c.shape.softcap = cap;
            c.shape.alibi |= alibi;
            if !out.iter().any(|o| o.shape == c.shape) {
                out.push(c);
            }
        }
    }
    out
}

/// Refuses shapes no run should attempt (zero extents, a head dim over the library's limit, a
/// tensor over [`MAX_TENSOR_BYTES`]).
pub fn check_shape(s: &Shape) -> Result<(), String> {
    if s.head_dim == 0 || s.head_dim > flashattn::MAX_HEAD_DIM {
        return Err(format!("head dim {} is outside 1..={}", s.head_dim, flashattn::MAX_HEAD_DIM));
    }
    if s.batch == 0 || s.heads == 0 || s.kv_heads == 0 || s.seqlen_q == 0 || s.seqlen_k == 0 {
        return Err(format!("shape {} has a zero extent", s.key()));
    }
    if !s.heads.is_multiple_of(s.kv_heads) {
        return Err(format!(
            "shape {}: {} query heads are not a multiple of {} K/V heads (set --heads and --kv-heads together)",
            s.key(),
            s.heads,
            s.kv_heads
        ));
    }
    let (q, k) = s.elems();
    let bytes = q.max(k).saturating_mul(s.dtype.size_bytes() as u64);
    if bytes > MAX_TENSOR_BYTES {
        return Err(format!(
            "shape {} needs a {:.1} GiB tensor; the limit is {} GiB",
            s.key(),
            bytes as f64 / (1u64 << 30) as f64,
            MAX_TENSOR_BYTES >> 30
        ));
    }
    if s.mask.varlen() && s.batch as u64 * s.seqlen_k as u64 > u32::MAX as u64 {
        return Err(format!("shape {} has more packed tokens than 2³²", s.key()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models;

    #[test]
    fn headline_is_the_issue_grid() {
        let cases = expand(&Preset::Headline.blocks()).unwrap();
        assert_eq!(cases.len(), 2 * 2 * 2 * 5);
        for c in &cases {
            let s = &c.shape;
            assert_eq!(s.batch * s.seqlen_k, 16_384, "{}", s.key());
            assert_eq!(s.heads * s.head_dim, 2048, "{}", s.key());
            assert!(c.complete);
            let methods: Vec<_> = c.variants.iter().map(|v| v.method).collect();
            assert_eq!(methods, [Method::Flash, Method::FlashTensorCore, Method::Standard]);
        }
        assert!(cases.iter().any(|c| c.shape.key() == "bf16/B1/H16/N16384x16384/d128/causal"));
        assert!(cases.iter().any(|c| c.shape.key() == "f16/B16/H32/N1024x1024/d64/none"));
    }

    #[test]
    fn full_merges_duplicate_shapes_and_keeps_their_variants() {
        let cases = expand(&Preset::Full.blocks()).unwrap();
        let mut keys: Vec<_> = cases.iter().map(|c| c.shape.key()).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "every shape once");
        let tiled = cases.iter().find(|c| c.shape.key() == "bf16/B4/H16/N4096x4096/d128/none").unwrap();
        assert_eq!(tiled.group, "headline");
        assert!(tiled.variants.len() >= 3 + 9 + 2);
        assert!(tiled.variants.iter().any(|v| v.method == Method::FlashTensorCore && v.tiles.is_some()));
        assert!(!mma_tiles(128).is_empty() && mma_tiles(128).iter().all(|t| t.is_some()));
        let wall = cases.iter().find(|c| c.shape.key() == "bf16/B1/H16/N65536x65536/d128/none").unwrap();
        assert_eq!(wall.variants, [Variant { method: Method::Standard, tiles: None }]);
        assert!(cases.iter().any(|c| c.shape.seqlen_q == 1 && c.shape.seqlen_k == 16_384));
        assert!(cases.iter().any(|c| c.shape.head_dim == 256 && c.shape.heads == 8));
    }

    #[test]
    fn k_and_v_bytes_count_the_keys_some_query_sees() {
        assert_eq!(visible_keys(1, 16_384, None), 16_384);
        assert_eq!(visible_keys(1, 16_384, Some(1024)), 1025);
        assert_eq!(visible_keys(1, 16_384, Some(4096)), 4097);
        assert_eq!(visible_keys(1, 512, Some(1024)), 512);
        assert_eq!(visible_keys(4096, 16_384, Some(1024)), 5120);
        assert_eq!(visible_keys(16_384, 16_384, Some(1024)), 16_384, "prefill: every key is seen");
        let s = Shape {
            dtype: DType::BF16,
            batch: 4,
            heads: 8,
            kv_heads: 2,
            seqlen_q: 1,
            seqlen_k: 4096,
            head_dim: 64,
            mask: Mask::Causal,
            window: None,
            softcap: None,
            alibi: false,
        };
        let per_key = 2 * 2 * 64 * 2;
        assert_eq!(s.kv_bytes(), 4 * 4096 * per_key);
        assert_eq!(Shape { window: Some(100), ..s.clone() }.kv_bytes(), 4 * 101 * per_key);
        // Varlen: per ragged sequence.
        let v = Shape { mask: Mask::VarlenCausal, seqlen_q: 1, seqlen_k: 60, window: Some(60), ..s };
        let (q, k) = v.lengths();
        assert!(k.iter().any(|&k| k < 61) && k.iter().any(|&k| k > 61), "{k:?}");
        let keys: u64 = q.iter().zip(&k).map(|(&a, &b)| (b as u64).min(a as u64 + 60)).sum();
        assert_eq!(v.kv_bytes(), keys * per_key);
        assert_eq!(Shape { window: None, ..v.clone() }.kv_bytes(), 4 * 60 * per_key);
    }

    #[test]
    fn extras_and_headline_make_full() {
        let keys = |p: Preset| {
            let mut k: Vec<String> = expand(&p.blocks()).unwrap().iter().map(|c| c.shape.key()).collect();
            k.sort();
            k
        };
        let mut both = [keys(Preset::Headline), keys(Preset::Extras)].concat();
        both.sort();
        both.dedup();
        assert_eq!(both, keys(Preset::Full));
    }

    #[test]
    fn keys_without_gqa_are_unchanged_and_gqa_keys_name_the_kv_heads() {
        let mut s = Shape {
            dtype: DType::BF16,
            batch: 16,
            heads: 16,
            kv_heads: 16,
            seqlen_q: 1024,
            seqlen_k: 1024,
            head_dim: 128,
            mask: Mask::Causal,
            window: None,
            softcap: None,
            alibi: false,
        };
        assert_eq!(s.key(), "bf16/B16/H16/N1024x1024/d128/causal");
        assert_eq!(s.elems(), (16 * 1024 * 16 * 128, 16 * 1024 * 16 * 128));
        (s.heads, s.kv_heads, s.seqlen_q, s.seqlen_k, s.mask) = (32, 8, 1, 16_384, Mask::Dense);
        assert_eq!(s.key(), "bf16/B16/H32/KV8/N1x16384/d128/none");
        assert_eq!(s.elems(), (16 * 32 * 128, 16 * 16_384 * 8 * 128));
        assert_eq!(s.kv_bytes(), 1 << 30);
        assert!(check_shape(&s).is_ok());
        let w = Shape { window: Some(1024), mask: Mask::Causal, ..s.clone() };
        assert_eq!(w.key(), "bf16/B16/H32/KV8/N1x16384/d128/causal/w1024");
        assert_ne!(
            w.key(),
            Shape { window: None, ..w.clone() }.key(),
            "rows with and without a window never collide"
        );
        assert!(w.peer_comparable(), "FlexAttention aligns a window bottom-right, as ours");
        assert!(!Shape { window: None, ..w.clone() }.peer_comparable());
        assert!(!Shape { mask: Mask::VarlenCausal, ..w }.peer_comparable());
        s.kv_heads = 5;
        assert!(check_shape(&s).unwrap_err().contains("not a multiple of 5 K/V heads"));
        s.kv_heads = 0;
        assert!(check_shape(&s).unwrap_err().contains("zero extent"));
        // Every preset that existed before grouped-query attention keeps its keys.
        for p in [Preset::Quick, Preset::Full, Preset::HeadDims, Preset::Cpu] {
            for c in expand(&p.blocks()).unwrap() {
                assert_eq!(c.shape.kv_heads, c.shape.heads);
                assert!(!c.shape.key().contains("KV"), "{}", c.shape.key());
            }
        }
    }

    #[test]
    fn models_has_the_llama_decode_grid_with_eight_kv_heads() {
        let cases = expand(&Preset::Models.blocks()).unwrap();
        let decode: Vec<&Case> = cases.iter().filter(|c| c.group == "llama3-8b-decode").collect();
        // 4 batches × 5 cache lengths, less B = 64 × 131072 (32 GiB of K + V).
        assert_eq!(decode.len(), 4 * 5 - 1);
        for &b in &LLAMA_DECODE_BATCHES {
            for &n in &LLAMA_DECODE_CACHE {
                let key = format!("bf16/B{b}/H32/KV8/N1x{n}/d128/none");
                let found = decode.iter().find(|c| c.shape.key() == key);
                assert_eq!(found.is_some(), (b, n) != (64, 131_072), "{key}");
            }
        }
        for c in &decode {
            let s = &c.shape;
            assert_eq!((s.heads, s.kv_heads, s.head_dim, s.seqlen_q, s.mask), (32, 8, 128, 1, Mask::Dense));
            assert!(s.kv_bytes() <= MODELS_MAX_KV_BYTES);
            assert!(models::problem(s).is_ok(), "{}", s.key());
        }
        // Every row is the library's default plan, bf16.
        for c in &cases {
            assert_eq!(c.variants, [Variant { method: Method::Auto, tiles: None }], "{}", c.shape.key());
            assert_eq!(c.shape.dtype, DType::BF16);
            assert!(check_shape(&c.shape).is_ok());
        }
        let key_of = |group: &str| -> Vec<String> {
            cases.iter().filter(|c| c.group == group).map(|c| c.shape.key()).collect()
        };
        assert_eq!(
            key_of("llama3-8b+mistral-7b-prefill"),
            ["bf16/B16/H32/KV8/N1024x1024/d128/causal", "bf16/B4/H32/KV8/N4096x4096/d128/causal"]
        );
        assert_eq!(key_of("phi3-mini-decode").len(), 4);
        assert!(key_of("phi3-mini-decode").contains(&"bf16/B16/H32/N1x65536/d96/none".to_string()));
        assert!(key_of("gemma2-9b-decode").contains(&"bf16/B1/H16/KV8/N1x4096/d256/none".to_string()));
        assert_eq!(key_of("gemma2-9b-prefill")[1], "bf16/B4/H16/KV8/N4096x4096/d256/causal");
        assert_eq!(
            key_of("sd15-unet"),
            [
                "bf16/B2/H8/N4096x4096/d40/none",
                "bf16/B2/H8/N1024x1024/d80/none",
                "bf16/B2/H8/N256x256/d160/none"
            ]
        );
        assert_eq!(key_of("vit-b16"), ["bf16/B64/H12/N197x197/d64/none"]);
        assert_eq!(cases.len(), 2 + 19 + 2 + 4 + 2 + 4 + 3 + 1);
    }

    #[test]
    fn overrides_replace_axes() {
        let o = Overrides {
            seqlens: Some(vec![512]),
            head_dims: Some(vec![32]),
            batch: Some(Size::Fixed(3)),
            heads: Some(Size::Fixed(5)),
            kv_heads: None,
            masks: Some(vec![Mask::Causal]),
            dtypes: Some(vec![DType::F32]),
            seqlen_q: Some(7),
            tiles: Some(vec![Some(TileSpec { block_m: 16, block_n: 32 })]),
            methods: Some(vec![Method::Flash, Method::Standard]),
            complete: Some(false),
            windows: None,
            softcaps: None,
            alibi: false,
        };
        let blocks: Vec<_> = Preset::Quick.blocks().into_iter().map(|b| o.apply(b)).collect();
        let cases = expand(&blocks).unwrap();
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0].shape.key(), "f32/B3/H5/N7x512/d32/causal");
        assert_eq!(cases[0].variants.len(), 2);
        assert_eq!(cases[0].variants[0].label(), "flash 16x32");
        assert!(!cases[0].complete);
    }

    #[test]
    fn windows_multiply_the_cases() {
        let o = Overrides {
            seqlens: Some(vec![1024, 2048]),
            masks: Some(vec![Mask::Causal]),
            dtypes: Some(vec![DType::BF16]),
            head_dims: Some(vec![64]),
            windows: Some(vec![128, 512]),
            ..Default::default()
        };
        let blocks: Vec<_> = Preset::Quick.blocks().into_iter().map(|b| o.apply(b)).collect();
        let plain = expand(&blocks).unwrap();
        assert!(plain.iter().all(|c| c.shape.window.is_none()));
        assert_eq!(with_windows(plain.clone(), None), plain);
        let windowed = with_windows(plain.clone(), o.windows.as_deref());
        assert_eq!(windowed.len(), 2 * plain.len());
        assert_eq!(windowed[0].shape, Shape { window: Some(128), ..plain[0].shape.clone() });
        assert_eq!(windowed[1].shape, Shape { window: Some(512), ..plain[0].shape.clone() });
        assert_eq!(windowed[1].variants, plain[0].variants);
        assert!(windowed[1].shape.key().ends_with("/causal/w512"), "{}", windowed[1].shape.key());
    }

    #[test]
    fn score_mods_multiply_the_cases_and_suffix_the_keys() {
        let o = Overrides {
            seqlens: Some(vec![1024]),
            masks: Some(vec![Mask::Causal]),
            dtypes: Some(vec![DType::BF16]),
            head_dims: Some(vec![64]),
            windows: Some(vec![128, 512]),
            softcaps: Some(vec![Softcap::new(30.0).unwrap(), Softcap::new(50.5).unwrap()]),
            alibi: true,
            ..Default::default()
        };
        let blocks: Vec<_> = Preset::Quick.blocks().into_iter().map(|b| o.apply(b)).collect();
        let plain = expand(&blocks).unwrap();
        assert!(plain.iter().all(|c| c.shape.softcap.is_none() && !c.shape.alibi));
        assert_eq!(with_score_mods(plain.clone(), None, false), plain);
        let modded = o.modify(plain.clone());
        assert_eq!(modded.len(), 2 * 2 * plain.len(), "every window meets every softcap");
        let keys: Vec<String> = modded.iter().take(4).map(|c| c.shape.key()).collect();
        assert_eq!(
            keys,
            [
                "bf16/B16/H32/N1024x1024/d64/causal/w128/cap30/alibi",
                "bf16/B16/H32/N1024x1024/d64/causal/w128/cap50.5/alibi",
                "bf16/B16/H32/N1024x1024/d64/causal/w512/cap30/alibi",
                "bf16/B16/H32/N1024x1024/d64/causal/w512/cap50.5/alibi",
            ]
        );
        assert_eq!(modded[0].variants, plain[0].variants);
        // ALiBi alone: one copy per shape, the softcap as it was.
        let alibi = with_score_mods(plain.clone(), None, true);
        assert_eq!(alibi.len(), plain.len());
        assert!(alibi.iter().all(|c| c.shape.alibi && c.shape.softcap.is_none()));
        assert!(alibi[0].shape.key().ends_with("/causal/alibi"), "{}", alibi[0].shape.key());
        let cap = with_score_mods(plain.clone(), o.softcaps.as_deref(), false);
        assert!(cap[0].shape.key().ends_with("/causal/cap30"), "{}", cap[0].shape.key());
        // A modifier makes a rectangular causal shape the peers' (FlexAttention aligns as ours).
        let rect = Shape { seqlen_q: 1, ..plain[0].shape.clone() };
        assert!(!rect.peer_comparable());
        assert!(Shape { alibi: true, ..rect.clone() }.peer_comparable());
        assert!(Shape { softcap: Softcap::new(1.0), ..rect.clone() }.peer_comparable());
        assert!(!Shape { alibi: true, mask: Mask::VarlenCausal, ..rect }.peer_comparable());
    }

    #[test]
    fn softcaps_parse_and_slopes_are_bloom_s() {
        assert_eq!("30".parse::<Softcap>().map(Softcap::get), Ok(30.0));
        assert_eq!(" 0.5 ".parse::<Softcap>().map(|c| c.to_string()), Ok("0.5".into()));
        for bad in ["0", "-30", "-0", "inf", "NaN", "thirty", ""] {
            let e = bad.parse::<Softcap>().unwrap_err();
            assert!(e.contains("positive finite number"), "{bad}: {e}");
        }
        let s = alibi_slopes(8);
        assert_eq!(s, [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]);
        let s = alibi_slopes(12);
        assert_eq!(s.len(), 12);
        assert!((s[0] - 2f32.powf(-8.0 / 12.0)).abs() < 1e-7 && s[11] == 2f32.powi(-8));
    }

    #[test]
    fn tiles_parse_and_reject_malformed() {
        assert_eq!("64x32".parse::<TileSpec>(), Ok(TileSpec { block_m: 64, block_n: 32 }));
        for bad in ["64", "x64", "64x", "0x64", "64x0", "a x b", "64*64", "-1x2"] {
            let e = bad.parse::<TileSpec>().unwrap_err();
            assert!(e.contains("BLOCK_MxBLOCK_N"), "{bad}: {e}");
        }
    }

    #[test]
    fn varlen_lengths_are_ragged_deterministic_and_keep_the_total() {
        for (b, n) in [(1, 100), (2, 1024), (16, 1024), (7, 33), (4, 4096)] {
            let l = varlen_lengths(b, n);
            assert_eq!(l.len(), b);
            assert_eq!(l.iter().map(|&x| x as usize).sum::<usize>(), b * n);
            assert!(l.iter().all(|&x| x >= 1));
            assert_eq!(l, varlen_lengths(b, n));
            if b > 2 {
                assert!(l.iter().any(|&x| x as usize != n), "{l:?}");
            }
        }
        let s = Shape {
            dtype: DType::BF16,
            batch: 4,
            heads: 2,
            kv_heads: 2,
            seqlen_q: 1,
            seqlen_k: 64,
            head_dim: 8,
            mask: Mask::Varlen,
            window: None,
            softcap: None,
            alibi: false,
        };
        let (q, k) = s.lengths();
        assert_eq!(q, [1, 1, 1, 1]);
        assert_eq!(k.iter().sum::<u32>(), 256);
    }

    #[test]
    fn shape_checks() {
        let mut s = Shape {
            dtype: DType::F32,
            batch: 1,
            heads: 1,
            kv_heads: 1,
            seqlen_q: 8,
            seqlen_k: 8,
            head_dim: 257,
            mask: Mask::Dense,
            window: None,
            softcap: None,
            alibi: false,
        };
        assert!(check_shape(&s).unwrap_err().contains("1..=256"));
        s.head_dim = 64;
        assert!(check_shape(&s).is_ok());
        s.seqlen_k = 1 << 40;
        assert!(check_shape(&s).unwrap_err().contains("GiB"));
        let decode = Shape { mask: Mask::Causal, seqlen_q: 1, seqlen_k: 64, ..s.clone() };
        assert!(!decode.peer_comparable(), "torch's is_causal is top-left aligned");
        assert!(Shape { mask: Mask::Dense, ..decode.clone() }.peer_comparable());
        assert!(!Shape { mask: Mask::Varlen, ..decode }.peer_comparable());
    }
}

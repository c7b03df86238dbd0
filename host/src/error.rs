//! The library's one error type.

use cudarc::driver::DriverError;

use crate::plan::{Reason, TileError};
use crate::problem::Method;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, each with a message a user can act on.
///
/// `Debug` prints the same message as `Display` (after the variant's name), so that
/// `fn main() -> Result<(), flashattn::Error>` shows what to do, not only which error it was.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libcuda` could not be loaded: no NVIDIA driver on this machine.
    #[error(
        "no CUDA driver found (libcuda.so could not be loaded): install the NVIDIA driver, \
         or run on a machine with an NVIDIA GPU; the CPU implementation works without one"
    )]
    NoDriver,

    /// The driver loaded, but there is no device with this ordinal.
    #[error("no CUDA device with ordinal {ordinal}: the driver reports {count} device(s)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver sees.
        count: usize,
    },

    /// The device is older than the kernels support.
    #[error(
        "device {ordinal} ({name}) has compute capability {major}.{minor}; \
         flashattn's kernels need 8.0 (Ampere) or newer"
    )]
    UnsupportedDevice {
        /// Device ordinal.
        ordinal: usize,
        /// Device name.
        name: String,
        /// Compute capability, major.
        major: i32,
        /// Compute capability, minor.
        minor: i32,
    },

    /// A device allocation did not fit.
    #[error(
        "out of device memory: {what} needs {requested} bytes ({requested_gib:.2} GiB); \
         {free} of {total} bytes are free"
    )]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// Bytes asked for.
        requested: u64,
        /// The same in GiB, for reading.
        requested_gib: f64,
        /// Free device memory when it failed.
        free: u64,
        /// Total device memory.
        total: u64,
    },

    /// A kernel would need more shared memory per block than the device allows.
    #[error(
        "kernel `{kernel}` needs {requested} bytes of shared memory per block; this device allows \
         at most {limit}: choose smaller tiles"
    )]
    SharedMemoryExceeded {
        /// Kernel name.
        kernel: &'static str,
        /// Bytes per block asked for.
        requested: u32,
        /// The device's opt-in limit per block.
        limit: u32,
    },

    /// A launch was refused or failed while running.
    #[error("launch of kernel `{kernel}` failed: {source}")]
    Launch {
        /// Kernel name.
        kernel: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },

    /// The driver could not load (JIT-compile) the committed PTX.
    #[error(
        "the driver could not load the {target} PTX module: {source}. JIT log: {log}. \
         An older driver may not know this PTX version: update the NVIDIA driver"
    )]
    ModuleLoad {
        /// `sm_80` or `sm_90a`.
        target: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
        /// The JIT's error log.
        log: String,
    },

    /// A kernel the library expects is not in the committed PTX (a stale PTX file).
    #[error(
        "kernel `{kernel}` is missing from the {target} PTX: the committed PTX is stale; \
         run `cargo xtask ptx`"
    )]
    MissingKernel {
        /// Kernel name.
        kernel: &'static str,
        /// `sm_80` or `sm_90a`.
        target: &'static str,
    },

    /// The inputs or options of a call are inconsistent; nothing was run or written.
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InvalidInput),

    /// cuBLAS (needed by the standard-attention path only) could not be loaded.
    #[error(
        "cuBLAS could not be loaded (libcublas.so): the standard-attention path needs it. Add the \
         CUDA toolkit's lib64 directory, or the pip package nvidia-cublas's lib directory, to \
         LD_LIBRARY_PATH; the flash paths do not need it"
    )]
    BlasMissing,

    /// A cuBLAS call failed.
    #[error("cuBLAS failed in {context}: {source}")]
    Blas {
        /// What the library was doing.
        context: &'static str,
        /// cuBLAS's error.
        #[source]
        source: cudarc::cublas::result::CublasError,
    },

    /// A host↔device length mismatch in a copy.
    #[error("{what}: the host slice has {host} elements but the device buffer has {device}")]
    LengthMismatch {
        /// Which copy.
        what: &'static str,
        /// Host elements.
        host: usize,
        /// Device elements.
        device: usize,
    },

    /// A buffer made by another [`crate::Device`] (another GPU, or another `Device` of the same
    /// GPU, whose stream is not ordered with this one's) was passed to this one.
    #[error(
        "{what} was allocated by another Device (device {buffer_device}), not this one (device \
         {device}): each Device orders its work on its own stream, so buffers must be used with the \
         Device that made them; copy the data over, or use one Device per GPU"
    )]
    WrongDevice {
        /// Which buffer.
        what: &'static str,
        /// The ordinal of the device the buffer belongs to.
        buffer_device: usize,
        /// This device's ordinal.
        device: usize,
    },

    /// A bounded wait ran out: a GPU has not finished (a hung or failed peer, or a timeout too
    /// short for the work).
    #[error("{what} did not finish within {waited:?}: a GPU may have failed or hung; check each device")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        waited: std::time::Duration,
    },

    /// Any other driver call that failed.
    #[error("CUDA driver call failed while {context}: {source}")]
    Driver {
        /// What the library was doing.
        context: &'static str,
        /// The driver's error.
        #[source]
        source: DriverError,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let variant = match self {
            Error::NoDriver => "NoDriver",
            Error::NoDevice { .. } => "NoDevice",
            Error::UnsupportedDevice { .. } => "UnsupportedDevice",
            Error::OutOfMemory { .. } => "OutOfMemory",
            Error::SharedMemoryExceeded { .. } => "SharedMemoryExceeded",
            Error::Launch { .. } => "Launch",
            Error::ModuleLoad { .. } => "ModuleLoad",
            Error::MissingKernel { .. } => "MissingKernel",
            Error::InvalidInput(i) => return write!(f, "InvalidInput({i:?}): {self}"),
            Error::BlasMissing => "BlasMissing",
            Error::Blas { .. } => "Blas",
            Error::LengthMismatch { .. } => "LengthMismatch",
            Error::WrongDevice { .. } => "WrongDevice",
            Error::Timeout { .. } => "Timeout",
            Error::Driver { .. } => "Driver",
        };
        write!(f, "{variant}: {self}")
    }
}

/// Attaches a context string to a driver error.
pub(crate) trait DriverContext<T> {
    fn context(self, context: &'static str) -> Result<T>;
}

impl<T> DriverContext<T> for std::result::Result<T, DriverError> {
    fn context(self, context: &'static str) -> Result<T> {
        self.map_err(|source| Error::Driver { context, source })
    }
}

/// Why an attention call's inputs were refused. Every path checks the same things, before any
/// work and before anything is written.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidInput {
    /// Head dimension outside 1..=256.
    #[error("head_dim is {head_dim}; supported head dimensions are 1..=256")]
    HeadDim {
        /// The value given.
        head_dim: usize,
    },
    /// A tensor's extent disagrees with the others.
    #[error("{tensor}.{what} is {actual}, expected {expected} to match the other tensors")]
    ShapeMismatch {
        /// Which extent.
        what: &'static str,
        /// Which tensor (q, k, v, o, lse).
        tensor: &'static str,
        /// What it should be.
        expected: usize,
        /// What it is.
        actual: usize,
    },
    /// Q heads are not a multiple of K/V heads (grouped-query attention needs whole groups).
    #[error("q has {q_heads} heads and k/v {kv_heads}: q heads must be a positive multiple of k/v heads")]
    HeadGroups {
        /// Query heads.
        q_heads: usize,
        /// Key/value heads.
        kv_heads: usize,
    },
    /// A buffer is shorter than its layout needs.
    #[error("{tensor} needs {needed} elements for its shape and strides, but its buffer holds {len}")]
    BufferTooSmall {
        /// Which tensor.
        tensor: &'static str,
        /// Elements the layout addresses.
        needed: usize,
        /// Elements in the buffer.
        len: usize,
    },
    /// A layout's extent overflows `usize`.
    #[error("{tensor}'s shape and strides overflow the address range")]
    LayoutOverflow {
        /// Which tensor.
        tensor: &'static str,
    },
    /// The softmax scale is not a positive finite number.
    #[error(
        "softmax scale is {scale}; it must be positive, with scale·log2(e) finite (at most about 2.3e38)"
    )]
    Scale {
        /// The value given.
        scale: f32,
    },
    /// The logit softcap is not a positive finite number.
    #[error("softcap is {softcap}; it must be a positive finite number (None: no softcap)")]
    Softcap {
        /// The value given.
        softcap: f32,
    },
    /// ALiBi slopes: one finite, non-negative number per query head.
    #[error("alibi_slopes has {len} entries for {heads} query heads; it needs one finite slope ≥ 0 per head")]
    AlibiSlopes {
        /// Entries given.
        len: usize,
        /// Query heads.
        heads: usize,
    },
    /// K/V cache lengths: one per batch entry of a fixed-length batch, each at most the cache's
    /// capacity (K's seqlen).
    #[error(
        "cache_seqlens has {len} entries for a batch of {batch}{}; it needs one length per entry, each at \
         most the cache's capacity of {capacity} tokens",
        if *varlen { " with variable-length sequences (use one or the other)" } else { "" }
    )]
    CacheSeqlens {
        /// Entries given.
        len: usize,
        /// The batch.
        batch: usize,
        /// K's seqlen (the capacity).
        capacity: usize,
        /// Whether varlen offsets were given too.
        varlen: bool,
    },
    /// New K/V tokens would run past the end of a cache.
    #[error(
        "cache entry {entry} holds {len} tokens; {new} more do not fit its capacity of {capacity}: nothing was written"
    )]
    CacheFull {
        /// The batch entry.
        entry: usize,
        /// Its current length.
        len: u32,
        /// Tokens to append.
        new: usize,
        /// The cache's capacity (K's seqlen).
        capacity: usize,
    },
    /// A paged cache's block table does not fit the pools or the batch.
    #[error("block_table: {why}")]
    BlockTable {
        /// What is wrong.
        why: String,
    },
    /// Variable-length input must be packed with batch 1.
    #[error("variable-length input must be packed along the token axis with batch 1, got batch {batch}")]
    VarLenBatch {
        /// The batch given.
        batch: usize,
    },
    /// cu_seqlens_q and cu_seqlens_k differ in length, or are empty.
    #[error("cu_seqlens_q has {q} entries and cu_seqlens_k {k}: both need batch + 1 ≥ 1 entries")]
    VarLenCounts {
        /// Entries of cu_seqlens_q.
        q: usize,
        /// Entries of cu_seqlens_k.
        k: usize,
    },
    /// An offset is not monotone (or the first is not 0).
    #[error(
        "cu_seqlens_{tensor}[{index}] is {value}, but offsets must start at 0 and never decrease (previous: {limit})"
    )]
    VarLenOffsets {
        /// q or k.
        tensor: &'static str,
        /// Position of the bad offset.
        index: usize,
        /// Its value.
        value: usize,
        /// The value it must not fall below (the previous offset), or 0 for the first.
        limit: usize,
    },
    /// The last offset exceeds the packed tokens.
    #[error("cu_seqlens_{tensor} ends at {last}, beyond the {tokens} packed tokens of {tensor}")]
    VarLenTotal {
        /// q or k.
        tensor: &'static str,
        /// The last offset.
        last: usize,
        /// Tokens in the packed tensor.
        tokens: usize,
    },
    /// A backward was given a [`crate::SavedForBackward`] that holds no forward of its problem.
    #[error(
        "the saved state {why}: run Device::attention_for_backward with the same tensors' layouts and \
         options first (or pass the log-sum-exp to Device::attention_backward)"
    )]
    NotSaved {
        /// What is wrong with it.
        why: &'static str,
    },
    /// A [`crate::SavedForBackward`] is too small for the problem.
    #[error(
        "the saved state's {what} holds {len} elements, but the problem needs {needed}: allocate it for this problem"
    )]
    SavedTooSmall {
        /// Which of its buffers.
        what: &'static str,
        /// Elements needed.
        needed: usize,
        /// Elements it holds.
        len: usize,
    },
    /// A training forward's residual of O, given by address, is not laid out as O.
    #[error(
        "o_lo (O's residual) must have the output's shape and strides, {expected:?}, but has {actual:?}: allocate it like the output (in PyTorch, torch.empty_like(out))"
    )]
    ResidualLayout {
        /// O's layout.
        expected: Box<crate::Layout>,
        /// o_lo's layout.
        actual: Box<crate::Layout>,
    },
    /// The log-sum-exp output is too short.
    #[error("the lse output needs {needed} elements (batch × heads × seqlen_q), but holds {len}")]
    LseTooSmall {
        /// Elements needed.
        needed: usize,
        /// Elements given.
        len: usize,
    },
    /// A tile-size override the chosen method cannot run.
    #[error(
        "tile override block_m={block_m:?}, block_n={block_n:?} is not valid for the {method} method: {reason}"
    )]
    Tiles {
        /// The method (`Auto` resolves to the one that was tried last).
        method: Method,
        /// block_m asked for.
        block_m: Option<usize>,
        /// block_n asked for.
        block_n: Option<usize>,
        /// What is wrong.
        reason: TileError,
    },
    /// The method cannot run this problem (e.g. the tensor-core kernel with f32).
    #[error("method {method} does not support {reason}")]
    Unsupported {
        /// The method asked for.
        method: Method,
        /// Why not.
        reason: Reason,
    },
    /// A cumulative sequence offset does not fit in `u32`.
    #[error("the {tensor} lengths overflow u32 at sequence {index}: split the batch")]
    VarLenOverflow {
        /// q or k.
        tensor: &'static str,
        /// The sequence at which the sum overflowed.
        index: usize,
    },
    /// More tokens than the kernels count (they count in 32 bits).
    #[error("{tensor} has {tokens} tokens; at most {limit} are supported")]
    TooManyTokens {
        /// Which tensor.
        tensor: &'static str,
        /// Its tokens.
        tokens: usize,
        /// The limit.
        limit: usize,
    },
    /// A tensor given by address ([`crate::external`]) is null but has elements.
    #[error("{tensor}'s address is null, but its shape and strides address {needed} elements")]
    NullAddress {
        /// Which tensor.
        tensor: &'static str,
        /// Elements its layout addresses.
        needed: usize,
    },
    /// A tensor given by address ([`crate::external`]) starts at an address the kernels cannot
    /// read from with its layout.
    #[error(
        "{tensor}'s address {address:#x} is not a multiple of {align} bytes, which its dtype and \
         layout need (rows whose head dim and strides are multiples of 8 elements are copied 16 \
         bytes at a time): pass a tensor whose data starts at an aligned address, such as a copy"
    )]
    Misaligned {
        /// Which tensor.
        tensor: &'static str,
        /// Its address.
        address: u64,
        /// The alignment it needs, in bytes.
        align: u64,
    },
    /// An output given by address ([`crate::external`]) shares memory with another tensor of the
    /// call (the safe API's borrows rule this out; raw addresses are checked by their extents).
    #[error(
        "{output}'s memory ({output} spans bytes {start:#x}..{end:#x}) overlaps {other}'s: every \
         output needs memory of its own, apart from the inputs and the other outputs"
    )]
    OutputOverlap {
        /// The output.
        output: &'static str,
        /// The tensor it overlaps.
        other: &'static str,
        /// The output's first byte.
        start: u64,
        /// One past its last byte.
        end: u64,
    },
    /// A tensor given by device address ([`crate::external`]) is not memory of the device the
    /// call runs on.
    #[error(
        "{tensor} is {}, but the call runs on CUDA device {device}: put every tensor on that \
         device",
        match found { Some(d) => format!("memory of CUDA device {d}"), None => "not CUDA device memory (a host pointer?)".to_string() }
    )]
    ForeignMemory {
        /// Which tensor.
        tensor: &'static str,
        /// The device whose memory it is, if it is device memory.
        found: Option<usize>,
        /// The device of the call.
        device: usize,
    },
    /// A caller's stream ([`crate::external`]) belongs to another context than the device's
    /// primary context.
    #[error(
        "the stream given does not belong to CUDA device {device}'s primary context: pass a \
         stream of the device the tensors are on (PyTorch's streams use the primary context)"
    )]
    ForeignStream {
        /// The device of the call.
        device: usize,
    },
    /// A method that cannot run on a caller's stream ([`crate::external`]).
    #[error(
        "method {method} runs cuBLAS on the Device's own stream and is not available on a \
         caller's stream: use auto, flash or flash-tc"
    )]
    ExternalMethod {
        /// The method asked for.
        method: Method,
    },
    /// A context-parallel call that cannot run as given.
    #[error("context-parallel attention: {0}")]
    Ring(RingError),
    /// The output's layout maps two different elements to the same address.
    #[error(
        "o's strides {strides:?} (batch, seq, head) with head dim {head_dim} make different output \
         elements overlap: give every output element its own place"
    )]
    OverlappingOutput {
        /// O's (batch, seq, head) strides.
        strides: [usize; 3],
        /// The head dimension.
        head_dim: usize,
    },
}

/// Why a context-parallel ([`crate::context_parallel`]) call was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// A ring needs at least two GPUs (one GPU: call [`crate::Device::attention`]).
    #[error("a ring needs at least 2 GPUs, got {ranks}: for one GPU call Device::attention")]
    TooFewRanks {
        /// GPUs given.
        ranks: usize,
    },
    /// Two ranks on one GPU.
    #[error("device {ordinal} appears twice: give each rank its own GPU")]
    SameDevice {
        /// The GPU.
        ordinal: usize,
    },
    /// Not one shard per rank.
    #[error("{shards} shards for a ring of {ranks} GPUs: pass one shard per GPU, in rank order")]
    ShardCount {
        /// GPUs in the ring.
        ranks: usize,
        /// Shards given.
        shards: usize,
    },
    /// A shard whose shape differs from rank 0's (or, for K and V, whose layout does: blocks are
    /// read with their sender's layout).
    #[error(
        "rank {rank}'s {tensor} differs from rank 0's: every shard has the same shape, and K and V \
         the same layout on every rank"
    )]
    ShardShapes {
        /// The rank.
        rank: usize,
        /// Which tensor.
        tensor: &'static str,
    },
    /// K or V with gaps or overlaps: blocks travel as one contiguous copy.
    #[error("K and V shards must be dense (no gaps, any memory order); strides {strides:?} are not")]
    KvNotDense {
        /// K's (batch, seq, head) strides.
        strides: [usize; 3],
    },
    /// Q or O rows not 16-byte aligned (head dim and strides multiples of 8 elements): the
    /// partial results are merged 16 bytes at a time.
    #[error("{tensor}'s head dim and strides must be multiples of 8 elements for context-parallel attention")]
    Unaligned {
        /// Which tensor.
        tensor: &'static str,
    },
    /// A causal shard that is not two equal zigzag chunks of queries and the same keys.
    #[error(
        "causal context-parallel attention needs shards of two equal chunks (zigzag layout) with as \
         many keys as queries; got {seqlen_q} queries and {seqlen_k} keys"
    )]
    CausalShard {
        /// Query tokens per shard.
        seqlen_q: usize,
        /// Key tokens per shard.
        seqlen_k: usize,
    },
    /// An option the ring does not support.
    #[error("{feature} not supported across GPUs: run them on one GPU (Device::attention)")]
    Feature {
        /// What.
        feature: &'static str,
    },
    /// A previous call panicked while holding the ring's scratch memory.
    #[error("a previous call on this ring panicked; make a new Ring")]
    Poisoned,
    /// Not f16 or bf16.
    #[error("{dtype:?} is not supported: the ring runs the tensor-core kernels (f16, bf16)")]
    DType {
        /// The element type.
        dtype: crate::DType,
    },
}

impl From<RingError> for Error {
    fn from(e: RingError) -> Error {
        Error::InvalidInput(InvalidInput::Ring(e))
    }
}

//! Planning: which launches run an attention call, as a pure function of the device's
//! properties, the dtype, the validated problem and the options.
//!
//! [`plan`] needs no GPU: it reads [`DeviceProps`] (real ones from [`crate::Device::props`], or
//! [`DeviceProps::a100`] / [`DeviceProps::h200`] on a machine without one), so every planning
//! rule is tested on the CPU. A [`Plan`] lists its launches and, for `Method::Auto`, why each
//! faster path was not taken.

use flashattn_kernels::config::{
    BWD_CONFIGS, BwdConfig, MMA_CONFIGS, MmaConfig, PAD_ELEMENTS, SIMT_BLOCK_M, SIMT_MAX_BLOCK_N, SimtConfig,
    WGMMA_CONFIGS, bwd_alibi, bwd_default, bwd_find, bwd_window, bwd_window_only, mma_decode, mma_default,
    mma_elementwise, mma_find, mma_window, wgmma_default, wgmma_masked, wgmma_persistent, wgmma_softcap,
    wgmma_train, wgmma_with_rows, wgmma_with_tiles,
};
use flashattn_kernels::params::{
    BWD_BLOCK_M, BWD_PREP_THREADS, COMBINE_WARPS, SIMT_KEY_CHUNK, SOFTMAX_SHARED_BYTES, SOFTMAX_THREADS,
};
use flashattn_kernels::registry::{Family, Target};

use crate::buffer::DType;
use crate::device::DeviceProps;
use crate::error::InvalidInput;
use crate::problem::{AttentionOptions, Layout, MAX_SPLITS, Method, Problem, Tiles};
use crate::registry::{KernelId, elem};

/// CUDA's grid limits: x up to 2³¹ − 1, y and z up to 65535.
pub const MAX_GRID: [u64; 3] = [(1 << 31) - 1, 65_535, 65_535];

/// Elements per 16-byte row chunk of a 16-bit tensor: the tensor-core kernel copies rows in
/// 16-byte pieces, so every stride that moves must be a multiple of this.
pub const TC_STRIDE_ALIGN: usize = 8;

/// Why a method cannot run a problem (typed, so that callers can act on it; `Display` says it
/// in words).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// The kernel is not built for this element type.
    DType {
        /// The dtype asked for.
        dtype: DType,
    },
    /// The kernel is not instantiated for this head dimension.
    HeadDim {
        /// The problem's head dimension.
        head_dim: usize,
        /// The head dimensions it runs.
        supported: Vec<u32>,
    },
    /// A stride of a dimension that moves (extent > 1) is not a multiple of `multiple_of`
    /// elements.
    Alignment {
        /// q, k, v or o.
        tensor: &'static str,
        /// Its (batch, seq, head) strides.
        strides: [usize; 3],
        /// The required multiple, in elements.
        multiple_of: usize,
    },
    /// The tile override is not one this method can run.
    Tiles(TileError),
    /// The kernel needs more shared memory per block than the device has.
    SharedMemory {
        /// Bytes per block needed.
        needed: u32,
        /// The device's limit.
        limit: u32,
    },
    /// The launch grid would exceed CUDA's limits ([`MAX_GRID`]).
    Grid {
        /// The grid it would need (x, y, z).
        grid: [u64; 3],
    },
    /// A count or size exceeds what the method handles.
    TooLarge {
        /// What.
        what: &'static str,
        /// The value.
        value: u128,
        /// The largest allowed.
        limit: u128,
    },
    /// cuBLAS needs each matrix's leading dimension (the token stride) to be at least the head
    /// dimension: rows may not overlap or broadcast on the standard path.
    GemmStride {
        /// q, k, v or o.
        tensor: &'static str,
        /// Its token stride.
        seq_stride: usize,
        /// The head dimension.
        head_dim: usize,
    },
    /// The kernel is not in this device's PTX (a kernel built for another architecture).
    Target {
        /// The kernel.
        kernel: &'static str,
        /// The device's PTX target.
        target: &'static str,
    },
    /// A split-KV override for a method that does not split the keys (only the tensor-core
    /// kernel does).
    NoSplitKv,
    /// A split-KV override on rows that are not 16-byte aligned (a head dim that is not a
    /// multiple of 8, or such strides): the combine kernel needs 16-byte rows.
    SplitUnaligned {
        /// The problem's head dimension.
        head_dim: usize,
    },
    /// Standard attention's N×N matrices would take more than `Method::Auto` allows itself
    /// ([`STANDARD_SCRATCH_FRACTION`] of device memory).
    ScratchBudget {
        /// Bytes of S and P.
        needed: u64,
        /// The budget.
        budget: u64,
    },
    /// Standard attention runs variable-length batches one sequence at a time; `Method::Auto`
    /// leaves them to the flash kernel.
    VarLen,
    /// A sliding window: only the tensor-core kernels (forward and backward, 16-byte rows) apply
    /// one on the GPU (the CPU path does everywhere).
    Window,
    /// The method has no backward pass (on the GPU, only the tensor-core kernels have one).
    NoBackward,
    /// A softcap or ALiBi slopes: on the GPU only the tensor-core kernels' masked instances apply
    /// them (forward and backward, 16-byte rows); the CPU path does everywhere.
    ScoreMod,
    /// A K/V cache this method does not read: the tensor-core kernel's decode instances (up to
    /// 16 query rows a tile, rows of 16 bytes) read per-entry lengths (`cache_seqlens`) and paged
    /// caches (`block_table`), the general forward kernel lengths only; standard attention, the
    /// Hopper kernel, the other tensor-core instances and the backward neither.
    KvCache,
    /// Something the Hopper kernel does not run (yet), or where `Method::Auto` knows the
    /// `mma.sync` kernel to be faster.
    NotOnHopper {
        /// What, and why, in words.
        what: &'static str,
    },
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::DType { dtype } => write!(f, "{dtype} (it runs f16 and bf16)"),
            Reason::HeadDim { head_dim, supported } => write!(
                f,
                "head dim {head_dim} (it runs head dims that are multiples of 8 up to {}, padded up to one of \
                 {supported:?})",
                supported.last().copied().unwrap_or(0)
            ),
            Reason::Alignment { tensor, strides, multiple_of } => write!(
                f,
                "{tensor}'s strides {strides:?}: strides of dimensions longer than 1 must be multiples of \
                 {multiple_of} elements (16-byte rows)"
            ),
            Reason::Tiles(t) => write!(f, "the tile override: {t}"),
            Reason::SharedMemory { needed, limit } => write!(
                f,
                "this device: it needs {needed} bytes of shared memory per block, the device allows {limit}"
            ),
            Reason::Grid { grid } => write!(
                f,
                "a launch grid of {grid:?} blocks (CUDA allows {MAX_GRID:?}): split the batch or the heads"
            ),
            Reason::TooLarge { what, value, limit } => write!(f, "{what} of {value} (at most {limit})"),
            Reason::GemmStride { tensor, seq_stride, head_dim } => write!(
                f,
                "{tensor}'s token stride {seq_stride}: cuBLAS needs it to be at least the head dim {head_dim} \
                 (use a flash method for broadcast or overlapping rows)"
            ),
            Reason::Target { kernel, target } => {
                write!(f, "this device: kernel `{kernel}` is not built for {target}")
            }
            Reason::NoSplitKv => f.write_str(
                "a split-KV override (only the tensor-core kernel splits the keys; use `splits: None`)",
            ),
            Reason::SplitUnaligned { head_dim } => write!(
                f,
                "a split-KV override with rows that are not 16-byte aligned (head dim {head_dim}, or a \
                 stride, not a multiple of {TC_STRIDE_ALIGN}): the combine kernel needs aligned rows; use \
                 `splits: None`, or pad the head dim to a multiple of {TC_STRIDE_ALIGN}"
            ),
            Reason::ScratchBudget { needed, budget } => write!(
                f,
                "{needed} bytes of N×N scores and probabilities (Auto allows {budget}, 1/{} of device memory)",
                1.0 / STANDARD_SCRATCH_FRACTION
            ),
            Reason::VarLen => f.write_str("a variable-length batch (it runs one sequence at a time)"),
            Reason::Window => f.write_str(
                "a sliding window (on the GPU only the tensor-core kernels apply one, forward and \
                 backward, on rows of 16 bytes; `flashattn::cpu::attention` and \
                 `cpu::attention_backward` apply it for any dtype and layout)",
            ),
            Reason::KvCache => f.write_str(
                "a K/V cache outside the GPU forward's decode instances (up to 16 query rows a tile, 16-byte \
                 rows), which read cache lengths and paged caches, and its general kernel, which reads cache \
                 lengths (`flashattn::cpu` runs both, forward and backward)",
            ),
            Reason::ScoreMod => f.write_str(
                "a softcap or ALiBi slopes (on the GPU only the tensor-core kernels apply them, forward and \
                 backward, on rows of 16 bytes; `flashattn::cpu::attention` and `cpu::attention_backward` \
                 apply them for any dtype and layout)",
            ),
            Reason::NotOnHopper { what } => f.write_str(what),
            Reason::NoBackward => f.write_str(
                "the backward pass (on the GPU only the tensor-core kernels have one: use Method::Auto or \
                 Method::FlashTensorCore; `flashattn::cpu::attention_backward` runs every dtype)",
            ),
        }
    }
}

/// Why a tile override was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TileError {
    /// Tiles of 0 rows or keys.
    Zero,
    /// The method has no tiles to override (standard attention).
    NotTiled,
    /// The tensor-core kernel has no instance with these tiles for this head dim.
    NotInstantiated {
        /// The head dim.
        head_dim: usize,
        /// Its instantiated `(block_m, block_n)`.
        available: Vec<(u32, u32)>,
    },
    /// The general kernel's `block_m` must be one of these.
    BlockM {
        /// Allowed values.
        allowed: &'static [u32],
    },
    /// The general kernel's `block_n` must be a multiple of `multiple_of` up to `max`.
    BlockN {
        /// The multiple.
        multiple_of: u32,
        /// The largest.
        max: u32,
    },
    /// The tiles need more shared memory than the device has.
    SharedMemory {
        /// Bytes needed.
        needed: u32,
        /// The device's limit.
        limit: u32,
    },
    /// A split-KV override outside 1..=[`MAX_SPLITS`].
    Splits {
        /// The override.
        splits: usize,
    },
}

impl std::fmt::Display for TileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TileError::Zero => f.write_str("tiles need block_m ≥ 1 and block_n ≥ 1"),
            TileError::NotTiled => f.write_str("this method has no tiles to override"),
            TileError::NotInstantiated { head_dim, available } => {
                let have: Vec<String> = available.iter().map(|(m, n)| format!("{m}x{n}")).collect();
                write!(f, "for d = {head_dim} it has the tiles {}", have.join(", "))
            }
            TileError::BlockM { allowed } => write!(f, "block_m must be one of {allowed:?}"),
            TileError::BlockN { multiple_of, max } => {
                write!(f, "block_n must be a multiple of {multiple_of} up to {max}")
            }
            TileError::SharedMemory { needed, limit } => {
                write!(f, "they need {needed} bytes of shared memory per block, the device allows {limit}")
            }
            TileError::Splits { splits } => {
                write!(f, "{splits} key splits (1 to {MAX_SPLITS}; 1 means no split)")
            }
        }
    }
}

/// What one launch of a plan is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchKind {
    /// A kernel of this library (its PTX entry name).
    Kernel(&'static str),
    /// A cuBLAS strided-batched GEMM (standard attention), with what it computes.
    Gemm(&'static str),
}

/// One launch of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The kernel or library call.
    pub kind: LaunchKind,
    /// Blocks (x, y, z); (0, 0, 0) for a GEMM (cuBLAS picks its own).
    pub grid: (u32, u32, u32),
    /// Threads per block (0 for a GEMM).
    pub threads: u32,
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
    /// How many times it runs (one per head group for the standard path's GEMMs).
    pub count: u32,
    /// A programmatic dependent of the launch before it (sm_90: the split-KV combine): its blocks
    /// may start while that launch's last blocks finish, and wait in the kernel
    /// (`griddepcontrol.wait`) before reading what it wrote — the gap between two launches hidden.
    pub after_previous: bool,
    pub(crate) kernel: Option<KernelId>,
}

/// A faster method that was not taken, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotTaken {
    /// The method.
    pub method: Method,
    /// Why not.
    pub reason: Reason,
}

/// How a call runs: the method, its launches in order, the tiles of the flash kernels, the
/// device memory it allocates beyond its inputs and outputs, and (for `Method::Auto`) the faster
/// paths it did not take.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The method that runs (never `Auto`).
    pub method: Method,
    /// The launches, in order (none for an empty problem).
    pub launches: Vec<Launch>,
    /// Query rows per block × keys per tile of the flash kernels (`None` for standard attention).
    pub tiles: Option<(usize, usize)>,
    /// Device memory allocated by the call beyond its inputs and outputs, bytes (the N×N scores
    /// and probabilities for `Standard`, the sequence offsets for varlen).
    pub scratch_bytes: u64,
    /// Faster methods not taken, with the reason (filled for `Method::Auto`).
    pub not_taken: Vec<NotTaken>,
    /// Split-KV: blocks per query tile, each taking a share of its keys (1: no split; then
    /// there is no combine launch).
    pub splits: usize,
    /// Whether the query heads that share a K/V head are packed into the rows of one tile
    /// (decoding with grouped K/V heads: K and V are read once per group).
    pub gqa_packed: bool,
    /// Why this path: the rule of [`AUTO_RULES`] that chose the method (for `Method::Auto`), and
    /// the planner's choices of instance, packing and splits, in words.
    pub why: Vec<String>,
    /// The training residuals ([`crate::SavedForBackward`]): a forward planned by
    /// [`plan_for_backward`] writes them (O's residual and each row's probability offset and
    /// sum, beside the log-sum-exp), a backward reads them instead of making a pass over the
    /// keys. False where the kernel cannot (the forward then keeps the log-sum-exp alone).
    pub residuals: bool,
}

/// One rule of `Method::Auto`'s table: the first rule whose conditions hold picks the method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoRule {
    /// The method the rule picks.
    pub method: Method,
    /// When it applies.
    pub when: &'static str,
    /// Why it is the fastest there: the measurements behind the rule.
    pub evidence: &'static str,
}

/// `Method::Auto`'s rule table, in order: the first rule whose method can run the problem
/// picks it. The planner owns it ([`plan`] follows it and `tests/cpu/plan.rs` checks each rule on
/// synthetic devices); the README prints it.
pub const AUTO_RULES: [AutoRule; 4] = [
    AutoRule {
        method: Method::FlashHopper,
        when: "an sm_90 device (H100, H200), f16 or bf16, head dim a multiple of 8 above 32 and up to 256 \
               (16-byte rows), at least 128 query rows per sequence (the longest, in a variable-length batch; \
               windows, softcap and ALiBi on its masked instances); head dims up to 32 too, padded to 64 \
               columns, in fixed-length batches without a window or modifier from 2048 queries a sequence \
               (4096 with a causal mask)",
        evidence: "bf16 headline 1.05–1.65× the mma.sync kernel in 19 of 20 rows (d64 causal N = 1024: 0.99×) \
                   and 0.69–0.95× cuDNN (results/2026-11-30-nvidia-h200/hopper/v1-headline); head-dims sweep \
                   (N = 4096, f16 and bf16, causal and not): d = 40–256 1.12–1.69× the mma.sync kernel and \
                   1.12–2.03× FlashAttention-2, d = 32 0.91–0.94× the mma.sync kernel (padded to 64, 128-row \
                   tiles; results/2026-11-30-nvidia-h200-x2/s5-call1/head-dims); in 192-row tiles d = 32 takes \
                   15–21% less time than the mma.sync kernel from N = 2048 without a mask and 6–17% from 4096 \
                   with one (results/2026-12-03-nvidia-h200/session22/call3)",
    },
    AutoRule {
        method: Method::FlashTensorCore,
        when: "f16 or bf16, head dim ≤ 256 (rows that are not 16-byte aligned, such as odd head dims, \
               are copied element by element)",
        evidence: "0.89–1.24× FlashAttention-2 at every head dim 32–256 that is a multiple of 8, 10–80× \
                   the CUDA-core kernel (results/2026-11-30-nvidia-h200/everywhere/head-dims); element-wise \
                   copies at d = 59 and 111: 52–61 TFLOP/s against 28–55 for cuBLAS standard attention \
                   and 5–12 for the CUDA-core kernel (results/2026-11-30-nvidia-h200/odd-dims)",
    },
    AutoRule {
        method: Method::Standard,
        when: "otherwise, for a fixed-length batch whose N×N scores and probabilities fit in 1/16 of \
               device memory, with cuBLAS-compatible strides",
        evidence: "1.2–6× faster than the CUDA-core flash kernel on f32 at d = 64 and 128 \
                   (results/2026-11-29-nvidia-h200/extras); on bf16, 21–121 TFLOP/s \
                   (results/2026-11-29-nvidia-h200/headline) against 4–12 for the CUDA-core kernel \
                   (results/2026-11-30-nvidia-h200/head-dims-before)",
    },
    AutoRule {
        method: Method::Flash,
        when: "everything else: variable-length batches, N×N beyond the budget, broadcast or \
               overlapping rows",
        evidence: "the one path with O(N) memory for every dtype, head dim and layout",
    },
];

/// The share of device memory `Method::Auto` lets standard attention's N×N matrices take.
pub const STANDARD_SCRATCH_FRACTION: f64 = 1.0 / 16.0;

impl Plan {
    /// The main launch: the attention kernel of a flash method, the softmax of standard
    /// attention.
    pub fn main_launch(&self) -> Option<&Launch> {
        self.launches.iter().find(|l| matches!(l.kind, LaunchKind::Kernel(_)))
    }

    /// The name of the main kernel, or `""` for an empty problem.
    pub fn kernel(&self) -> &'static str {
        match self.main_launch().map(|l| l.kind) {
            Some(LaunchKind::Kernel(k)) => k,
            _ => "",
        }
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.method)?;
        if let Some((m, n)) = self.tiles {
            write!(f, ", tiles {m}×{n}")?;
        }
        write!(f, ", {} B extra device memory", self.scratch_bytes)?;
        if self.launches.is_empty() {
            f.write_str("; nothing to launch (empty problem)")?;
        }
        for l in &self.launches {
            match l.kind {
                LaunchKind::Kernel(k) => write!(
                    f,
                    "; `{k}` grid {:?}, {} threads, {} B shared memory{}",
                    l.grid,
                    l.threads,
                    l.shared_bytes,
                    if l.after_previous { ", started as the launch before it finishes" } else { "" }
                )?,
                LaunchKind::Gemm(what) => write!(f, "; cuBLAS GEMM {what} ×{}", l.count)?,
            }
        }
        for n in &self.not_taken {
            write!(f, "; not {}: {}", n.method, n.reason)?;
        }
        for w in &self.why {
            write!(f, "; {w}")?;
        }
        Ok(())
    }
}

impl DeviceProps {
    /// An NVIDIA A100 (SXM, 80 GB) as the planner sees it: for planning without a GPU.
    pub fn a100() -> DeviceProps {
        DeviceProps {
            ordinal: 0,
            name: "NVIDIA A100 (synthetic)".into(),
            compute_capability: (8, 0),
            sm_count: 108,
            max_shared_per_block: 163 * 1024,
            shared_per_sm: 164 * 1024,
            l2_bytes: 40 << 20,
            total_memory: 80 << 30,
            driver_version: 13000,
            ptx_target: Target::Sm80.name(),
        }
    }

    /// An NVIDIA H200 (SXM) as the planner sees it: for planning without a GPU.
    pub fn h200() -> DeviceProps {
        DeviceProps {
            ordinal: 0,
            name: "NVIDIA H200 (synthetic)".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_shared_per_block: 227 * 1024,
            shared_per_sm: 228 * 1024,
            l2_bytes: 60 << 20,
            total_memory: 141 << 30,
            driver_version: 13000,
            ptx_target: Target::Sm90a.name(),
        }
    }

    /// The PTX target this device loads.
    pub fn target(&self) -> Option<Target> {
        Target::for_compute_capability(self.compute_capability.0, self.compute_capability.1)
    }
}

/// The plan of an attention call: which launches run it on a device with `props`, for element
/// type `dtype`. Pure: no GPU needed. Refusals are [`InvalidInput::Unsupported`] (the method
/// cannot run the problem) or [`InvalidInput::Tiles`] (a bad override), never a failed launch.
pub fn plan(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    crate::problem::check_splits(opts)?;
    if let Some(reason) = cpu_only_feature(problem, true) {
        let method = if opts.method == Method::Auto { Method::FlashTensorCore } else { opts.method };
        return Err(unsupported(method, reason));
    }
    let mut plan = match opts.method {
        Method::Flash => plan_simt(props, dtype, problem, opts),
        Method::FlashTensorCore => plan_mma(props, dtype, problem, opts),
        Method::FlashHopper => plan_wgmma(props, dtype, problem, opts),
        Method::Standard => plan_standard(dtype, problem, opts),
        Method::Auto => plan_auto(props, dtype, problem, opts),
    }?;
    if problem.is_empty() {
        plan.launches.clear();
        plan.scratch_bytes = 0;
    }
    Ok(plan)
}

/// [`plan`] for a training forward ([`crate::Device::attention_for_backward`]): the same method
/// and tiles, on the Hopper kernel's training instance of the same kind (plain, masked or
/// softcap) where one runs the problem (head dims up to 256, those up to 32 padded to 64 columns
/// under `Method::Auto`; masked up to 128), which also writes what the backward
/// needs to skip its pass over the keys ([`Plan::residuals`]). Elsewhere the plan is [`plan`]'s,
/// and the backward makes that pass.
pub fn plan_for_backward(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let base = small_head_dims_on_hopper(props, dtype, problem, opts, plan(props, dtype, problem, opts)?);
    // (The training instances run one query tile a block, of 128 rows.)
    let mut plan = one_tile_per_block(props, problem, base)?;
    let training = plan.launches.iter().enumerate().find_map(|(at, l)| match l.kernel?.info().family {
        Family::FlashWgmma(e, i) if WGMMA_CONFIGS[i].train == 0 => {
            let t = wgmma_train(problem.head_dim() as u32, WGMMA_CONFIGS[i].window)?;
            let (a, b) = (WGMMA_CONFIGS[i], WGMMA_CONFIGS[t]);
            // The same query rows (and so the same grid); the keys a tile and the K/V stages are
            // each instance's own (d = 256 infers in 80-key tiles, trains in 64-key ones: the
            // training epilogue's registers on top of the wider score tiles were not tried).
            let same = (a.head_dim, a.block_m) == (b.head_dim, b.block_m);
            let kernel = kernel_on(plan.method, props, Family::FlashWgmma(e, t)).ok()?;
            same.then_some((at, kernel, b))
        }
        _ => None,
    });
    if let Some((at, kernel, b)) = training {
        let launch = &mut plan.launches[at];
        launch.kernel = Some(kernel);
        launch.kind = LaunchKind::Kernel(kernel.name());
        launch.shared_bytes = b.shared_bytes();
        plan.tiles = Some((b.block_m as usize, b.block_n as usize));
        for w in plan.why.iter_mut().filter(|w| w.starts_with(HOPPER_WHY)) {
            *w = hopper_why(&b);
        }
        plan.residuals = true;
        plan.why.push(
            "training instance: probabilities as 2^((s − max)·scale) (a row's largest exactly 1), and O's \
             residual and each row's probability offset and sum written, so that the backward skips its pass \
             over the keys"
                .into(),
        );
    } else if !plan.launches.is_empty() {
        plan.why.push(
            "training: this kernel keeps no residuals (only the Hopper kernel's instances do: head dims up to 256, \
             up to 128 masked), so the backward makes its pass over the keys from the log-sum-exp"
                .into(),
        );
    }
    Ok(plan)
}

/// A training forward's plan at head dims up to [`HOPPER_MIN_HEAD_DIM`] under `Method::Auto`: the
/// Hopper kernel (padded to 64 columns) where it runs the problem and Auto passed it over for the
/// head dim alone. Its training instance keeps the residuals, and the backward from them skips
/// its pass over the keys; that saves more than the padded forward costs (at inference Auto keeps
/// the `mma.sync` d = 32 instance there, [`SMALL_HEAD_DIMS_HOPPER_FROM`]).
fn small_head_dims_on_hopper(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
    auto: Plan,
) -> Plan {
    let passed_over = opts.method == Method::Auto
        && opts.tiles == Tiles::default()
        && problem.head_dim() <= HOPPER_MIN_HEAD_DIM
        && problem.max_lens().0 >= HOPPER_MIN_QUERY_ROWS
        && auto.method == Method::FlashTensorCore;
    if !passed_over {
        return auto;
    }
    let hopper = AttentionOptions { method: Method::FlashHopper, ..opts.clone() };
    match plan(props, dtype, problem, &hopper) {
        Ok(mut p) => {
            p.why.insert(
                0,
                format!(
                    "training forward at d = {} ≤ {HOPPER_MIN_HEAD_DIM}: the Hopper kernel padded to 64 columns, \
                     whose training instance keeps the residuals (at inference Auto keeps the mma.sync kernel for this problem)",
                    problem.head_dim()
                ),
            );
            p
        }
        Err(_) => auto,
    }
}

/// Queries a sequence from which the Hopper kernel runs d ≤ 64 in fixed-length batches in tiles of 192 rows (three
/// consumer warpgroups, each K/V tile serving 192 queries) instead of 128. Measured on the H200
/// (session 20 `call1`, bf16, B·N = 16k, 32 heads): 192 rows −8 to −18% time without a mask and
/// −3 to −11% with a causal one at N = 2048…16384; at N = 1024 +1% and +12% (6 tiles of 192
/// cover 1152 rows: an eighth of the work is padding).
pub const ROWS_192_FROM: usize = 2048;

/// Queries a sequence from which the Hopper kernel runs head dims 129–192 in fixed-length
/// batches in 112-key tiles (one query tile a block) instead of the 64-key ones (persistent
/// where there are more query tiles than SMs), without a causal mask and with one. Measured on
/// the H200 (session 22 `call2`, d = 160 and 192, bf16 and f16, B·N = 16k, H·d ≈ 2k): 112 keys
/// −2 to −7% time without a mask at N = 4096…16384 and +1 to +3% at 2048, +1 to −4% with a
/// causal mask at N = 2048 and 0 to −11% at 4096…16384; at N = 1024 +6 to +12% without a mask
/// (10 tiles of 112 keys cover 1120) and +1 to +3% with one.
pub const WIDE_KEYS_192_FROM: (usize, usize) = (4096, 2048);

/// How the plan's reason for d = 192's 112-key tiles begins.
const WIDE_KEYS_WHY: &str = "129 ≤ d ≤ 192";

/// The plan's reason naming a Hopper instance's tiles.
fn hopper_why(config: &flashattn_kernels::config::WgmmaConfig) -> String {
    format!(
        "{HOPPER_WHY} {}×{} tiles (128-byte swizzled panels) through {} stages, {} warpgroups compute with wgmma",
        config.block_m,
        config.block_n,
        config.stages,
        config.consumers()
    )
}

/// How [`hopper_why`] begins.
const HOPPER_WHY: &str = "Hopper kernel: TMA loads";

/// How the plan's reason for 192-row tiles begins.
const ROWS_192_WHY: &str = "d ≤ 64";

/// How the plan's reason for a persistent Hopper grid begins.
const PERSISTENT_WHY: &str = "persistent grid";

/// `plan` with a persistent Hopper instance ([`WgmmaConfig::persistent`]) or a 192-row one
/// (d ≤ 64, [`ROWS_192_FROM`]) swapped for the one-tile, 128-row instance of its head dims on
/// the problem's own grid: for the training forward (its instances run one 128-row query tile
/// a block), for the steps of context-parallel attention (they write partial rows, which the
/// persistent and 192-row instances' GPU tests do not cover: they need two GPUs) and for
/// outputs TMA cannot store. Other plans come back as they are.
pub(crate) fn one_tile_per_block(
    props: &DeviceProps,
    problem: &Problem,
    mut plan: Plan,
) -> Result<Plan, InvalidInput> {
    let method = plan.method;
    for launch in &mut plan.launches {
        let Some(Family::FlashWgmma(e, i)) = launch.kernel.map(|k| k.info().family) else { continue };
        let a = WGMMA_CONFIGS[i];
        if a.one_tile_128() {
            continue;
        }
        let Some(t) = wgmma_default(problem.head_dim() as u32) else { continue };
        let b = WGMMA_CONFIGS[t];
        if (a.head_dim, a.block_n, a.stages) != (b.head_dim, b.block_n, b.stages) {
            continue;
        }
        let kernel = kernel_on(method, props, Family::FlashWgmma(e, t))?;
        launch.kernel = Some(kernel);
        launch.kind = LaunchKind::Kernel(kernel.name());
        launch.grid = flash_grid(method, problem, b.block_m, 1)?;
        launch.threads = b.threads();
        launch.shared_bytes = b.shared_bytes();
        plan.tiles = Some((b.block_m as usize, b.block_n as usize));
        plan.why.retain(|w| !w.starts_with(PERSISTENT_WHY) && !w.starts_with(ROWS_192_WHY));
        for w in plan.why.iter_mut().filter(|w| w.starts_with(HOPPER_WHY)) {
            *w = hopper_why(&b);
        }
    }
    Ok(plan)
}

/// `Method::Auto`: the first rule of [`AUTO_RULES`] whose method runs the problem. Each rule
/// passed over leaves its reason in `not_taken`.
fn plan_auto(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let mut not_taken = Vec::new();
    let reason_of = |refused: InvalidInput| match refused {
        InvalidInput::Unsupported { reason, .. } => Ok(reason),
        InvalidInput::Tiles { reason, .. } => Ok(Reason::Tiles(reason)),
        other => Err(other),
    };
    for (i, rule) in AUTO_RULES.iter().enumerate() {
        let attempt = match rule.method {
            Method::FlashTensorCore => plan_mma(props, dtype, problem, opts),
            // A device without sm_90 never sees the Hopper rule (not a path it passed over).
            Method::FlashHopper if props.target() != Some(Target::Sm90a) => continue,
            Method::FlashHopper => hopper_for_auto(props, dtype, problem, opts),
            Method::Standard => standard_for_auto(props, dtype, problem, opts),
            _ => plan_simt(props, dtype, problem, opts),
        };
        match attempt {
            Ok(mut plan) => {
                plan.not_taken = not_taken;
                plan.why.insert(0, format!("auto rule {} ({}): {}", i + 1, rule.method, rule.when));
                return Ok(plan);
            }
            // The last rule's refusal is the answer.
            Err(e) if i + 1 == AUTO_RULES.len() => return Err(e),
            Err(e) => not_taken.push(NotTaken { method: rule.method, reason: reason_of(e)? }),
        }
    }
    unreachable!("the last rule returns")
}

/// The fewest query rows per sequence for which `Method::Auto` takes the Hopper kernel: shorter
/// query sets (decoding, short chunks) leave most of a 128-row tile empty and cannot fill the GPU,
/// where the `mma.sync` kernel packs grouped query heads and splits the keys.
pub const HOPPER_MIN_QUERY_ROWS: usize = 128;

/// The head dims up to which `Method::Auto` keeps the `mma.sync` kernel on sm_90 for shorter
/// sequences (below [`SMALL_HEAD_DIMS_HOPPER_FROM`]): the Hopper instances start at 64 columns,
/// and a padded d = 32 in 128-row tiles runs no faster than the tuned `mma.sync` d = 32 instance.
pub const HOPPER_MIN_HEAD_DIM: usize = 32;

/// Queries a sequence (without a causal mask, with one) from which `Method::Auto` takes the
/// Hopper kernel padded to 64 columns at head dims up to [`HOPPER_MIN_HEAD_DIM`] (fixed-length
/// batches without a window or score modifier: its 192-row tiles). Measured on the H200 (session
/// 22 `call3`, d = 32, bf16 and f16, B·N = 16k, 64 heads, against the `mma.sync` d = 32
/// instance): −15 / −17 / −21 / −21% time at N = 2048 / 4096 / 8192 / 16384 without a mask and
/// +0.3 / −6 / −14 / −17% with one; at N = 1024 +1 to +2% and +8%.
pub const SMALL_HEAD_DIMS_HOPPER_FROM: (usize, usize) = (2048, 4096);

/// The Hopper kernel as `Method::Auto` takes it: as `Method::FlashHopper`, for at least
/// [`HOPPER_MIN_QUERY_ROWS`] query rows and without a split-KV override.
fn hopper_for_auto(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let method = Method::FlashHopper;
    let (from, from_causal) = SMALL_HEAD_DIMS_HOPPER_FROM;
    let long = problem.max_lens().0 >= if problem.causal() { from_causal } else { from };
    let plain =
        problem.varlen().is_none() && masked_features(problem).is_none() && opts.tiles == Tiles::default();
    if problem.head_dim() <= HOPPER_MIN_HEAD_DIM && !(long && plain) {
        let what = "head dims up to 32 in short sequences, variable-length batches or with a window or score \
                    modifier (padded to 64 columns they run no faster than the mma.sync kernel's d = 32 instance; \
                    from 2048 queries a sequence, 4096 with a causal mask, they run 192-row Hopper tiles)";
        return Err(unsupported(method, Reason::NotOnHopper { what }));
    }
    if problem.max_lens().0 < HOPPER_MIN_QUERY_ROWS {
        let what = "fewer than 128 query rows per sequence (decoding and short chunks: the mma.sync kernel \
                    packs grouped query heads and splits the keys)";
        return Err(unsupported(method, Reason::NotOnHopper { what }));
    }
    plan_wgmma(props, dtype, problem, opts)
}

/// Standard attention as `Method::Auto` takes it: fixed-length batches, within the scratch
/// budget, without tile or split overrides (which are the flash kernels').
fn standard_for_auto(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let method = Method::Standard;
    if opts.tiles != Tiles::default() {
        return Err(tile_error(method, opts.tiles, TileError::NotTiled));
    }
    if opts.splits.is_some_and(|s| s > 1) {
        return Err(unsupported(method, Reason::NoSplitKv));
    }
    if problem.varlen().is_some() {
        return Err(unsupported(method, Reason::VarLen));
    }
    let plan = plan_standard(dtype, problem, opts)?;
    let budget = (props.total_memory as f64 * STANDARD_SCRATCH_FRACTION) as u64;
    if plan.scratch_bytes > budget {
        return Err(unsupported(method, Reason::ScratchBudget { needed: plan.scratch_bytes, budget }));
    }
    Ok(plan)
}

fn unsupported(method: Method, reason: Reason) -> InvalidInput {
    InvalidInput::Unsupported { method, reason }
}

fn tile_error(method: Method, tiles: Tiles, reason: TileError) -> InvalidInput {
    InvalidInput::Tiles { method, block_m: tiles.block_m, block_n: tiles.block_n, reason }
}

/// The backward's main kernel's grid order (`BwdParams::key_major`): 0 head-major, or `G`,
/// key-major in groups of `G` (K/V head, sequence) pairs. Key-major where the blocks' walks over
/// the query tiles differ in length — a causal mask: a key tile's walk starts at its diagonal —
/// so that the hardware, which starts blocks `x` first, starts a group's longest walks first
/// and ends the launch with the shortest (session 25, NOTES b40: −2.4 to −5.2% time at d = 128,
/// N = 1024–8192). In groups so that the key tiles of one pair start close together and share
/// its query tiles in the L2 (all the pairs' first key tiles at once would stream every pair's
/// queries: at B = 16, N = 1024, d = 128 some 130 MB against the 60 MB L2): `G` is the largest
/// divisor of the pair count up to 16 (16 pairs of 8 key tiles at N = 1024 fill about one wave
/// of 132 blocks), and only above 16 pairs — one group of 8–16 pairs lost 2–4% at N = 8192–16384
/// (d = 256), where the model of the launch's tail predicts nothing to gain. Head-major
/// otherwise: without a causal mask (equal walks, each head's key blocks together, their rotated
/// starts spreading the dQ adds), on the window instances (windows, softcaps: reading their
/// indices through the key-major selection cost their walk 1–3%, and their walks are of equal
/// length but the last), with no divisor above 1, or where the key tiles exceed the grid's `y`.
pub(crate) fn backward_key_major(problem: &Problem, config: &BwdConfig) -> u32 {
    let pairs = problem.k().heads * problem.batch();
    let group = (1..=16).rev().find(|g| pairs % g == 0).unwrap_or(1);
    let key_tiles = problem.max_lens().1.div_ceil(config.block_n() as usize) as u64;
    // (The window instances read their grid head-major only.)
    let ordered = problem.causal() && !config.windowed_walk() && pairs > 16 && key_tiles <= MAX_GRID[1];
    if ordered && group > 1 { group as u32 } else { 0 }
}

/// [`backward_key_major`] of a backward plan's main kernel (0 for a plan without one).
pub(crate) fn backward_plan_key_major(plan: &Plan, problem: &Problem) -> u32 {
    let main = plan.launches.iter().find_map(|l| match l.kernel?.info().family {
        Family::BwdMma(_, i) => Some(BWD_CONFIGS[i]),
        _ => None,
    });
    main.map_or(0, |c| backward_key_major(problem, &c))
}

/// The backward main kernel's grid for `config`'s key tiles: key-major in groups of `key_major`
/// pairs ([`backward_key_major`]: `x` = pair within the group, `y` = key tile, `z` = group) or
/// head-major (`x` = key tile, `y` = K/V head, `z` = sequence).
fn backward_key_grid(problem: &Problem, config: &BwdConfig, key_major: u32) -> [u64; 3] {
    let key_tiles = problem.max_lens().1.div_ceil(config.block_n() as usize) as u64;
    let (heads, batch) = (problem.k().heads as u64, problem.batch() as u64);
    match key_major as u64 {
        0 => [key_tiles, heads, batch],
        group => [group, key_tiles, heads * batch / group],
    }
}

/// Grid of the flash kernels: (query tiles of the longest sequence × splits) × heads ×
/// sequences, within CUDA's limits.
fn flash_grid(
    method: Method,
    problem: &Problem,
    block_m: u32,
    splits: usize,
) -> Result<(u32, u32, u32), InvalidInput> {
    let grid = [
        problem.max_lens().0.div_ceil(block_m as usize) as u64 * splits as u64,
        problem.q().heads as u64,
        problem.batch() as u64,
    ];
    if grid.iter().zip(MAX_GRID).any(|(&g, max)| g > max) {
        return Err(unsupported(method, Reason::Grid { grid }));
    }
    Ok((grid[0] as u32, grid[1] as u32, grid[2] as u32))
}

/// Device bytes a call allocates for variable-length offsets.
fn offsets_bytes(problem: &Problem) -> u64 {
    problem.varlen().map_or(0, |v| 8 * v.cu_seqlens_q.len() as u64)
}

#[allow(clippy::too_many_arguments)]
fn flash_plan(
    method: Method,
    props: &DeviceProps,
    problem: &Problem,
    family: Family,
    (block_m, block_n): (u32, u32),
    threads: u32,
    shared_bytes: u32,
    splits: usize,
) -> Result<Plan, InvalidInput> {
    let kernel = kernel_on(method, props, family)?;
    let grid = flash_grid(method, problem, block_m, splits)?;
    let launch = Launch {
        kind: LaunchKind::Kernel(kernel.name()),
        grid,
        threads,
        shared_bytes,
        count: 1,
        after_previous: false,
        kernel: Some(kernel),
    };
    let mut launches = vec![launch];
    let mut scratch_bytes = offsets_bytes(problem);
    if splits > 1 {
        launches.push(combine_launch(method, props, family, problem)?);
        scratch_bytes += partial_bytes(problem, splits);
    }
    Ok(Plan {
        method,
        launches,
        tiles: Some((block_m as usize, block_n as usize)),
        scratch_bytes,
        not_taken: Vec::new(),
        splits,
        gqa_packed: false,
        why: Vec::new(),
        residuals: false,
    })
}

/// The combine kernel that merges partial results written by `family` (the tensor-core
/// kernels'; the general kernel writes none).
fn combine_family(family: Family) -> Option<Family> {
    match family {
        Family::FlashMma(e, _) | Family::FlashWgmma(e, _) => Some(Family::Combine(e)),
        _ => None,
    }
}

/// The launch of the combine kernel that merges the partial results `family`'s kernel wrote for
/// `problem` (one warp per query row).
pub(crate) fn combine_launch(
    method: Method,
    props: &DeviceProps,
    family: Family,
    problem: &Problem,
) -> Result<Launch, InvalidInput> {
    let Some(combine) = combine_family(family) else {
        return Err(unsupported(method, Reason::NoSplitKv));
    };
    let combine = kernel_on(method, props, combine)?;
    let rows = problem.max_lens().0.div_ceil(COMBINE_WARPS as usize);
    let grid = [rows as u64, problem.q().heads as u64, problem.batch() as u64];
    if grid.iter().zip(MAX_GRID).any(|(&g, max)| g > max) {
        return Err(unsupported(method, Reason::Grid { grid }));
    }
    Ok(Launch {
        kind: LaunchKind::Kernel(combine.name()),
        grid: (grid[0] as u32, grid[1] as u32, grid[2] as u32),
        threads: 32 * COMBINE_WARPS,
        shared_bytes: 0,
        count: 1,
        // On sm_90 the combine waits for the forward in the kernel (`combine.rs`); the split
        // decode instances let it start early.
        after_previous: props.target() == Some(Target::Sm90a),
        kernel: Some(combine),
    })
}

/// Device bytes of split-KV's partial results: an f32 output row and log-sum-exp per split and
/// query row.
pub(crate) fn partial_bytes(problem: &Problem, splits: usize) -> u64 {
    4 * splits as u64 * problem.lse_len() as u64 * (problem.head_dim() as u64 + 1)
}

/// Blocks per SM split-KV aims for. The decode sweep (`kernels-gpu/NOTES.md`, v9: Llama-3-8B
/// heads, B = 1…64, caches of 1k–128k) peaks at 2–4 blocks per SM.
pub const SPLIT_TARGET_BLOCKS_PER_SM: u64 = 3;

/// Key tiles each split keeps at least: shorter splits spend more on their prologue, their
/// partial results and the combine than they gain in parallel loads.
pub const SPLIT_MIN_KEY_TILES: usize = 2;

/// Split-KV's split count for a decode instance: 1 when the query tiles alone give [`SPLIT_TARGET_BLOCKS_PER_SM`]
/// blocks per SM, else the most splits whose blocks stay within it (rounding down: at B = 16
/// with 8 K/V heads, 3 splits (384 blocks) read the cache 0.6–1.9% faster than the 4 (512)
/// that rounding up gave, `kernels-gpu/NOTES.md` v31), with at least [`SPLIT_MIN_KEY_TILES`]
/// key tiles per split and at most [`MAX_SPLITS`]; then as few splits as give the same key
/// tiles per split (no split left empty by the rounding).
fn choose_splits(props: &DeviceProps, problem: &Problem, config: &MmaConfig) -> usize {
    let (max_q, max_k) = problem.max_lens();
    let blocks =
        max_q.div_ceil(config.block_m as usize) as u64 * problem.q().heads as u64 * problem.batch() as u64;
    let target = props.sm_count as u64 * SPLIT_TARGET_BLOCKS_PER_SM;
    if blocks == 0 || blocks >= target {
        return 1;
    }
    // With a window, a query tile visits about its span of keys, not all of them.
    let w = problem.window();
    let right = if problem.causal() { Some(0) } else { w.right };
    let keys = match (w.left, right) {
        (Some(l), Some(r)) => max_k.min(l.saturating_add(r).saturating_add(max_q)),
        _ => max_k,
    };
    let key_tiles = keys.div_ceil(config.block_n as usize).max(1);
    let most = (key_tiles / SPLIT_MIN_KEY_TILES).clamp(1, MAX_SPLITS);
    let splits = ((target / blocks) as usize).clamp(1, most);
    key_tiles.div_ceil(key_tiles.div_ceil(splits))
}

/// The kernel of `family` if it exists on the device's target.
fn kernel_on(method: Method, props: &DeviceProps, family: Family) -> Result<KernelId, InvalidInput> {
    let kernel = KernelId::of(family).ok_or_else(|| {
        unsupported(method, Reason::Target { kernel: "(not instantiated)", target: props.ptx_target })
    })?;
    match props.target() {
        Some(t) if kernel.info().on(t) => Ok(kernel),
        _ => Err(unsupported(method, Reason::Target { kernel: kernel.name(), target: props.ptx_target })),
    }
}

fn plan_mma(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let method = Method::FlashTensorCore;
    let tiles = opts.tiles;
    if dtype == DType::F32 {
        return Err(unsupported(method, Reason::DType { dtype }));
    }
    let d = problem.head_dim();
    // Rows the 16-byte copies can take: a head dim of whole chunks and strides of whole chunks
    // (strides of size-1 dimensions never move). Otherwise the element-wise instances copy.
    let misaligned = [("q", problem.q()), ("k", problem.k()), ("v", problem.v()), ("o", problem.o())]
        .into_iter()
        .find(|(_, l)| l.moving_strides().any(|(_, s)| s % TC_STRIDE_ALIGN != 0));
    let aligned = d % TC_STRIDE_ALIGN == 0 && misaligned.is_none();
    let default = if aligned {
        mma_default(d as u32, problem.causal(), problem.max_lens().0)
    } else {
        mma_elementwise(d as u32)
    };
    let default = default.ok_or_else(|| {
        let mut supported: Vec<u32> =
            MMA_CONFIGS.iter().filter(|c| !c.is_decode()).map(|c| c.head_dim).collect();
        supported.sort_unstable();
        supported.dedup();
        unsupported(method, Reason::HeadDim { head_dim: d, supported })
    })?;
    let mut why = Vec::new();
    if !aligned {
        let cause = match misaligned {
            Some((tensor, l)) if d % TC_STRIDE_ALIGN == 0 => format!(
                "{tensor}'s strides {:?} are not multiples of {TC_STRIDE_ALIGN} elements",
                [l.batch_stride, l.seq_stride, l.head_stride]
            ),
            _ => format!("head dim {d} is not a multiple of {TC_STRIDE_ALIGN}"),
        };
        why.push(format!(
            "element-wise copies: {cause}, so rows are not 16-byte aligned; tiles are read element by \
             element into the same tensor-core kernel"
        ));
    }
    // Decoding with grouped K/V heads: the query heads of a group become the rows of one tile.
    let packed = problem.gqa_packed();
    let eff = packed.as_ref().unwrap_or(problem);
    if packed.is_some() {
        why.push(format!(
            "GQA packing: one query token, {} query heads per K/V head are the rows of one tile \
             (K/V read once per group)",
            problem.group_size()
        ));
    }
    let rows = eff.max_lens().0;
    // Sliding windows and score modifiers run on the masked instances, which copy 16-byte chunks.
    let masked = masked_features(problem);
    let windowed = masked.is_some();
    if let Some((reason, _)) = masked.as_ref().filter(|_| !aligned) {
        return Err(unsupported(method, reason.clone()));
    }
    // A tile override picks one of the instantiated configurations of this head dim.
    let index = match (tiles.block_m, tiles.block_n) {
        (None, None) if windowed => {
            let (reason, what) = masked.clone().unwrap_or((Reason::Window, String::new()));
            let i = mma_window(d as u32, rows <= 16).ok_or_else(|| unsupported(method, reason))?;
            let c = MMA_CONFIGS[i];
            why.push(format!("masked instance ({}×{} tiles): {what}", c.block_m, c.block_n));
            i
        }
        (_, _) if windowed => {
            let available = mma_window(d as u32, false)
                .map(|i| vec![(MMA_CONFIGS[i].block_m, MMA_CONFIGS[i].block_n)])
                .unwrap_or_default();
            return Err(tile_error(method, tiles, TileError::NotInstantiated { head_dim: d, available }));
        }
        (None, None) if rows <= 16 && aligned => {
            let i = mma_decode(d as u32).unwrap_or(default);
            why.push(format!("decode instance: {rows} query rows per tile, one warp per block"));
            i
        }
        (None, None) => default,
        (m, n) => {
            let c = MMA_CONFIGS[default];
            let (m, n) = (m.unwrap_or(c.block_m as usize), n.unwrap_or(c.block_n as usize));
            let found = u32::try_from(m)
                .ok()
                .zip(u32::try_from(n).ok())
                .filter(|&(m, n)| m > 0 && n > 0)
                .and_then(|(m, n)| mma_find(default, d as u32, m, n));
            found.ok_or_else(|| {
                let available = MMA_CONFIGS
                    .iter()
                    .filter(|c| c.runs(d as u32))
                    .filter(|c| {
                        (c.is_decode() && aligned)
                            || (c.head_dim, c.pad)
                                == (MMA_CONFIGS[default].head_dim, MMA_CONFIGS[default].pad)
                    })
                    .map(|c| (c.block_m, c.block_n))
                    .collect();
                tile_error(method, tiles, TileError::NotInstantiated { head_dim: d, available })
            })?
        }
    };
    let config = MMA_CONFIGS[index];
    if (problem.cache_seqlens().is_some() || problem.block_table().is_some()) && !config.is_decode() {
        // Only the decode instances read a cache's lengths and page table (`SeqView::of_cached`
        // and `HeadRows::paged_if` in the kernels: the 128-row instances have no register left
        // for them).
        return Err(unsupported(method, Reason::KvCache));
    }
    let limit = props.max_shared_per_block;
    if config.shared_bytes() > limit {
        return Err(unsupported(method, Reason::SharedMemory { needed: config.shared_bytes(), limit }));
    }
    // Split-KV by default only for the decode instances: with full query tiles the partial
    // outputs cost more than the extra blocks gain (measured 0.67–0.70× on under-filled prefill
    // shapes, `kernels-gpu/NOTES.md` v9).
    let splits = match opts.splits {
        // The combine kernel reads and writes 16-byte rows.
        Some(s) if s > 1 && config.pad == PAD_ELEMENTS => {
            return Err(unsupported(method, Reason::SplitUnaligned { head_dim: d }));
        }
        Some(s) => s,
        None if config.is_decode() => choose_splits(props, eff, &config),
        None => 1,
    };
    if splits > 1 {
        why.push(format!(
            "split-KV: {} query tiles fill too little of {} SMs, so each tile's keys are split {splits} ways \
             and a combine kernel merges them",
            eff.max_lens().0.div_ceil(config.block_m as usize) * eff.q().heads * eff.batch(),
            props.sm_count
        ));
    }
    let family = Family::FlashMma(elem(dtype), index);
    let tiles = (config.block_m, config.block_n);
    let mut plan =
        flash_plan(method, props, eff, family, tiles, config.threads(), config.shared_bytes(), splits)?;
    plan.gqa_packed = packed.is_some();
    plan.why = why;
    Ok(plan)
}

/// `Method::FlashHopper`: the `wgmma` instance for the head dim (its masked instance with a
/// sliding window or score modifiers), on sm_90a, for fixed-length and variable-length batches
/// without split-KV,
/// with strides TMA can describe (16-byte multiples).
fn plan_wgmma(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let method = Method::FlashHopper;
    let no = |what| Err(unsupported(method, Reason::NotOnHopper { what }));
    if props.target() != Some(Target::Sm90a) {
        let kernel = "flash_fwd_wgmma (TMA and wgmma: compute capability 9.0)";
        return Err(unsupported(method, Reason::Target { kernel, target: props.ptx_target }));
    }
    if dtype == DType::F32 {
        return Err(unsupported(method, Reason::DType { dtype }));
    }
    if problem.cache_seqlens().is_some() {
        return no("per-entry K/V cache lengths (TMA would load the cache's unused rows; \
                   Method::FlashTensorCore runs them)");
    }
    if problem.block_table().is_some() {
        return no("a paged K/V cache (TMA boxes cannot follow a page table; \
                   Method::FlashTensorCore's decode instances read it)");
    }
    if opts.splits.is_some_and(|s| s > 1) {
        return Err(unsupported(method, Reason::NoSplitKv));
    }
    let d = problem.head_dim();
    // Sliding windows and score modifiers run on the masked instances.
    let masked = masked_features(problem);
    let find = match masked {
        Some(_) if problem.score_mod(0).softcap > 0.0 => wgmma_softcap,
        Some(_) => wgmma_masked,
        None => wgmma_default,
    };
    let index = u32::try_from(d).ok().and_then(find).ok_or_else(|| {
        let supported = WGMMA_CONFIGS.iter().map(|c| c.head_dim).collect();
        unsupported(method, Reason::HeadDim { head_dim: d, supported })
    })?;
    // A tile override picks among the instances of the kind; without one, d ≤ 64 takes its
    // 192-row instances (three consumer warpgroups) from `ROWS_192_FROM` queries a sequence in
    // fixed-length batches (a variable-length batch's sequences each end in a partial tile, and
    // its 192-row rows were not timed).
    let rows_192 = opts.tiles.block_m.is_none()
        && opts.tiles.block_n.is_none()
        && problem.varlen().is_none()
        && problem.max_lens().0 >= ROWS_192_FROM;
    // The same for 112-key tiles at head dims 129–192 (plain instances; `WIDE_KEYS_192_FROM`).
    let from = if problem.causal() { WIDE_KEYS_192_FROM.1 } else { WIDE_KEYS_192_FROM.0 };
    let wide_keys = opts.tiles == Tiles::default()
        && masked.is_none()
        && problem.varlen().is_none()
        && WGMMA_CONFIGS[index].head_dim == 192
        && problem.max_lens().0 >= from;
    let index = match (opts.tiles.block_m, opts.tiles.block_n) {
        (None, None) if wide_keys => wgmma_with_tiles(index, 128, 112).unwrap_or(index),
        (None, None) if rows_192 => wgmma_with_rows(index, 192).unwrap_or(index),
        (None, None) => index,
        (m, n) => {
            let c = WGMMA_CONFIGS[index];
            let (m, n) = (m.unwrap_or(c.block_m as usize), n.unwrap_or(0));
            let found = u32::try_from(m).ok().zip(u32::try_from(n).ok());
            found.and_then(|(m, n)| wgmma_with_tiles(index, m, n)).unwrap_or(index)
        }
    };
    // A persistent grid (one block an SM walking the query tiles: the next tile's Q and K/V load
    // under the current tile's last products and epilogue) for fixed-length problems without a
    // window or modifier and with more tiles than SMs: a fixed stride over the tiles without a
    // causal mask (every tile the same work), tiles taken from a counter, longest first, with
    // one (a fixed stride over tiles of unequal cost lost 17–39%, NOTES v17).
    let (_, total_tiles) = crate::hopper::query_tiles(problem, WGMMA_CONFIGS[index].block_m);
    let persistent = masked.is_none()
        && problem.varlen().is_none()
        && total_tiles > props.sm_count as u64
        && total_tiles <= u32::MAX as u64;
    let index = match wgmma_persistent(d as u32, problem.causal())
        .and_then(|p| wgmma_with_tiles(p, WGMMA_CONFIGS[index].block_m, WGMMA_CONFIGS[index].block_n))
    {
        Some(p) if persistent => p,
        _ => index,
    };
    let config = WGMMA_CONFIGS[index];
    let (m, n) = (opts.tiles.block_m, opts.tiles.block_n);
    if m.is_some_and(|m| m != config.block_m as usize) || n.is_some_and(|n| n != config.block_n as usize) {
        let available = WGMMA_CONFIGS
            .iter()
            .enumerate()
            .filter(|&(i, c)| wgmma_with_tiles(index, c.block_m, c.block_n) == Some(i))
            .map(|(_, c)| (c.block_m, c.block_n))
            .collect();
        return Err(tile_error(method, opts.tiles, TileError::NotInstantiated { head_dim: d, available }));
    }
    // (An empty problem launches nothing: its strides never reach TMA.)
    for (tensor, l) in [("q", problem.q()), ("k", problem.k()), ("v", problem.v()), ("o", problem.o())]
        .into_iter()
        .filter(|_| !problem.is_empty())
    {
        let strides = [l.batch_stride, l.seq_stride, l.head_stride];
        if crate::hopper::tma_strides(l, 2).is_none()
            || l.moving_strides().any(|(_, s)| s % TC_STRIDE_ALIGN != 0)
        {
            return Err(unsupported(
                method,
                Reason::Alignment { tensor, strides, multiple_of: TC_STRIDE_ALIGN },
            ));
        }
    }
    for l in [problem.q(), problem.k()] {
        if l.seqlen > i32::MAX as usize || l.heads > i32::MAX as usize || l.batch > i32::MAX as usize {
            return no("more than 2³¹ − 1 tokens, heads or sequences (TMA coordinates are 32-bit)");
        }
    }
    let limit = props.max_shared_per_block;
    if config.shared_bytes() > limit {
        return Err(unsupported(method, Reason::SharedMemory { needed: config.shared_bytes(), limit }));
    }
    let family = Family::FlashWgmma(elem(dtype), index);
    let tiles = (config.block_m, config.block_n);
    let mut plan =
        flash_plan(method, props, problem, family, tiles, config.threads(), config.shared_bytes(), 1)?;
    plan.why.push(hopper_why(&config));
    if rows_192 && config.block_m == 192 {
        plan.why.push(format!(
            "{ROWS_192_WHY} from {ROWS_192_FROM} queries a sequence: 192-row tiles (each K/V tile serves 192 queries; \
             at fewer, a partial last tile's padding costs more)"
        ));
    }
    if wide_keys && config.block_n == 112 {
        plan.why.push(format!(
            "{WIDE_KEYS_WHY} from {from} queries a sequence{}: 112-key tiles, one query tile a block (the fixed \
             costs of a key tile spread over more keys; at fewer queries the 64-key persistent grid is faster)",
            if problem.causal() { " with a causal mask" } else { " without a mask" }
        ));
    }
    if config.persistent != 0 {
        if let Some(launch) = plan.launches.first_mut() {
            launch.grid = (props.sm_count, 1, 1);
        }
        plan.why.push(format!(
            "{PERSISTENT_WHY}: {} blocks (one an SM) walk the {total_tiles} query tiles{}, each loading its \
             next tile's Q and K/V while the current tile's last products and output stores run{}",
            props.sm_count,
            if config.persistent == 2 { " (taken from a counter, longest first)" } else { "" },
            if config.q_tiles() == 2 {
                "; the next Q into a second Q tile, issued with the current tile's K/V (N = 1024: −0.5 to −7% \
                 time, measured)"
            } else {
                ""
            }
        ));
    }
    if let Some((_, what)) = masked {
        plan.why.push(format!("masked instance: {what}"));
        if config.window == 2 {
            plan.why.push(
                "softcap: the masked instance without the intra-warpgroup overlap (15% faster for softcaps, \
                 measured)"
                    .into(),
            );
        }
    }
    if problem.varlen().is_some() {
        plan.why.push(
            "variable-length batch: one tensor map over the packed tokens; V rows a sequence's last tile \
             borrows from the next sequence are zeroed before P·V"
                .into(),
        );
    } else if config.o_by_tma() {
        // (`run_wgmma` also needs O's address 16-byte aligned and a call that writes O itself.)
        plan.why.push(
            "output tiles staged in shared memory and stored by TMA (N = 1024: −5 to −9% time, measured)"
                .into(),
        );
    }
    Ok(plan)
}

fn plan_simt(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    let method = Method::Flash;
    let tiles = opts.tiles;
    // No masked instances here: windows and score modifiers are refused, typed.
    if let Some((reason, _)) = masked_features(problem) {
        return Err(unsupported(method, reason));
    }
    if problem.block_table().is_some() {
        // Paged caches are read by the tensor-core kernel's decode instances only.
        return Err(unsupported(method, Reason::KvCache));
    }
    if opts.splits.is_some_and(|s| s > 1) {
        return Err(unsupported(method, Reason::NoSplitKv));
    }
    let d = problem.head_dim();
    let default = SimtConfig::default_for(d as u32)
        .ok_or_else(|| unsupported(method, Reason::HeadDim { head_dim: d, supported: vec![256] }))?;
    let pick = |x: Option<usize>, default: u32| x.map_or(Some(default), |x| u32::try_from(x).ok());
    let block_m = pick(tiles.block_m, default.block_m);
    let block_n = pick(tiles.block_n, default.block_n);
    let (Some(block_m), Some(block_n)) = (block_m, block_n) else {
        return Err(tile_error(
            method,
            tiles,
            TileError::BlockN { multiple_of: SIMT_KEY_CHUNK, max: SIMT_MAX_BLOCK_N },
        ));
    };
    if !SIMT_BLOCK_M.contains(&block_m) {
        return Err(tile_error(method, tiles, TileError::BlockM { allowed: &SIMT_BLOCK_M }));
    }
    if !SimtConfig::tiles_valid(block_m, block_n) {
        return Err(tile_error(
            method,
            tiles,
            TileError::BlockN { multiple_of: SIMT_KEY_CHUNK, max: SIMT_MAX_BLOCK_N },
        ));
    }
    let config = SimtConfig { block_m, block_n, ..default };
    let limit = props.max_shared_per_block;
    if config.shared_bytes() > limit {
        let reason = TileError::SharedMemory { needed: config.shared_bytes(), limit };
        return Err(if tiles == Tiles::default() {
            unsupported(method, Reason::SharedMemory { needed: config.shared_bytes(), limit })
        } else {
            tile_error(method, tiles, reason)
        });
    }
    let family = Family::FlashSimt(elem(dtype), config.padded_dim);
    let tiles = (config.block_m, config.block_n);
    flash_plan(method, props, problem, family, tiles, config.threads(), config.shared_bytes(), 1)
}

/// The leading dimension cuBLAS sees for a tensor's rows (its token stride; for a single token
/// the stride never moves an address, and the head dim is passed instead).
pub(crate) fn gemm_ld(l: &Layout) -> usize {
    if l.seqlen <= 1 { l.head_dim } else { l.seq_stride }
}

/// Elements of S (and of P) for the whole call: all sequences at once for fixed-length batches,
/// the longest sequence for varlen (processed one at a time). `None` on overflow.
pub(crate) fn standard_matrix_elems(problem: &Problem) -> Option<u64> {
    let h = problem.q().heads as u64;
    let (q, k) = problem.max_lens();
    let per_seq = h.checked_mul(q as u64)?.checked_mul(k as u64)?;
    match problem.varlen() {
        Some(_) => Some(per_seq),
        None => per_seq.checked_mul(problem.q().batch as u64),
    }
}

fn plan_standard(dtype: DType, problem: &Problem, opts: &AttentionOptions) -> Result<Plan, InvalidInput> {
    let method = Method::Standard;
    let tiles = opts.tiles;
    // No masked instances here: windows and score modifiers are refused, typed.
    if let Some((reason, _)) = masked_features(problem) {
        return Err(unsupported(method, reason));
    }
    if problem.cache_seqlens().is_some() || problem.block_table().is_some() {
        return Err(unsupported(method, Reason::KvCache));
    }
    if tiles != Tiles::default() {
        return Err(tile_error(method, tiles, TileError::NotTiled));
    }
    if opts.splits.is_some_and(|s| s > 1) {
        return Err(unsupported(method, Reason::NoSplitKv));
    }
    let d = problem.head_dim();
    let i32_max = i32::MAX as u128;
    if problem.is_empty() {
        // Nothing runs: no matrix, stride or size to check.
        return Ok(Plan {
            method,
            launches: Vec::new(),
            tiles: None,
            scratch_bytes: 0,
            not_taken: Vec::new(),
            splits: 1,
            gqa_packed: false,
            why: Vec::new(),
            residuals: false,
        });
    }
    for (tensor, l) in [("q", problem.q()), ("k", problem.k()), ("v", problem.v()), ("o", problem.o())] {
        let ld = gemm_ld(l);
        if ld < d {
            return Err(unsupported(
                method,
                Reason::GemmStride { tensor, seq_stride: l.seq_stride, head_dim: d },
            ));
        }
        if ld as u128 > i32_max {
            return Err(unsupported(
                method,
                Reason::TooLarge { what: "a token stride", value: ld as u128, limit: i32_max },
            ));
        }
    }
    let too_large = |what, value: u128, limit| unsupported(method, Reason::TooLarge { what, value, limit });
    let elems = standard_matrix_elems(problem)
        .ok_or_else(|| too_large("score-matrix elements", u128::MAX, u64::MAX as u128))?;
    let bytes = (elems as u128) * (4 + dtype.size_bytes() as u128);
    if bytes > u64::MAX as u128 {
        return Err(too_large("bytes of S and P", bytes, u64::MAX as u128));
    }
    let (max_q, _) = problem.max_lens();
    let rows_per_call = match problem.varlen() {
        Some(_) => problem.q().heads as u128 * max_q as u128,
        None => problem.q().batch as u128 * problem.q().heads as u128 * max_q as u128,
    };
    if rows_per_call > MAX_GRID[0] as u128 {
        return Err(unsupported(
            method,
            Reason::Grid { grid: [rows_per_call.min(u64::MAX as u128) as u64, 1, 1] },
        ));
    }
    let batches = problem.batch() as u128 * problem.k().heads as u128;
    if batches > i32_max {
        return Err(too_large("GEMM batch count", batches, i32_max));
    }
    let softmax = KernelId::of(Family::SoftmaxRows(elem(dtype)))
        .ok_or_else(|| unsupported(method, Reason::DType { dtype }))?;
    let groups = problem.group_size() as u32;
    let gemm = |what| Launch {
        kind: LaunchKind::Gemm(what),
        grid: (0, 0, 0),
        threads: 0,
        shared_bytes: 0,
        count: groups,
        after_previous: false,
        kernel: None,
    };
    let launches = vec![
        gemm("S = Q·Kᵀ"),
        Launch {
            kind: LaunchKind::Kernel(softmax.name()),
            grid: (rows_per_call as u32, 1, 1),
            threads: SOFTMAX_THREADS,
            shared_bytes: SOFTMAX_SHARED_BYTES,
            count: 1,
            after_previous: false,
            kernel: Some(softmax),
        },
        gemm("O = P·V"),
    ];
    Ok(Plan {
        method,
        launches,
        tiles: None,
        scratch_bytes: bytes as u64,
        not_taken: Vec::new(),
        splits: 1,
        gqa_packed: false,
        why: Vec::new(),
        residuals: false,
    })
}

/// The tiles of every backward instance of `BWD_CONFIGS[index]`'s head dim and window kind.
fn bwd_tiles(index: usize) -> Vec<(u32, u32)> {
    let b = BWD_CONFIGS[index];
    BWD_CONFIGS
        .iter()
        .filter(|c| c.head_dim == b.head_dim && c.window == b.window)
        .map(|c| (BWD_BLOCK_M, c.block_n()))
        .collect()
}

/// The GPU backward pass's plan: the preprocessing, main and dQ-conversion kernels of the
/// backward instance for the head dim (`kernels-gpu/src/gpu/flash_bwd.rs`). Runs f16 and bf16,
/// head dims that are multiples of 8 up to the largest backward instance, 16-byte rows for all
/// seven tensors (`layouts`: dO, dQ, dK, dV with their names), no window, no split-KV override;
/// a tile override must name the instance's tiles. `Method::Auto` and
/// `Method::FlashTensorCore` both take this path; the other methods have no backward.
pub fn plan_backward(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
    layouts: [(&'static str, &Layout); 4],
) -> Result<Plan, InvalidInput> {
    backward_plan(props, dtype, problem, opts, layouts, false)
}

/// [`plan_backward`] given a training forward's residuals ([`Plan::residuals`] of the forward's
/// plan, [`plan_for_backward`]): the preprocessing kernel then takes `D` from O and O's
/// residual instead of a pass over the keys (its own [`Plan::residuals`] says so) — on sm_90a;
/// elsewhere the plan is [`plan_backward`]'s.
pub fn plan_backward_from_residuals(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
    layouts: [(&'static str, &Layout); 4],
) -> Result<Plan, InvalidInput> {
    backward_plan(props, dtype, problem, opts, layouts, true)
}

fn backward_plan(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
    layouts: [(&'static str, &Layout); 4],
    residuals: bool,
) -> Result<Plan, InvalidInput> {
    crate::problem::check_splits(opts)?;
    let method = Method::FlashTensorCore;
    match opts.method {
        Method::Auto | Method::FlashTensorCore => {}
        other => return Err(unsupported(other, Reason::NoBackward)),
    }
    if let Some(reason) = cpu_only_feature(problem, false) {
        return Err(unsupported(method, reason));
    }
    if opts.splits.is_some_and(|s| s > 1) {
        return Err(unsupported(method, Reason::NoSplitKv));
    }
    if dtype == DType::F32 {
        return Err(unsupported(method, Reason::DType { dtype }));
    }
    let d = problem.head_dim();
    let masked = masked_features(problem);
    let windowed = masked.is_some();
    // ALiBi alone (no window, no softcap) on sm_90a: the ALiBi instance, the plain instance's walk
    // and staged dQ adds (where one exists for the head dim), else the window instance.
    let alibi_only = windowed && problem.window().is_none() && problem.score_mod(0).softcap == 0.0;
    let alibi = if alibi_only && props.target() == Some(Target::Sm90a) { bwd_alibi(d as u32) } else { None };
    // A window without score modifiers on sm_90a: the window-only instance (the window
    // instance's code without the modifiers', NOTES b44), where one exists for the head dim,
    // else the window instance.
    let window_only = windowed && !problem.has_score_mod();
    let window_only =
        if window_only && props.target() == Some(Target::Sm90a) { bwd_window_only(d as u32) } else { None };
    let index = match (windowed, alibi.or(window_only)) {
        (_, Some(i)) => Some(i),
        (true, None) => bwd_window(d as u32),
        (false, None) => bwd_default(d as u32),
    };
    let index = index.ok_or_else(|| {
        let supported = BWD_CONFIGS.iter().map(|c| c.head_dim).collect();
        unsupported(method, Reason::HeadDim { head_dim: d, supported })
    })?;
    // A tile override may name another instance of the head dim (same window kind).
    let index = match opts.tiles.block_n {
        Some(n) if n != BWD_CONFIGS[index].block_n() as usize => {
            u32::try_from(n).ok().and_then(|n| bwd_find(index, n)).unwrap_or(index)
        }
        _ => index,
    };
    let config = BWD_CONFIGS[index];
    let inputs = [("q", problem.q()), ("k", problem.k()), ("v", problem.v()), ("o", problem.o())];
    for (tensor, l) in inputs.into_iter().chain(layouts) {
        if l.moving_strides().any(|(_, s)| s % TC_STRIDE_ALIGN != 0) {
            let strides = [l.batch_stride, l.seq_stride, l.head_stride];
            return Err(unsupported(
                method,
                Reason::Alignment { tensor, strides, multiple_of: TC_STRIDE_ALIGN },
            ));
        }
    }
    let tiles = (BWD_BLOCK_M, config.block_n());
    let (tm, tn) = (opts.tiles.block_m, opts.tiles.block_n);
    if tm.is_some_and(|m| m != tiles.0 as usize) || tn.is_some_and(|n| n != tiles.1 as usize) {
        return Err(tile_error(
            method,
            opts.tiles,
            TileError::NotInstantiated { head_dim: d, available: bwd_tiles(index) },
        ));
    }
    let limit = props.max_shared_per_block;
    // (The sm_90a kernels compute the scores with `wgmma`, their tiles 1024-byte aligned.)
    let wgmma = props.target() == Some(Target::Sm90a);
    let (main_bytes, prep_bytes) = (config.shared_bytes(wgmma), config.prep_shared_bytes(wgmma));
    let needed = main_bytes.max(prep_bytes);
    if needed > limit {
        return Err(unsupported(method, Reason::SharedMemory { needed, limit }));
    }
    let e = elem(dtype);
    // (The residual preprocessing kernel: sm_90a.)
    let residual_prep = if residuals {
        KernelId::of(Family::BwdPrepResidual(e, index))
            .filter(|k| props.target().is_some_and(|t| k.info().on(t)))
    } else {
        None
    };
    let (prep, main, conv) = (
        match residual_prep {
            Some(k) => k,
            None => kernel_on(method, props, Family::BwdPrep(e, index))?,
        },
        kernel_on(method, props, Family::BwdMma(e, index))?,
        kernel_on(method, props, Family::BwdDq(e))?,
    );
    let query_grid = flash_grid(method, problem, BWD_BLOCK_M, 1)?;
    let key_major = backward_key_major(problem, &config);
    let key_grid = backward_key_grid(problem, &config, key_major);
    if key_grid.iter().zip(MAX_GRID).any(|(&g, max)| g > max) {
        return Err(unsupported(method, Reason::Grid { grid: key_grid }));
    }
    let kernel = |k: KernelId, grid, threads, shared_bytes| Launch {
        kind: LaunchKind::Kernel(k.name()),
        grid,
        threads,
        shared_bytes,
        count: 1,
        after_previous: false,
        kernel: Some(k),
    };
    // A kernel with nothing to do (no query rows for preprocessing and conversion, no keys
    // for the main kernel) is not launched: with queries but no keys, dQ is the zeros the
    // preprocessing writes; with keys but no queries, dK and dV are the main kernel's zeros.
    let launches: Vec<Launch> = [
        kernel(prep, query_grid, BWD_PREP_THREADS, prep_bytes),
        kernel(
            main,
            (key_grid[0] as u32, key_grid[1] as u32, key_grid[2] as u32),
            config.threads(),
            main_bytes,
        ),
        kernel(conv, query_grid, BWD_PREP_THREADS, 0),
    ]
    .into_iter()
    .filter(|l| l.grid.0 > 0 && l.grid.1 > 0 && l.grid.2 > 0)
    .collect();
    // On sm_90a each launch after the first is a programmatic dependent of the one before (the
    // kernels wait before reading what it wrote): the gaps between the three hidden (NOTES b41).
    // The first never is: it may read what the caller's own kernels wrote.
    let mut launches = launches;
    for l in launches.iter_mut().skip(1) {
        l.after_previous = wgmma;
    }
    let why = vec![format!(
        "backward: FlashAttention-2's algorithm on tensor cores, instance d{} ({} warps, {} keys a block, \
         {} queries a step{}); dQ accumulates in f32 with atomics, {}",
        config.head_dim,
        config.warps,
        tiles.1,
        tiles.0,
        if key_major > 0 { "; key blocks in key-major order, the longest walks started first" } else { "" },
        if opts.deterministic {
            "the key tiles taking turns per query tile (deterministic)"
        } else {
            "in any order (the last bits of dQ may differ from run to run; `deterministic: true` fixes the order)"
        }
    )];
    let mut why = why;
    if tile_counters(problem, &config, wgmma) {
        why.push(
            "dQ converted a query tile at a time as soon as the last key block walking it is done (a counter \
             per tile), under the main kernel's last blocks"
                .into(),
        );
    }
    if config.col_groups() > 1 {
        why.push(format!(
            "column groups: the block's {} warpgroups share its {} keys and split the head dim's columns \
             ({} each), both computing the scores, each the softmax of half the keys (sm_90a only)",
            config.col_groups(),
            tiles.1,
            config.head_dim / config.col_groups()
        ));
    }
    if config.tma_query_tiles(true) {
        // (The strides the backward accepts, 16-byte multiples, are strides TMA takes.)
        why.push(
            "Q and dO tiles by TMA (tensor maps; a variable-length sequence's last, partial tile, or a \
             tensor whose address is not 16-byte aligned, by cp.async)"
                .into(),
        );
    }
    if let Some((_, what)) = masked {
        if config.window == 2 {
            why.push(format!(
                "ALiBi instance: {what}; the plain instance's walk and dQ adds staged in shared memory \
                 (bulk reductions), where the window instance adds with each lane's atomics"
            ));
        } else if config.window == 3 {
            why.push(format!(
                "window-only instance: {what}; the window instance's code without the score modifiers'"
            ));
        } else {
            why.push(format!("masked instance: {what}"));
        }
    }
    if residual_prep.is_some() {
        why.push(
            "from the training forward's residuals: D = dO·(O + O_lo) on tensor cores and the forward's own \
             probability offsets and sums, no preprocessing pass over the keys"
                .into(),
        );
    } else {
        why.push(
            "preprocessing: a pass over each row's keys for D and the probabilities' sum (no training residuals)"
                .into(),
        );
    }
    let mut plan = Plan {
        method,
        launches,
        tiles: Some((tiles.0 as usize, tiles.1 as usize)),
        scratch_bytes: offsets_bytes(problem)
            + backward_scratch_bytes(problem, opts.deterministic, tile_counters(problem, &config, wgmma)),
        not_taken: Vec::new(),
        splits: 1,
        gqa_packed: false,
        why,
        residuals: residual_prep.is_some(),
    };
    if plan.launches.is_empty() {
        plan.scratch_bytes = 0;
    }
    Ok(plan)
}

/// What the masked instances (forward and backward) apply for `problem`: the reason a method
/// that lacks them gives (the window's first), and in words what they do. `None`: no window and
/// no score modifier.
fn masked_features(problem: &Problem) -> Option<(Reason, String)> {
    let window = !problem.window().is_none();
    let mods = problem.has_score_mod();
    if !window && !mods {
        return None;
    }
    let mut what = Vec::new();
    if window {
        what.push("sliding window (key tiles outside every row's window are never loaded)".to_string());
    }
    if mods {
        let sm = problem.score_mod(0);
        let mut m = Vec::new();
        if sm.softcap > 0.0 {
            m.push(format!("softcap {}", sm.softcap));
        }
        if problem.alibi_slopes().is_some() {
            m.push("ALiBi slopes".to_string());
        }
        what.push(format!("{} on each score before the softmax", m.join(" and ")));
    }
    Some((if window { Reason::Window } else { Reason::ScoreMod }, what.join("; ")))
}

/// Device bytes of the backward's scratch: the f32 dQ accumulator (a row per log-sum-exp row),
/// four f32 statistics per row (one 16-byte row), in deterministic mode a u32 turn counter per
/// query tile ([`backward_locks`]), and with `tile_counters` ([`tile_counters`]) as many
/// readiness counters after them.
pub(crate) fn backward_scratch_bytes(problem: &Problem, deterministic: bool, tile_counters: bool) -> u64 {
    let words = deterministic as u64 + tile_counters as u64;
    4 * problem.lse_len() as u64 * (problem.head_dim() as u64 + 4) + 4 * words * backward_locks(problem)
}

/// Whether the backward's dQ conversion waits for each query tile's own key blocks
/// (`BwdParams::dq_ready`: a counter a tile, set by the preprocessing kernel, counted down by
/// the main kernel's blocks) instead of the main kernel's whole grid: for the instances that
/// count ([`BwdConfig::tile_counters`]: the d = 64 window walk) on sm_90a, where the conversion
/// is a programmatic dependent of the main kernel and so runs under its last blocks, when the
/// accumulator it converts is at least [`TILE_COUNTERS_FROM_BYTES`].
pub(crate) fn tile_counters(problem: &Problem, config: &BwdConfig, wgmma: bool) -> bool {
    let accumulator = 4 * problem.lse_len() as u64 * problem.head_dim() as u64;
    wgmma && config.tile_counters() && accumulator >= TILE_COUNTERS_FROM_BYTES
}

/// The smallest f32 dQ accumulator whose conversion [`tile_counters`] moves under the main
/// kernel's last blocks. Measured (session 33, H100, N = 16384, H = 16, causal windows, against
/// the grid-wide wait): 134 MiB accumulators −0.6 to −5.2% backward time, but single-query
/// rows (8–16 KiB, one query tile a head that every key block visits, so nothing to convert
/// before the end) +0.6 to +6.3% — the blocks' end-of-walk barrier and fence and the polls,
/// with no conversion to hide. 16 MiB is ~8 µs of conversion traffic on an H100.
pub(crate) const TILE_COUNTERS_FROM_BYTES: u64 = 16 << 20;

/// [`tile_counters`] of a backward plan for `problem` (false for a plan without a main kernel,
/// or whose launches are not programmatic dependents).
pub(crate) fn backward_plan_tile_counters(plan: &Plan, problem: &Problem) -> bool {
    let main = plan.launches.iter().find_map(|l| match l.kernel?.info().family {
        Family::BwdMma(_, i) => Some((BWD_CONFIGS[i], l.after_previous)),
        _ => None,
    });
    main.is_some_and(|(c, dependent)| tile_counters(problem, &c, dependent))
}

/// Turn counters of the deterministic backward: one per (sequence, query head, query tile of
/// the longest sequence), the preprocessing kernel's grid.
pub(crate) fn backward_locks(problem: &Problem) -> u64 {
    (problem.batch() * problem.q().heads * problem.max_lens().0.div_ceil(BWD_BLOCK_M as usize)) as u64
}

/// The first feature of `problem` that only the CPU path runs so far: for the backward
/// (`forward` false) K/V caches, paged or not. (Sliding windows and score modifiers run on the
/// tensor-core kernels' masked instances, forward and backward, cache
/// lengths on the forward's tensor-core decode instances and general kernel, paged caches on the
/// decode instances; the other methods refuse those themselves.)
fn cpu_only_feature(problem: &Problem, forward: bool) -> Option<Reason> {
    if !forward && (problem.block_table().is_some() || problem.cache_seqlens().is_some()) {
        Some(Reason::KvCache)
    } else {
        None
    }
}

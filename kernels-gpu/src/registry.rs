//! Every kernel entry point of the PTX, generated from one list per kernel family, and the
//! targets each exists on.
//!
//! The lists ([`for_each_mma_instance!`], [`for_each_simt_instance!`]) are the only place a
//! kernel instance is named: the GPU side expands them into `extern "ptx-kernel"` entries (whose
//! exported names are spelled by [`mma_kernel_name!`] and [`simt_kernel_name!`]), and the host
//! side into [`KERNELS`], the registry the host loads functions from. A new instance is one
//! line in one list.
//!
//! A kernel may exist for one target only (a Hopper-only kernel is built into the sm_90a PTX
//! and not into the sm_80 PTX): [`KernelInfo::targets`] says which, and the host refuses to
//! look up a kernel on a target that lacks it instead of guessing.

/// A PTX file the kernels are compiled into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `sm_80`: Ampere and later, through the driver's JIT.
    Sm80,
    /// `sm_90a`: compute capability 9.0 exactly (H100, H200), with Hopper's own instructions.
    Sm90a,
}

impl Target {
    /// Both targets.
    pub const ALL: [Target; 2] = [Target::Sm80, Target::Sm90a];

    /// The target's name, as `-C target-cpu` and ptxas spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm_80",
            Target::Sm90a => "sm_90a",
        }
    }

    /// The PTX a device of compute capability `major.minor` loads; `None` below 8.0.
    pub const fn for_compute_capability(major: i32, minor: i32) -> Option<Target> {
        match (major, minor) {
            (9, 0) => Some(Target::Sm90a),
            (m, _) if m >= 8 => Some(Target::Sm80),
            _ => None,
        }
    }
}

/// The storage element type of a kernel instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
}

/// What a kernel is, with the numbers that select it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `fill_u16` / `fill_u32` (`FillParams`): word size in bytes.
    Fill(u32),
    /// `fill_rows_u16` / `fill_rows_u32` (`FillRowsParams`): word size in bytes.
    FillRows(u32),
    /// `append_kv_u16` (`AppendParams`): new K/V tokens written into a cache, any dtype.
    AppendKv,
    /// The general flash forward kernel (`AttnParams`) for a padded head dimension.
    FlashSimt(Elem, u32),
    /// The tensor-core flash forward kernel (`AttnParams`) of `MMA_CONFIGS[index]`.
    FlashMma(Elem, usize),
    /// The row softmax of standard attention (`SoftmaxParams`).
    SoftmaxRows(Elem),
    /// The split-KV combine kernel (`AttnParams`): merges the splits' partial outputs.
    Combine(Elem),
    /// The backward's preprocessing kernel (`BwdParams`) of `BWD_CONFIGS[index]`.
    BwdPrep(Elem, usize),
    /// The same that takes a training forward's residuals (`BwdParams::residual_rows`; sm_90a
    /// only, instances without a window).
    BwdPrepResidual(Elem, usize),
    /// The Hopper forward kernel (`WgmmaParams`, sm_90a only) of `WGMMA_CONFIGS[index]`.
    FlashWgmma(Elem, usize),
    /// The backward's main kernel (`BwdParams`) of `BWD_CONFIGS[index]`.
    BwdMma(Elem, usize),
    /// The backward's dQ conversion (`BwdParams`): f32 accumulator to the storage type.
    BwdDq(Elem),
}

/// One entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The entry's name in the PTX.
    pub name: &'static str,
    /// What it computes.
    pub family: Family,
    /// The PTX files it is compiled into.
    pub targets: &'static [Target],
}

impl KernelInfo {
    /// Whether this kernel is in `target`'s PTX.
    pub fn on(&self, target: Target) -> bool {
        self.targets.contains(&target)
    }
}

/// Calls `$m!` with the tensor-core instances, one `(head_dim, block_m, block_n, warps,
/// min_blocks, v_stages, pad, window)` group each. The first exact instance (`pad` 0) of a head dim is
/// its default (the tuned choice, `NOTES.md`); padded instances (`pad` 1) run every smaller head
/// dim down to the next instance; element-wise instances (`pad` 2) run any head dim down to 1
/// with rows aligned to the element only; one-warp instances of 16 rows (padded) are the decode kernels
/// ([`crate::config::mma_decode`]); the others are variants a tile override selects, so that
/// the bench can sweep them.
#[macro_export]
macro_rules! for_each_mma_instance {
    ($m:ident $(, $arg:tt)*) => {
        $m! { ($($arg),*)
            (64, 128, 96, 4, 1, 2, 0, 0)
            (64, 128, 64, 4, 1, 1, 0, 0)
            (64, 64, 64, 4, 3, 2, 0, 0)
            (128, 128, 64, 4, 1, 2, 0, 0)
            (128, 64, 64, 4, 1, 1, 0, 0)
            (256, 64, 64, 4, 1, 1, 0, 0)
            (256, 128, 64, 8, 1, 1, 0, 0)
            (32, 64, 128, 4, 3, 2, 1, 0)
            (32, 128, 64, 4, 1, 2, 1, 0)
            (64, 64, 64, 4, 3, 2, 1, 0)
            (96, 128, 64, 4, 1, 2, 1, 0)
            (128, 64, 64, 4, 1, 1, 1, 0)
            (160, 64, 64, 4, 1, 1, 1, 0)
            (192, 64, 64, 4, 1, 1, 1, 0)
            (224, 64, 64, 4, 1, 1, 1, 0)
            (256, 128, 64, 8, 1, 1, 1, 0)
            (64, 16, 64, 1, 4, 2, 1, 0)
            (128, 16, 64, 1, 4, 2, 1, 0)
            (256, 16, 32, 1, 2, 1, 1, 0)
            (32, 128, 128, 8, 1, 2, 1, 0)
            (192, 128, 64, 8, 1, 1, 1, 0)
            (64, 64, 64, 4, 2, 2, 2, 0)
            (128, 64, 64, 4, 1, 1, 2, 0)
            (256, 128, 64, 8, 1, 1, 2, 0)
            (64, 64, 64, 4, 2, 2, 0, 1)
            (128, 64, 64, 4, 1, 1, 0, 1)
            (256, 64, 64, 4, 1, 1, 0, 1)
            (64, 64, 64, 4, 2, 2, 1, 1)
            (128, 64, 64, 4, 1, 1, 1, 1)
            (256, 64, 64, 4, 1, 1, 1, 1)
            (128, 16, 64, 1, 4, 2, 1, 1)
        }
    };
}

/// The entry name of one tensor-core instance:
/// `flash_fwd_mma_{dtype}_d{head_dim}_m{block_m}_n{block_n}_w{warps}_b{min_blocks}_v{v_stages}`,
/// with `_pad` appended for a padded instance and `_elem` for an element-wise one, then `_win`
/// for a sliding-window instance.
#[macro_export]
macro_rules! mma_kernel_name {
    ($dt:literal, $d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, $p:tt, 0) => {
        $crate::mma_kernel_name!($dt, $d, $m, $n, $w, $b, $v, $p)
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, $p:tt, 1) => {
        concat!($crate::mma_kernel_name!($dt, $d, $m, $n, $w, $b, $v, $p), "_win")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, 0) => {
        concat!("flash_fwd_mma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_w", $w, "_b", $b, "_v", $v)
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, 1) => {
        concat!("flash_fwd_mma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_w", $w, "_b", $b, "_v", $v, "_pad")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, 2) => {
        concat!("flash_fwd_mma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_w", $w, "_b", $b, "_v", $v, "_elem")
    };
}

/// Calls `$m!` with the Hopper forward instances (sm_90a only), one `(head_dim, block_m,
/// block_n, stages, window, train)` group each ([`crate::config::WgmmaConfig`]; `window` 1: a
/// masked instance, which applies sliding windows and score modifiers; `train` 1: a training
/// instance, which also writes what the backward needs instead of its preprocessing pass).
#[macro_export]
macro_rules! for_each_wgmma_instance {
    ($m:ident $(, $arg:tt)*) => {
        $m! { ($($arg),*)
            (64, 128, 128, 2, 0, 0, 0)
            (128, 128, 128, 2, 0, 0, 0)
            (192, 128, 64, 2, 0, 0, 0)
            (256, 128, 80, 2, 0, 0, 0)
            (64, 128, 128, 2, 1, 0, 0)
            (128, 128, 128, 2, 1, 0, 0)
            (192, 128, 64, 2, 1, 0, 0)
            (256, 128, 64, 2, 1, 0, 0)
            (64, 128, 128, 2, 2, 0, 0)
            (128, 128, 128, 2, 2, 0, 0)
            (192, 128, 64, 2, 2, 0, 0)
            (64, 128, 128, 2, 0, 1, 0)
            (128, 128, 128, 2, 0, 1, 0)
            (64, 128, 128, 2, 1, 1, 0)
            (128, 128, 128, 2, 1, 1, 0)
            (64, 128, 128, 2, 2, 1, 0)
            (128, 128, 128, 2, 2, 1, 0)
            (192, 128, 64, 2, 0, 1, 0)
            (256, 128, 64, 2, 0, 1, 0)
            (64, 128, 128, 2, 0, 0, 1)
            (128, 128, 128, 2, 0, 0, 1)
            (192, 128, 64, 2, 0, 0, 1)
            (64, 128, 128, 2, 0, 0, 2)
            (128, 128, 128, 2, 0, 0, 2)
            (64, 192, 128, 2, 0, 0, 0)
            (64, 192, 128, 2, 0, 0, 1)
            (64, 192, 128, 2, 0, 0, 2)
            (128, 128, 176, 2, 0, 0, 0)
            (256, 128, 64, 2, 0, 0, 0)
            (192, 128, 112, 2, 0, 0, 0)
        }
    };
}

/// The entry name of one Hopper instance:
/// `flash_fwd_wgmma_{dtype}_d{head_dim}_m{block_m}_n{block_n}_s{stages}`, with `_win` appended
/// for a masked instance, `_win_softcap` for the masked instance without the intra-warpgroup
/// overlap that the planner takes for softcaps, and then `_train` for a training instance;
/// `_persistent` for a plain inference instance that runs a persistent grid.
#[macro_export]
macro_rules! wgmma_kernel_name {
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 0, 0, 1) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_persistent")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 0, 0, 2) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_persistent_causal")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, $win:tt, $train:tt, 0) => {
        $crate::wgmma_kernel_name!($dt, $d, $m, $n, $s, $win, $train)
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 0, 0) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s)
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 1, 0) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_win")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 2, 0) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_win_softcap")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 0, 1) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_train")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 1, 1) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_win_train")
    };
    ($dt:literal, $d:literal, $m:literal, $n:literal, $s:literal, 2, 1) => {
        concat!("flash_fwd_wgmma_", $dt, "_d", $d, "_m", $m, "_n", $n, "_s", $s, "_win_softcap_train")
    };
}

/// Calls `$m!` with the backward's instances, one `(head_dim, warps, min_blocks, window)` group
/// each ([`crate::config::BwdConfig`]; all padded). The first of a head dim and window kind is
/// its default; later ones are variants a tile override selects (`bwd_find`): d = 64's default is
/// one warpgroup and 64 keys a block, three blocks an SM on Hopper (NOTES b17, b35), its variant
/// the two-warpgroup block of 128 keys that was the default before.
#[macro_export]
macro_rules! for_each_bwd_instance {
    ($m:ident $(, $arg:tt)*) => {
        $m! { ($($arg),*)
            (32, 4, 3, 0)
            (64, 4, 3, 0)
            (128, 8, 1, 0)
            (32, 4, 3, 1)
            (64, 8, 1, 1)
            (128, 8, 1, 1)
            (64, 8, 1, 0)
            (256, 8, 1, 0)
            (256, 8, 1, 1)
            (128, 8, 1, 2)
            (128, 8, 1, 3)
        }
    };
}

/// The entry names of one backward instance: the main kernel
/// `flash_bwd_{dtype}_d{head_dim}_w{warps}_b{min_blocks}` and the preprocessing kernel
/// `flash_bwd_prep_{dtype}_d{head_dim}_w{warps}` (its code depends on the head dim alone; the
/// name follows the instance so that variants of a head dim export distinct entries), with `_win`
/// appended for a sliding-window instance (`_alibi` for an ALiBi instance, `_winonly` for a
/// window instance without score modifiers); and, on sm_90a, the preprocessing kernel that takes
/// a training forward's residuals, `flash_bwd_prep_res_{dtype}_d{head_dim}_w{warps}` (suffixed
/// likewise).
#[macro_export]
macro_rules! bwd_kernel_name {
    (main, $dt:literal, $d:literal, $w:literal, $b:literal, 0) => {
        concat!("flash_bwd_", $dt, "_d", $d, "_w", $w, "_b", $b)
    };
    (main, $dt:literal, $d:literal, $w:literal, $b:literal, 1) => {
        concat!("flash_bwd_", $dt, "_d", $d, "_w", $w, "_b", $b, "_win")
    };
    (main, $dt:literal, $d:literal, $w:literal, $b:literal, 2) => {
        concat!("flash_bwd_", $dt, "_d", $d, "_w", $w, "_b", $b, "_alibi")
    };
    (main, $dt:literal, $d:literal, $w:literal, $b:literal, 3) => {
        concat!("flash_bwd_", $dt, "_d", $d, "_w", $w, "_b", $b, "_winonly")
    };
    (prep, $dt:literal, $d:literal, $w:literal, $b:literal, 0) => {
        concat!("flash_bwd_prep_", $dt, "_d", $d, "_w", $w)
    };
    (prep, $dt:literal, $d:literal, $w:literal, $b:literal, 1) => {
        concat!("flash_bwd_prep_", $dt, "_d", $d, "_w", $w, "_win")
    };
    (prep, $dt:literal, $d:literal, $w:literal, $b:literal, 2) => {
        concat!("flash_bwd_prep_", $dt, "_d", $d, "_w", $w, "_alibi")
    };
    (prep, $dt:literal, $d:literal, $w:literal, $b:literal, 3) => {
        concat!("flash_bwd_prep_", $dt, "_d", $d, "_w", $w, "_winonly")
    };
    (prep_res, $dt:literal, $d:literal, $w:literal, $b:literal, 0) => {
        concat!("flash_bwd_prep_res_", $dt, "_d", $d, "_w", $w)
    };
    (prep_res, $dt:literal, $d:literal, $w:literal, $b:literal, 1) => {
        concat!("flash_bwd_prep_res_", $dt, "_d", $d, "_w", $w, "_win")
    };
    (prep_res, $dt:literal, $d:literal, $w:literal, $b:literal, 2) => {
        concat!("flash_bwd_prep_res_", $dt, "_d", $d, "_w", $w, "_alibi")
    };
    (prep_res, $dt:literal, $d:literal, $w:literal, $b:literal, 3) => {
        concat!("flash_bwd_prep_res_", $dt, "_d", $d, "_w", $w, "_winonly")
    };
}

/// Calls `$m!` with the general kernel's padded head dimensions, `(head_dim, accumulator
/// length = head_dim / 4)` each.
#[macro_export]
macro_rules! for_each_simt_instance {
    ($m:ident $(, $arg:tt)*) => {
        $m! { ($($arg),*) (32, 8) (64, 16) (128, 32) (256, 64) }
    };
}

/// The entry name of one general-kernel instance: `flash_fwd_simt_{dtype}_d{head_dim}`.
#[macro_export]
macro_rules! simt_kernel_name {
    ($dt:literal, $d:literal) => {
        concat!("flash_fwd_simt_", $dt, "_d", $d)
    };
}

macro_rules! mma_table {
    (() $(($d:literal, $m:literal, $n:literal, $w:literal, $b:literal, $v:literal, $p:tt, $win:tt))*) => {
        /// Every tensor-core configuration, in [`for_each_mma_instance!`] order.
        pub const MMA_CONFIGS: [$crate::config::MmaConfig; [$($d),*].len()] = [$(
            $crate::config::MmaConfig {
                head_dim: $d, block_m: $m, block_n: $n, warps: $w, min_blocks: $b, v_stages: $v, pad: $p,
                window: $win,
            }
        ),*];
        /// Entry names of [`MMA_CONFIGS`], f16 then bf16.
        pub const MMA_KERNELS: [[&str; MMA_CONFIGS.len()]; 2] = [
            [$(mma_kernel_name!("f16", $d, $m, $n, $w, $b, $v, $p, $win)),*],
            [$(mma_kernel_name!("bf16", $d, $m, $n, $w, $b, $v, $p, $win)),*],
        ];
    };
}
for_each_mma_instance!(mma_table);

macro_rules! wgmma_table {
    (() $(($d:literal, $m:literal, $n:literal, $s:literal, $win:tt, $train:tt, $persist:tt))*) => {
        /// Every Hopper forward configuration, in [`for_each_wgmma_instance!`] order.
        pub const WGMMA_CONFIGS: [$crate::config::WgmmaConfig; [$($d),*].len()] = [$(
            $crate::config::WgmmaConfig {
                head_dim: $d, block_m: $m, block_n: $n, stages: $s, window: $win, train: $train,
                persistent: $persist,
            }
        ),*];
        /// Entry names of [`WGMMA_CONFIGS`], f16 then bf16.
        pub const WGMMA_KERNELS: [[&str; WGMMA_CONFIGS.len()]; 2] = [
            [$(wgmma_kernel_name!("f16", $d, $m, $n, $s, $win, $train, $persist)),*],
            [$(wgmma_kernel_name!("bf16", $d, $m, $n, $s, $win, $train, $persist)),*],
        ];
    };
}
for_each_wgmma_instance!(wgmma_table);

macro_rules! bwd_table {
    (() $(($d:literal, $w:literal, $b:literal, $win:tt))*) => {
        /// Every backward configuration, in [`for_each_bwd_instance!`] order.
        pub const BWD_CONFIGS: [$crate::config::BwdConfig; [$($d),*].len()] = [$(
            $crate::config::BwdConfig { head_dim: $d, warps: $w, min_blocks: $b, window: $win }
        ),*];
        /// Entry names of the backward's main kernels, f16 then bf16.
        pub const BWD_KERNELS: [[&str; BWD_CONFIGS.len()]; 2] = [
            [$(bwd_kernel_name!(main, "f16", $d, $w, $b, $win)),*],
            [$(bwd_kernel_name!(main, "bf16", $d, $w, $b, $win)),*],
        ];
        /// Entry names of the backward's preprocessing kernels, f16 then bf16.
        pub const BWD_PREP_KERNELS: [[&str; BWD_CONFIGS.len()]; 2] = [
            [$(bwd_kernel_name!(prep, "f16", $d, $w, $b, $win)),*],
            [$(bwd_kernel_name!(prep, "bf16", $d, $w, $b, $win)),*],
        ];
        /// Entry names of the preprocessing kernels that take a training forward's residuals
        /// (sm_90a), f16 then bf16; `""` for the window instances, which have none.
        pub const BWD_PREP_RES_KERNELS: [[&str; BWD_CONFIGS.len()]; 2] = [
            [$(bwd_kernel_name!(prep_res, "f16", $d, $w, $b, $win)),*],
            [$(bwd_kernel_name!(prep_res, "bf16", $d, $w, $b, $win)),*],
        ];
    };
}
for_each_bwd_instance!(bwd_table);

macro_rules! simt_table {
    (() $(($d:literal, $dq:literal))*) => {
        /// The head dimensions the general kernel is instantiated for (a problem's `d` is padded
        /// up to the next).
        pub const SIMT_HEAD_DIMS: [u32; [$($d),*].len()] = [$($d),*];
        /// Entry names of the general kernel: `[f16, bf16, f32]` × [`SIMT_HEAD_DIMS`].
        pub const SIMT_KERNELS: [[&str; SIMT_HEAD_DIMS.len()]; 3] = [
            [$(simt_kernel_name!("f16", $d)),*],
            [$(simt_kernel_name!("bf16", $d)),*],
            [$(simt_kernel_name!("f32", $d)),*],
        ];
    };
}
for_each_simt_instance!(simt_table);

const ELEMS: [Elem; 3] = [Elem::F16, Elem::Bf16, Elem::F32];
const FIXED: [(&str, Family); 12] = [
    ("fill_u16", Family::Fill(2)),
    ("append_kv_u16", Family::AppendKv),
    ("fill_u32", Family::Fill(4)),
    ("fill_rows_u16", Family::FillRows(2)),
    ("fill_rows_u32", Family::FillRows(4)),
    ("softmax_rows_f16", Family::SoftmaxRows(Elem::F16)),
    ("softmax_rows_bf16", Family::SoftmaxRows(Elem::Bf16)),
    ("softmax_rows_f32", Family::SoftmaxRows(Elem::F32)),
    ("flash_combine_f16", Family::Combine(Elem::F16)),
    ("flash_combine_bf16", Family::Combine(Elem::Bf16)),
    ("flash_bwd_dq_f16", Family::BwdDq(Elem::F16)),
    ("flash_bwd_dq_bf16", Family::BwdDq(Elem::Bf16)),
];

/// Number of entry points.
pub const KERNEL_COUNT: usize = FIXED.len()
    + 3 * SIMT_HEAD_DIMS.len()
    + 2 * MMA_CONFIGS.len()
    + 6 * BWD_CONFIGS.len()
    + 2 * WGMMA_CONFIGS.len();

/// The targets of the Hopper-only kernels.
const SM90A_ONLY: [Target; 1] = [Target::Sm90a];

/// The registry: every entry point, its family and its targets. Built at compile time from the
/// lists above.
pub const KERNELS: [KernelInfo; KERNEL_COUNT] = {
    let mut out = [KernelInfo { name: "", family: Family::Fill(2), targets: &Target::ALL }; KERNEL_COUNT];
    let mut n = 0;
    let mut i = 0;
    while i < FIXED.len() {
        out[n] = KernelInfo { name: FIXED[i].0, family: FIXED[i].1, targets: &Target::ALL };
        n += 1;
        i += 1;
    }
    let mut e = 0;
    while e < 3 {
        let mut i = 0;
        while i < SIMT_HEAD_DIMS.len() {
            let family = Family::FlashSimt(ELEMS[e], SIMT_HEAD_DIMS[i]);
            out[n] = KernelInfo { name: SIMT_KERNELS[e][i], family, targets: &Target::ALL };
            n += 1;
            i += 1;
        }
        e += 1;
    }
    let mut e = 0;
    while e < 2 {
        let mut i = 0;
        while i < MMA_CONFIGS.len() {
            out[n] = KernelInfo {
                name: MMA_KERNELS[e][i],
                family: Family::FlashMma(ELEMS[e], i),
                targets: &Target::ALL,
            };
            n += 1;
            i += 1;
        }
        e += 1;
    }
    let mut e = 0;
    while e < 2 {
        let mut i = 0;
        while i < BWD_CONFIGS.len() {
            // (`BwdConfig::sm90a_only`: `flash_bwd.rs` compiles those for sm_90a alone.)
            let c = BWD_CONFIGS[i];
            let targets: &[Target] = if c.sm90a_only() { &SM90A_ONLY } else { &Target::ALL };
            out[n] = KernelInfo { name: BWD_KERNELS[e][i], family: Family::BwdMma(ELEMS[e], i), targets };
            out[n + 1] =
                KernelInfo { name: BWD_PREP_KERNELS[e][i], family: Family::BwdPrep(ELEMS[e], i), targets };
            out[n + 2] = KernelInfo {
                name: BWD_PREP_RES_KERNELS[e][i],
                family: Family::BwdPrepResidual(ELEMS[e], i),
                targets: &SM90A_ONLY,
            };
            n += 3;
            i += 1;
        }
        e += 1;
    }
    let mut e = 0;
    while e < 2 {
        let mut i = 0;
        while i < WGMMA_CONFIGS.len() {
            out[n] = KernelInfo {
                name: WGMMA_KERNELS[e][i],
                family: Family::FlashWgmma(ELEMS[e], i),
                targets: &SM90A_ONLY,
            };
            n += 1;
            i += 1;
        }
        e += 1;
    }
    assert!(n == KERNEL_COUNT);
    out
};

/// The registry index of a kernel, if one is instantiated.
pub fn find(family: Family) -> Option<usize> {
    KERNELS.iter().position(|k| k.family == family)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::format;

    #[test]
    fn names_are_unique_and_follow_the_configs() {
        let names: HashSet<&str> = KERNELS.iter().map(|k| k.name).collect();
        assert_eq!(names.len(), KERNEL_COUNT);
        for (dtype, names) in ["f16", "bf16"].iter().zip(MMA_KERNELS) {
            for (c, name) in MMA_CONFIGS.iter().zip(names) {
                let expect = format!(
                    "flash_fwd_mma_{dtype}_d{}_m{}_n{}_w{}_b{}_v{}{}{}",
                    c.head_dim,
                    c.block_m,
                    c.block_n,
                    c.warps,
                    c.min_blocks,
                    c.v_stages,
                    ["", "_pad", "_elem"][c.pad as usize],
                    if c.window == 1 { "_win" } else { "" }
                );
                assert_eq!(name, expect);
            }
        }
    }

    #[test]
    fn every_family_is_found() {
        for (i, k) in KERNELS.iter().enumerate() {
            assert_eq!(find(k.family), Some(i), "{}", k.name);
        }
        assert_eq!(find(Family::FlashSimt(Elem::F16, 48)), None);
        assert_eq!(find(Family::FlashMma(Elem::F32, 0)), None);
    }
}

//! The committed PTX, the kernels in it, and the module that loads it onto a device.
//!
//! `cargo xtask ptx` writes `ptx/flashattn_sm80.ptx` (Ampere and later, through the driver's JIT)
//! and `ptx/flashattn_sm90a.ptx` (Hopper's own instructions; loads only on compute capability
//! 9.0). The matching one is loaded once per [`crate::Device`].

use std::ffi::{CStr, CString, c_void};

use cudarc::driver::sys;

use flashattn_kernels::config::{MMA_CONFIGS, MMA_KERNELS};

use crate::buffer::DType;
use crate::error::{Error, Result};

/// PTX for `sm_80` (runs on compute capability 8.0 and later through the driver's JIT).
pub(crate) const PTX_SM80: &str = include_str!("../ptx/flashattn_sm80.ptx");
/// PTX for `sm_90a` (compute capability 9.0 exactly: H100, H200).
pub(crate) const PTX_SM90A: &str = include_str!("../ptx/flashattn_sm90a.ptx");

/// Which PTX a device gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PtxTarget {
    Sm80,
    Sm90a,
}

impl PtxTarget {
    /// The PTX for a compute capability; `None` below 8.0.
    pub(crate) fn for_compute_capability(major: i32, minor: i32) -> Option<PtxTarget> {
        match (major, minor) {
            (9, 0) => Some(PtxTarget::Sm90a),
            (m, _) if m >= 8 => Some(PtxTarget::Sm80),
            _ => None,
        }
    }

    pub(crate) fn source(self) -> &'static str {
        match self {
            PtxTarget::Sm80 => PTX_SM80,
            PtxTarget::Sm90a => PTX_SM90A,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            PtxTarget::Sm80 => "sm_80",
            PtxTarget::Sm90a => "sm_90a",
        }
    }
}

macro_rules! kernels {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// A kernel entry point of the committed PTX.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Kernel {
            $($(#[$doc])* $variant,)*
            /// The tensor-core flash forward kernel of `MMA_CONFIGS[config]` (`AttnParams`),
            /// bf16 or f16.
            FlashMma {
                /// bf16 (else f16).
                bf16: bool,
                /// Index into `flashattn::kernels::config::MMA_CONFIGS`.
                config: u8,
            },
        }

        /// The kernels with fixed names, in declaration order.
        const FIXED: &[Kernel] = &[$(Kernel::$variant,)*];

        impl Kernel {
            /// The entry name in the PTX.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Kernel::$variant => $name,)*
                    Kernel::FlashMma { bf16, config } => MMA_KERNELS[bf16 as usize][config as usize],
                }
            }
        }
    };
}

kernels! {
    /// Fill 16-bit words with one pattern (`FillParams`).
    FillU16 => "fill_u16",
    /// Fill 32-bit words with one pattern (`FillParams`).
    FillU32 => "fill_u32",
    /// Fill rows of a strided 16-bit tensor (`FillRowsParams`).
    FillRowsU16 => "fill_rows_u16",
    /// Fill rows of a strided 32-bit tensor (`FillRowsParams`).
    FillRowsU32 => "fill_rows_u32",
    /// General flash forward, f16, head dim padded to 32 (`AttnParams`).
    FlashSimtF16D32 => "flash_fwd_simt_f16_d32",
    /// General flash forward, f16, d ≤ 64.
    FlashSimtF16D64 => "flash_fwd_simt_f16_d64",
    /// General flash forward, f16, d ≤ 128.
    FlashSimtF16D128 => "flash_fwd_simt_f16_d128",
    /// General flash forward, f16, d ≤ 256.
    FlashSimtF16D256 => "flash_fwd_simt_f16_d256",
    /// General flash forward, bf16, d ≤ 32.
    FlashSimtBf16D32 => "flash_fwd_simt_bf16_d32",
    /// General flash forward, bf16, d ≤ 64.
    FlashSimtBf16D64 => "flash_fwd_simt_bf16_d64",
    /// General flash forward, bf16, d ≤ 128.
    FlashSimtBf16D128 => "flash_fwd_simt_bf16_d128",
    /// General flash forward, bf16, d ≤ 256.
    FlashSimtBf16D256 => "flash_fwd_simt_bf16_d256",
    /// General flash forward, f32, d ≤ 32.
    FlashSimtF32D32 => "flash_fwd_simt_f32_d32",
    /// General flash forward, f32, d ≤ 64.
    FlashSimtF32D64 => "flash_fwd_simt_f32_d64",
    /// General flash forward, f32, d ≤ 128.
    FlashSimtF32D128 => "flash_fwd_simt_f32_d128",
    /// General flash forward, f32, d ≤ 256.
    FlashSimtF32D256 => "flash_fwd_simt_f32_d256",
    /// Row softmax of standard attention, f16 probabilities (`SoftmaxParams`).
    SoftmaxRowsF16 => "softmax_rows_f16",
    /// Row softmax of standard attention, bf16 probabilities.
    SoftmaxRowsBf16 => "softmax_rows_bf16",
    /// Row softmax of standard attention, f32 probabilities.
    SoftmaxRowsF32 => "softmax_rows_f32",
}

impl Kernel {
    /// The general flash kernel for a dtype and a padded head dimension (32, 64, 128 or 256).
    pub(crate) fn flash_simt(dtype: DType, padded_dim: u32) -> Option<Kernel> {
        use Kernel::*;
        let row = match dtype {
            DType::F16 => [FlashSimtF16D32, FlashSimtF16D64, FlashSimtF16D128, FlashSimtF16D256],
            DType::BF16 => [FlashSimtBf16D32, FlashSimtBf16D64, FlashSimtBf16D128, FlashSimtBf16D256],
            DType::F32 => [FlashSimtF32D32, FlashSimtF32D64, FlashSimtF32D128, FlashSimtF32D256],
        };
        let i = flashattn_kernels::params::SIMT_HEAD_DIMS.iter().position(|&d| d == padded_dim)?;
        Some(row[i])
    }

    /// The tensor-core flash kernel of configuration `config` for a 16-bit dtype.
    pub(crate) fn flash_mma(dtype: DType, config: usize) -> Option<Kernel> {
        let bf16 = match dtype {
            DType::F16 => false,
            DType::BF16 => true,
            DType::F32 => return None,
        };
        (config < MMA_CONFIGS.len()).then_some(Kernel::FlashMma { bf16, config: config as u8 })
    }

    /// Every kernel of the PTX.
    pub fn all() -> impl Iterator<Item = Kernel> {
        let mma = [false, true]
            .into_iter()
            .flat_map(|bf16| (0..MMA_CONFIGS.len()).map(move |c| Kernel::FlashMma { bf16, config: c as u8 }));
        FIXED.iter().copied().chain(mma)
    }

    /// The row-softmax kernel writing probabilities of `dtype`.
    pub(crate) fn softmax_rows(dtype: DType) -> Kernel {
        match dtype {
            DType::F16 => Kernel::SoftmaxRowsF16,
            DType::BF16 => Kernel::SoftmaxRowsBf16,
            DType::F32 => Kernel::SoftmaxRowsF32,
        }
    }
}

impl Kernel {
    /// Position in [`Kernel::all`].
    pub(crate) fn index(self) -> usize {
        match self {
            Kernel::FlashMma { bf16, config } => {
                FIXED.len() + bf16 as usize * MMA_CONFIGS.len() + config as usize
            }
            fixed => FIXED.iter().position(|&k| k == fixed).unwrap_or(0),
        }
    }
}

/// A loaded PTX module and its functions.
pub(crate) struct Module {
    module: sys::CUmodule,
    functions: Vec<sys::CUfunction>,
}

// SAFETY: module and function handles are plain driver handles, valid from any thread once the
// owning context is current; `Device` binds its context before every use.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// Loads `target`'s PTX into the current context (JIT-compiling it) and resolves every kernel.
    pub(crate) fn load(target: PtxTarget) -> Result<Module> {
        const LOG_BYTES: usize = 16 * 1024;
        let mut log = vec![0u8; LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), LOG_BYTES as *mut c_void];
        let src = CString::new(target.source()).map_err(|_| Error::Driver {
            context: "loading the PTX module (the embedded PTX contains a NUL byte)",
            source: cudarc::driver::DriverError(sys::CUresult::CUDA_ERROR_INVALID_PTX),
        })?;
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: valid out-pointer, NUL-terminated image, option arrays of equal length.
        let rc = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                src.as_ptr().cast(),
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            let text = CStr::from_bytes_until_nul(&log)
                .map(|c| c.to_string_lossy().into_owned())
                .unwrap_or_default();
            return Err(Error::ModuleLoad {
                target: target.name(),
                source: cudarc::driver::DriverError(rc),
                log: text,
            });
        }
        let mut loaded = Module { module, functions: Vec::new() };
        for kernel in Kernel::all() {
            let name = CString::new(kernel.name()).unwrap_or_default();
            let mut f: sys::CUfunction = std::ptr::null_mut();
            // SAFETY: valid module handle and out-pointer.
            let rc = unsafe { sys::cuModuleGetFunction(&mut f, loaded.module, name.as_ptr()) };
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(Error::MissingKernel { kernel: kernel.name(), target: target.name() });
            }
            loaded.functions.push(f);
        }
        Ok(loaded)
    }

    pub(crate) fn function(&self, kernel: Kernel) -> sys::CUfunction {
        self.functions[kernel.index()]
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuModuleLoadDataEx and is unloaded once. The owning
        // `Device` keeps its context alive (and current) longer than this module.
        unsafe {
            let _ = sys::cuModuleUnload(self.module);
        }
    }
}

//! The committed PTX, the kernel registry, and the module that loads it onto a device.
//!
//! `cargo xtask ptx` writes `ptx/flashattn_sm80.ptx` (Ampere and later, through the driver's JIT)
//! and `ptx/flashattn_sm90a.ptx` (Hopper's own instructions; loads only on compute capability
//! 9.0). Which kernels exist, and on which target, is the kernel crate's generated registry
//! ([`flashattn_kernels::registry::KERNELS`]): the host never keeps a list of its own. The
//! module is loaded (JIT-compiled) on a device's first launch, and each function is looked up on
//! its first use; a kernel the registry does not place on the device's target is an error, never
//! a different kernel.

use std::ffi::{CStr, CString, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys;
use flashattn_kernels::registry::{Elem, Family, KERNELS, KernelInfo, Target};

use crate::buffer::DType;
use crate::error::{Error, Result};

/// PTX for `sm_80` (runs on compute capability 8.0 and later through the driver's JIT).
const PTX_SM80: &str = include_str!("../ptx/flashattn_sm80.ptx");
/// PTX for `sm_90a` (compute capability 9.0 exactly: H100, H200).
const PTX_SM90A: &str = include_str!("../ptx/flashattn_sm90a.ptx");

fn source(target: Target) -> &'static str {
    match target {
        Target::Sm80 => PTX_SM80,
        Target::Sm90a => PTX_SM90A,
    }
}

/// The kernel crate's element tag of a dtype.
pub(crate) fn elem(dtype: DType) -> Elem {
    match dtype {
        DType::F16 => Elem::F16,
        DType::BF16 => Elem::Bf16,
        DType::F32 => Elem::F32,
    }
}

/// A kernel of the registry (an index into [`KERNELS`], valid by construction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct KernelId(usize);

impl KernelId {
    /// The registry's kernel of `family`, if it is instantiated.
    pub(crate) fn of(family: Family) -> Option<KernelId> {
        flashattn_kernels::registry::find(family).map(KernelId)
    }

    pub(crate) fn info(self) -> &'static KernelInfo {
        &KERNELS[self.0]
    }

    /// The entry name in the PTX.
    pub(crate) fn name(self) -> &'static str {
        self.info().name
    }

    pub(crate) fn index(self) -> usize {
        self.0
    }
}

/// A function handle, with its static shared memory in bytes (read once, at lookup: every
/// launch checks its total against the device's limit); plain driver handles are usable from
/// any thread once the owning context is current (`Device` binds its context before every use).
#[derive(Clone, Copy)]
pub(crate) struct Function(pub(crate) sys::CUfunction, pub(crate) u32);
// SAFETY: see above.
unsafe impl Send for Function {}
unsafe impl Sync for Function {}

/// A loaded PTX module and its functions, looked up on first use.
pub(crate) struct Module {
    module: sys::CUmodule,
    target: Target,
    functions: Vec<OnceLock<Function>>,
}

// SAFETY: as `Function`.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// Loads `target`'s PTX into the current context (JIT-compiling it).
    pub(crate) fn load(target: Target) -> Result<Module> {
        const LOG_BYTES: usize = 16 * 1024;
        let mut log = vec![0u8; LOG_BYTES];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), LOG_BYTES as *mut c_void];
        let src = CString::new(source(target)).map_err(|_| Error::Driver {
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
        let functions = KERNELS.iter().map(|_| OnceLock::new()).collect();
        Ok(Module { module, target, functions })
    }

    /// The function of `kernel`, looked up on first use. A kernel the registry does not place on
    /// this module's target, or that the PTX lacks, is [`Error::MissingKernel`].
    pub(crate) fn function(&self, kernel: KernelId) -> Result<Function> {
        let cell = &self.functions[kernel.index()];
        if let Some(f) = cell.get() {
            return Ok(*f);
        }
        let missing = || Error::MissingKernel { kernel: kernel.name(), target: self.target.name() };
        if !kernel.info().on(self.target) {
            return Err(missing());
        }
        let name = CString::new(kernel.name()).map_err(|_| missing())?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: valid module handle and out-pointer.
        let rc = unsafe { sys::cuModuleGetFunction(&mut f, self.module, name.as_ptr()) };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(missing());
        }
        let mut static_shared = 0;
        // SAFETY: valid function handle and out-pointer.
        unsafe {
            sys::cuFuncGetAttribute(
                &mut static_shared,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                f,
            )
        }
        .result()
        .map_err(|source| Error::Driver { context: "reading a kernel's static shared memory", source })?;
        Ok(*cell.get_or_init(|| Function(f, static_shared.max(0) as u32)))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel the registry places on a target is an entry of that target's PTX.
    #[test]
    fn committed_ptx_has_every_registered_kernel() {
        for target in Target::ALL {
            let ptx = source(target);
            for k in KERNELS.iter().filter(|k| k.on(target)) {
                assert!(
                    ptx.contains(&format!(".entry {}(", k.name)),
                    "{} missing from {}",
                    k.name,
                    target.name()
                );
            }
        }
    }
}

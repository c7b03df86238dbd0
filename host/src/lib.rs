//! # flashattn
//!
//! FlashAttention in pure Rust. The GPU kernels are Rust compiled to PTX (committed in this crate,
//! so a user needs only stable Rust and an NVIDIA driver); this crate is the host side: device
//! selection, device (HBM) buffers, tile sizing, launches, and typed errors.
//!
//! The library never panics on user input or on a missing GPU: every failure is an [`Error`] with
//! a message that says what to do.
//!
//! ```no_run
//! use flashattn::Device;
//! let dev = Device::new(0)?; // Err(Error::NoDriver) on a machine without an NVIDIA driver
//! println!("{}", dev.props());
//! # Ok::<(), flashattn::Error>(())
//! ```

mod attention;
mod backward;
mod buffer;
pub mod context_parallel;
pub mod cpu;
mod device;
mod error;
pub mod explain;
pub mod external;
mod hopper;
mod kvcache;
pub mod plan;
mod problem;
mod registry;
mod saved;
mod standard;
mod timing;

pub use attention::{DeviceTensor, DeviceTensorMut};
pub use backward::DeviceGradients;
pub use buffer::{DType, DeviceBuffer, Element};
pub use device::{Device, DeviceProps};
pub use error::{Error, InvalidInput, Result, RingError};
pub use external::{BackwardTensors, ExternalBuffer, ExternalResiduals, ExternalTensor, ForwardTensors};
pub use plan::{
    AUTO_RULES, AutoRule, Launch, LaunchKind, NotTaken, Plan, Reason, STANDARD_SCRATCH_FRACTION, TileError,
    plan, plan_backward, plan_backward_from_residuals, plan_for_backward,
};
pub use problem::{
    AttentionOptions, BlockTable, Layout, MAX_HEAD_DIM, MAX_SPLITS, MAX_TOKENS, Method, Problem, Sequence,
    Tiles, VarLen, Window,
};
pub use saved::SavedForBackward;
pub use timing::GpuTimer;

/// Hooks for the project's own GPU test suite (raw launches that trigger driver errors on
/// purpose). Not part of the API: only with the `internals` feature, and unstable.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    use crate::device::LaunchShape;
    use crate::{Device, DeviceBuffer, Result};
    use flashattn_kernels::params::FillParams;
    use flashattn_kernels::registry::Family;

    /// Launches the `fill_u32` kernel over `buf` with a caller-chosen shape (to provoke refused
    /// launches and shared-memory errors).
    pub fn launch_fill_u32(
        dev: &Device,
        buf: &mut DeviceBuffer<f32>,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
    ) -> Result<()> {
        dev.owns("buf", buf)?;
        let params =
            FillParams { ptr: buf.device_address(), len: buf.len() as u64, value: 0x7fc0_0000, _pad: 0 };
        let kernel = dev.fill_kernel(Family::Fill(4))?;
        // SAFETY: the params describe `buf`, which the kernel bounds-checks by `len`.
        unsafe { dev.launch(kernel, LaunchShape { grid, block, shared_bytes }, &params) }
    }
}

/// The kernel crate: its `#[repr(C)]` launch parameters and the online-softmax recurrence.
pub use flashattn_kernels as kernels;
/// Re-exported so that users of [`Element`] can name the 16-bit float types.
pub use half::{bf16, f16};

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
mod buffer;
pub mod cpu;
mod device;
mod error;
pub mod explain;
mod problem;
mod ptx;
mod standard;
mod timing;

pub use attention::{DeviceTensor, DeviceTensorMut, Plan};
pub use buffer::{DType, DeviceBuffer, Element};
pub use device::{Device, DeviceProps, LaunchShape};
pub use error::{Error, InvalidInput, Result};
pub use problem::{AttentionOptions, Layout, MAX_HEAD_DIM, Method, Problem, Sequence, Tiles, VarLen};
pub use ptx::Kernel;
pub use timing::GpuTimer;

/// The kernel crate: its `#[repr(C)]` launch parameters and the online-softmax recurrence.
pub use flashattn_kernels as kernels;
/// Re-exported so that users of [`Element`] can name the 16-bit float types.
pub use half::{bf16, f16};

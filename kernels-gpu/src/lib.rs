//! The GPU side of `flashattn`, written in `no_std` Rust.
//!
//! One source, two targets:
//! - on `nvptx64-nvidia-cuda` (built by `cargo xtask ptx`), the [`gpu`] module holds the kernels
//!   and the thin `asm!` wrappers they use;
//! - on the host (stable Rust), the portable parts are compiled and unit-tested: the `#[repr(C)]`
//!   launch parameters shared with the host crate ([`params`]), the tile configurations
//!   ([`config`]) and the online-softmax recurrence ([`softmax`]) that the GPU kernels and the
//!   CPU tiled implementation both run.
#![no_std]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(abi_ptx, stdarch_nvptx, asm_experimental_arch, core_intrinsics),
    allow(internal_features)
)]

#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

pub mod config;
pub mod mask;
pub mod math;
pub mod params;
pub mod registry;
pub mod softmax;

#[cfg(target_arch = "nvptx64")]
pub mod gpu;

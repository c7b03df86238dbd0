//! Thin wrappers over PTX special registers and instructions, one module per family.
//! Each wrapper is a few lines of `asm!` (or a `core::arch::nvptx` intrinsic) and documents the
//! instruction it emits.

pub mod cp_async;
pub mod global;
pub mod ldmatrix;
pub mod mma;
pub mod shared;
pub mod shuffle;
pub mod thread;
pub mod tma;
pub mod wgmma;

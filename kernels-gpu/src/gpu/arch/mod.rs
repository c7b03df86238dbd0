//! Thin wrappers over PTX special registers and instructions, one module per family.
//! Each wrapper is a few lines of `asm!` (or a `core::arch::nvptx` intrinsic) and documents the
//! instruction it emits.

pub mod thread;

//! Everything that exists only on the GPU: the kernels and the thin wrappers over PTX
//! instructions that they are written with.

mod append;
pub mod arch;
mod combine;
mod fill;
mod flash_bwd;
mod flash_mma;
mod flash_simt;
// Hopper-only: `wgmma` and TMA exist on sm_90a alone (the sm_80 PTX has no such kernels).
#[cfg(target_feature = "sm_90a")]
mod flash_wgmma;
mod score_mod;
mod sequence;
mod softmax_rows;
mod tile;

/// A panic inside a kernel aborts the launch: the host sees `CUDA_ERROR_ILLEGAL_INSTRUCTION`
/// (trap) as a launch error. The kernels are written so that no panic path is reachable
/// (no slice indexing, no unwrap), which the PTX shows as the absence of `trap` calls.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: `trap` aborts the kernel; nothing runs after it.
    unsafe { core::arch::nvptx::trap() }
}

//! `cp.async`: asynchronous 16-byte copies from global to shared memory (sm_80+), grouped and
//! waited on per thread. A barrier is still needed before other threads read what arrived.

use core::arch::asm;

/// `cp.async.cg.shared.global [dst], [src], 16, src_bytes`: copies 16 bytes (`src_bytes` = 16),
/// or writes 16 zero bytes (`src_bytes` = 0; then nothing is read from `src`, which must still be
/// a valid address: pass the tensor's base). Other counts are legal PTX, but compute-sanitizer
/// counts them as 16-byte reads (seen on the H200), so the kernels use only these two.
///
/// # Safety
/// `dst` 16-byte aligned inside the block's shared memory; `src` 16-byte aligned global memory
/// with `src_bytes` readable bytes.
#[inline(always)]
pub unsafe fn copy16(dst: u32, src: u64, src_bytes: u32) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src, n = in(reg32) src_bytes)
    };
}

/// `cp.async.commit_group`: closes the group of copies issued since the last commit.
#[inline(always)]
pub fn commit() {
    // SAFETY: no operands.
    unsafe { asm!("cp.async.commit_group;") };
}

/// `cp.async.wait_group N`: waits until at most `N` of this thread's groups are still in flight.
#[inline(always)]
pub fn wait<const N: u32>() {
    // SAFETY: no memory operands.
    unsafe { asm!("cp.async.wait_group {n};", n = const N) };
}

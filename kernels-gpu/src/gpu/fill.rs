//! Fill kernels: write one bit pattern to every word of a buffer (grid-stride loop).

use super::arch::thread::{block_dim_x, block_x, grid_dim_x, thread_x};
use crate::params::FillParams;

/// Writes `p.value as u16` to `p.len` 16-bit words at `p.ptr` (f16/bf16 buffers).
///
/// # Safety
/// `p.ptr` must be a device address of at least `p.len` writable 16-bit words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_u16(p: FillParams) {
    let base = p.ptr as *mut u16;
    let stride = (block_dim_x() * grid_dim_x()) as u64;
    let mut i = (block_x() * block_dim_x() + thread_x()) as u64;
    while i < p.len {
        // SAFETY: i < len, inside the buffer by the caller's contract.
        unsafe { *base.add(i as usize) = p.value as u16 };
        i += stride;
    }
}

/// Writes `p.value` to `p.len` 32-bit words at `p.ptr` (f32 buffers).
///
/// # Safety
/// `p.ptr` must be a device address of at least `p.len` writable 32-bit words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_u32(p: FillParams) {
    let base = p.ptr as *mut u32;
    let stride = (block_dim_x() * grid_dim_x()) as u64;
    let mut i = (block_x() * block_dim_x() + thread_x()) as u64;
    while i < p.len {
        // SAFETY: i < len, inside the buffer by the caller's contract.
        unsafe { *base.add(i as usize) = p.value };
        i += stride;
    }
}

//! Fill kernels: write one bit pattern to every word of a buffer (grid-stride loop).

use super::arch::thread::{block_dim_x, block_x, grid_dim_x, thread_x};
use crate::params::{FillParams, FillRowsParams};

/// Writes `value` to `len` words at `ptr` (grid-stride loop).
///
/// # Safety
/// `ptr` must be a device address of at least `len` writable words.
#[inline(always)]
unsafe fn fill<W: Copy>(ptr: u64, len: u64, value: W) {
    let base = ptr as *mut W;
    let stride = (block_dim_x() * grid_dim_x()) as u64;
    let mut i = (block_x() * block_dim_x() + thread_x()) as u64;
    while i < len {
        // SAFETY: i < len, inside the buffer by the caller's contract.
        unsafe { *base.add(i as usize) = value };
        i += stride;
    }
}

/// Writes `value` to every element of a strided `(token, head, col)` tensor (grid-stride loop).
///
/// # Safety
/// Every addressed element must be a writable word.
#[inline(always)]
unsafe fn fill_rows<W: Copy>(p: &FillRowsParams, value: W) {
    let base = p.ptr as *mut W;
    let total = p.tokens as u64 * p.heads as u64 * p.cols as u64;
    let stride = (block_dim_x() * grid_dim_x()) as u64;
    let mut i = (block_x() * block_dim_x() + thread_x()) as u64;
    while i < total {
        // SAFETY: inside the tensor by the caller's contract.
        unsafe { *base.add(row_element(p, i) as usize) = value };
        i += stride;
    }
}

/// The element index of flat position `i` of a [`FillRowsParams`] tensor.
#[inline(always)]
fn row_element(p: &FillRowsParams, i: u64) -> u64 {
    // `max(1)`: never 0 from the host (an empty fill launches nothing); it spares a panic path.
    let (cols, heads) = (p.cols.max(1) as u64, p.heads.max(1) as u64);
    let (row, col) = (i / cols, i % cols);
    let (token, head) = (row / heads, row % heads);
    token * p.seq_stride + head * p.head_stride + col
}

/// Writes `p.value as u16` to `p.len` 16-bit words at `p.ptr` (f16/bf16 buffers).
///
/// # Safety
/// `p.ptr` must be a device address of at least `p.len` writable 16-bit words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_u16(p: FillParams) {
    // SAFETY: forwarded contract.
    unsafe { fill(p.ptr, p.len, p.value as u16) }
}

/// Writes `p.value` to `p.len` 32-bit words at `p.ptr` (f32 buffers).
///
/// # Safety
/// `p.ptr` must be a device address of at least `p.len` writable 32-bit words.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_u32(p: FillParams) {
    // SAFETY: forwarded contract.
    unsafe { fill(p.ptr, p.len, p.value) }
}

/// Writes `p.value as u16` to every element of a strided `(token, head, col)` tensor.
///
/// # Safety
/// Every addressed element must be a writable 16-bit word.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_rows_u16(p: FillRowsParams) {
    // SAFETY: forwarded contract.
    unsafe { fill_rows(&p, p.value as u16) }
}

/// Writes `p.value` to every element of a strided `(token, head, col)` tensor of 32-bit words.
///
/// # Safety
/// Every addressed element must be a writable 32-bit word.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn fill_rows_u32(p: FillRowsParams) {
    // SAFETY: forwarded contract.
    unsafe { fill_rows(&p, p.value) }
}

//! Thread, block and grid indices, and block-wide barriers.

use core::arch::nvptx;

/// `%tid.x`: this thread's index in its block.
#[inline(always)]
pub fn thread_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_thread_idx_x() as u32 }
}

/// `%tid.x` read by an instruction the compiler treats as opaque: it is not merged with other
/// reads, so values derived from it are recomputed where they are needed instead of being kept
/// in registers across a loop.
#[inline(always)]
pub fn thread_x_opaque() -> u32 {
    let t: u32;
    // SAFETY: reads a special register.
    unsafe { core::arch::asm!("mov.u32 {t}, %tid.x;", t = out(reg32) t) };
    t
}

/// `%ntid.x`: threads per block along x.
#[inline(always)]
pub fn block_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_dim_x() as u32 }
}

/// `%ctaid.x`: this block's index along x.
#[inline(always)]
pub fn block_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_x() as u32 }
}

/// `%ctaid.y`: this block's index along y.
#[inline(always)]
pub fn block_y() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_y() as u32 }
}

/// `%ctaid.z`: this block's index along z.
#[inline(always)]
pub fn block_z() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_block_idx_z() as u32 }
}

/// `%nctaid.x`: blocks in the grid along x.
#[inline(always)]
pub fn grid_dim_x() -> u32 {
    // SAFETY: reads a special register.
    unsafe { nvptx::_grid_dim_x() as u32 }
}

/// `bar.sync 0`: every thread of the block waits here; orders shared-memory accesses before it
/// against those after it.
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: a barrier; all threads of the block reach it (callers keep it out of divergent code).
    unsafe { nvptx::_syncthreads() }
}

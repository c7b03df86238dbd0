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

/// `(%ctaid.x, %ctaid.y, %ctaid.z)` read by an instruction the compiler treats as opaque (as
/// [`thread_x_opaque`]): values derived from them are recomputed at each read instead of being
/// kept in registers across a loop.
#[inline(always)]
pub fn block_xyz_opaque() -> (u32, u32, u32) {
    let (x, y, z): (u32, u32, u32);
    // SAFETY: reads special registers.
    unsafe {
        core::arch::asm!(
            "mov.u32 {x}, %ctaid.x;", "mov.u32 {y}, %ctaid.y;", "mov.u32 {z}, %ctaid.z;",
            x = out(reg32) x, y = out(reg32) y, z = out(reg32) z,
        )
    };
    (x, y, z)
}

/// `x` through an instruction the compiler treats as opaque: values derived from the result
/// inside a loop are computed there, not hoisted out of it and kept in registers across it.
#[inline(always)]
pub fn opaque(x: u32) -> u32 {
    let y: u32;
    // SAFETY: a register move.
    unsafe { core::arch::asm!("mov.u32 {y}, {x};", y = out(reg32) y, x = in(reg32) x) };
    y
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

/// `barrier.sync 0`: every thread of the block waits here; orders shared-memory accesses before
/// it against those after it.
///
/// Precondition: every thread of the block reaches the same barrier (callers keep it out of
/// thread-dependent branches; a block that returns early returns as a whole, before any barrier).
/// Written as `asm!` rather than an intrinsic so that the instruction is the one named here, and
/// not `pure` (a barrier must never be moved or merged).
#[inline(always)]
pub fn sync_threads() {
    // SAFETY: a barrier; all threads of the block reach it (see the precondition).
    unsafe { core::arch::asm!("barrier.sync 0;", options(nostack)) }
}

/// `barrier.red.or.pred`: [`sync_threads`] that also returns whether `pred` holds in any thread
/// of the block (the same answer in every thread). Same precondition as [`sync_threads`].
#[inline(always)]
pub fn sync_threads_or(pred: bool) -> bool {
    let any: u32;
    // SAFETY: a barrier; all threads of the block reach it (see [`sync_threads`]).
    unsafe {
        core::arch::asm!(
            "{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; barrier.red.or.pred q, 0, p; selp.u32 {r}, 1, 0, q; }}",
            x = in(reg32) pred as u32, r = out(reg32) any, options(nostack)
        )
    }
    any != 0
}

/// `setmaxnreg.dec.sync.aligned.u32 N`: this warpgroup gives registers back, keeping `N` per
/// thread (a multiple of 8, 24–256). All 128 threads of the warpgroup execute it together. Takes
/// effect only in kernels with a register cap at entry (`.maxntid` and `.minnctapersm`, which
/// `cargo xtask ptx` writes), else ptxas ignores it with a warning.
#[inline(always)]
pub fn release_registers<const N: u32>() {
    // SAFETY: warpgroup-collective; callers keep the warpgroup converged.
    unsafe { core::arch::asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nostack)) }
}

/// `setmaxnreg.inc.sync.aligned.u32 N`: this warpgroup takes registers, up to `N` per thread,
/// from those other warpgroups released (it waits until they are free).
#[inline(always)]
pub fn claim_registers<const N: u32>() {
    // SAFETY: as [`release_registers`].
    unsafe { core::arch::asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nostack)) }
}

/// `barrier.sync ID, THREADS`: waits at named barrier `ID` (1–15; 0 is [`sync_threads`]'s)
/// until `THREADS` threads (a multiple of 32) have arrived there, this thread's warp included.
/// Used between warpgroups: one waits for the other's [`named_arrive`].
#[inline(always)]
pub fn named_sync<const THREADS: u32>(id: u32) {
    // SAFETY: a barrier; the callers pair every wait with arrivals (see the kernels).
    unsafe {
        core::arch::asm!("barrier.sync {id}, {n};", id = in(reg32) id, n = const THREADS, options(nostack))
    }
}

/// `barrier.arrive ID, THREADS`: counts this warp's arrival at named barrier `ID` without
/// waiting.
#[inline(always)]
pub fn named_arrive<const THREADS: u32>(id: u32) {
    // SAFETY: as [`named_sync`].
    unsafe {
        core::arch::asm!("barrier.arrive {id}, {n};", id = in(reg32) id, n = const THREADS, options(nostack))
    }
}

/// `griddepcontrol.wait` (sm_90): waits until the grids this one depends on have completed and
/// their memory is visible. It matters for a grid launched as a *programmatic dependent* of the
/// previous one in its stream (the host's `Launch` on sm_90, for the split-KV combine): such a grid
/// may start while the previous one is still finishing, and must wait here before it reads what
/// that grid wrote. In any other launch it returns at once. On sm_80 (no such instruction, and the
/// host never launches that way there) it is nothing.
#[inline(always)]
pub fn wait_for_previous_grid() {
    #[cfg(target_feature = "sm_90a")]
    // SAFETY: a wait; it orders this thread's later memory accesses after the previous grid's.
    unsafe {
        core::arch::asm!("griddepcontrol.wait;", options(nostack))
    }
}

/// `griddepcontrol.launch_dependents` (sm_90): lets the grid launched after this one as its
/// programmatic dependent start now (its blocks then wait in [`wait_for_previous_grid`]), instead
/// of when this grid's last block exits. Without such a dependent it does nothing; on sm_80 it is
/// nothing.
#[inline(always)]
pub fn let_dependent_grid_start() {
    #[cfg(target_feature = "sm_90a")]
    // SAFETY: a scheduling hint; it changes no memory and no control flow.
    unsafe {
        core::arch::asm!("griddepcontrol.launch_dependents;", options(nostack, nomem))
    }
}

/// `%globaltimer`: the GPU's nanosecond clock (sm_70+), for bounded waits.
#[inline(always)]
pub fn global_timer_ns() -> u64 {
    let t: u64;
    // SAFETY: reads a special register.
    unsafe { core::arch::asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nostack, nomem)) };
    t
}

/// `nanosleep.u32`: suspends the thread for about `ns` nanoseconds (sm_70+; the hardware may
/// wake it earlier), so that a polling loop leaves the issue slots to others.
#[inline(always)]
pub fn nanosleep(ns: u32) {
    // SAFETY: a pause; it changes no memory.
    unsafe { core::arch::asm!("nanosleep.u32 {n};", n = in(reg32) ns, options(nostack, nomem)) };
}

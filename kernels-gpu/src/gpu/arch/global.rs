//! Global memory: element loads and stores by 64-bit address, converting to and from f32.
//!
//! Inputs are read through the non-coherent (read-only) cache path, `ld.global.nc`: a kernel
//! never writes what it reads.

use core::arch::asm;

/// A storage format: how to read one element as f32 and write one from f32.
pub trait Storage {
    /// Bytes per element.
    const BYTES: u64;
    /// Reads the element at `addr` (read-only input).
    ///
    /// # Safety
    /// `addr` must be a valid, aligned global address of one element.
    unsafe fn load(addr: u64) -> f32;
    /// Writes `x` rounded to this format (round to nearest even) at `addr`.
    ///
    /// # Safety
    /// As `load`, writable.
    unsafe fn store(addr: u64, x: f32);
}

/// IEEE half.
pub struct F16;
/// bfloat16.
pub struct Bf16;
/// IEEE single.
pub struct F32;

#[inline(always)]
unsafe fn load_b16(addr: u64) -> u16 {
    let h: u16;
    // SAFETY: caller's contract.
    unsafe { asm!("ld.global.nc.b16 {h}, [{a}];", h = out(reg16) h, a = in(reg64) addr) };
    h
}

#[inline(always)]
unsafe fn store_b16(addr: u64, h: u16) {
    // SAFETY: caller's contract.
    unsafe { asm!("st.global.b16 [{a}], {h};", a = in(reg64) addr, h = in(reg16) h) };
}

impl Storage for F16 {
    const BYTES: u64 = 2;
    #[inline(always)]
    unsafe fn load(addr: u64) -> f32 {
        // SAFETY: caller's contract.
        let h = unsafe { load_b16(addr) };
        let x: f32;
        // SAFETY: register conversion (exact).
        unsafe { asm!("cvt.f32.f16 {x}, {h};", x = out(reg32) x, h = in(reg16) h) };
        x
    }
    #[inline(always)]
    unsafe fn store(addr: u64, x: f32) {
        let h: u16;
        // SAFETY: register conversion.
        unsafe { asm!("cvt.rn.f16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x) };
        // SAFETY: caller's contract.
        unsafe { store_b16(addr, h) };
    }
}

impl Storage for Bf16 {
    const BYTES: u64 = 2;
    #[inline(always)]
    unsafe fn load(addr: u64) -> f32 {
        // SAFETY: caller's contract.
        let h = unsafe { load_b16(addr) };
        f32::from_bits((h as u32) << 16)
    }
    #[inline(always)]
    unsafe fn store(addr: u64, x: f32) {
        let h: u16;
        // SAFETY: register conversion (sm_80+).
        unsafe { asm!("cvt.rn.bf16.f32 {h}, {x};", h = out(reg16) h, x = in(reg32) x) };
        // SAFETY: caller's contract.
        unsafe { store_b16(addr, h) };
    }
}

impl Storage for F32 {
    const BYTES: u64 = 4;
    #[inline(always)]
    unsafe fn load(addr: u64) -> f32 {
        let x: f32;
        // SAFETY: caller's contract.
        unsafe { asm!("ld.global.nc.f32 {x}, [{a}];", x = out(reg32) x, a = in(reg64) addr) };
        x
    }
    #[inline(always)]
    unsafe fn store(addr: u64, x: f32) {
        // SAFETY: caller's contract.
        unsafe { asm!("st.global.f32 [{a}], {x};", a = in(reg64) addr, x = in(reg32) x) };
    }
}

/// Reads one 16-bit element's bits (the element-wise tile copies of odd head dims).
///
/// # Safety
/// `addr` must be a valid, 2-byte aligned global address (read-only input).
#[inline(always)]
pub unsafe fn load_u16(addr: u64) -> u16 {
    // SAFETY: caller's contract.
    unsafe { load_b16(addr) }
}

/// Writes one 16-bit element's bits.
///
/// # Safety
/// `addr` must be a valid, 2-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_u16(addr: u64, h: u16) {
    // SAFETY: caller's contract.
    unsafe { store_b16(addr, h) }
}

/// Reads a `u32` (sequence offsets).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn load_u32(addr: u64) -> u32 {
    let x: u32;
    // SAFETY: caller's contract.
    unsafe { asm!("ld.global.nc.u32 {x}, [{a}];", x = out(reg32) x, a = in(reg64) addr) };
    x
}

/// `prefetch.global.L1`: asks for the line holding `addr` to be brought into L1 ahead of a
/// load that needs it (a paged cache's next page indices). A hint: nothing is read into
/// registers and nothing waits for it.
///
/// # Safety
/// `addr` must be a valid global address.
#[inline(always)]
pub unsafe fn prefetch_l1(addr: u64) {
    // SAFETY: caller's contract; a prefetch reads nothing into the program.
    unsafe { asm!("prefetch.global.L1 [{a}];", a = in(reg64) addr) };
}

/// Writes an f32 (log-sum-exp rows).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_f32(addr: u64, x: f32) {
    // SAFETY: caller's contract.
    unsafe { F32::store(addr, x) };
}

/// `st.global.v4.b32`: 16 bytes.
///
/// # Safety
/// `addr` must be a valid, 16-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_u32x4(addr: u64, v: [u32; 4]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("st.global.v4.b32 [{a}], {{{x}, {y}, {z}, {w}}};",
             a = in(reg64) addr, x = in(reg32) v[0], y = in(reg32) v[1], z = in(reg32) v[2], w = in(reg32) v[3])
    };
}

/// `st.global.v2.f32`: two f32 (split-KV partial outputs).
///
/// # Safety
/// `addr` must be a valid, 8-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_f32x2(addr: u64, v: [f32; 2]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("st.global.v2.f32 [{a}], {{{x}, {y}}};", a = in(reg64) addr, x = in(reg32) v[0], y = in(reg32) v[1])
    };
}

/// `st.global.v2.b32`: 8 bytes.
///
/// # Safety
/// `addr` must be a valid, 8-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_u32x2(addr: u64, v: [u32; 2]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("st.global.v2.b32 [{a}], {{{x}, {y}}};", a = in(reg64) addr, x = in(reg32) v[0], y = in(reg32) v[1])
    };
}

/// Reads an f32 written by an earlier kernel (split-KV partial log-sum-exps).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32(addr: u64) -> f32 {
    // SAFETY: caller's contract.
    unsafe { F32::load(addr) }
}

/// `ld.global.nc.v2.f32`: two f32 written by an earlier kernel and read-only for this one.
///
/// # Safety
/// `addr` must be a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32x2(addr: u64) -> [f32; 2] {
    let (x, y): (f32, f32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.global.nc.v2.f32 {{{x}, {y}}}, [{a}];", x = out(reg32) x, y = out(reg32) y, a = in(reg64) addr)
    };
    [x, y]
}

/// `ld.global.nc.v4.f32`: four f32 written by an earlier kernel and read-only for this one.
///
/// # Safety
/// `addr` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32x4(addr: u64) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.global.nc.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];",
             x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, a = in(reg64) addr)
    };
    [x, y, z, w]
}

/// `ld.global.v4.f32` (coherent, not `.nc`): four f32 that another grid writes while this one
/// runs (see [`load_f32_rw`]).
///
/// # Safety
/// `addr` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32x4_rw(addr: u64) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.global.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];",
             x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, a = in(reg64) addr)
    };
    [x, y, z, w]
}

/// `ld.global.cg.v4.f32`: four f32 read from the L2 (not cached in L1), which blocks of a grid
/// still running may have written: the dQ conversion reads a query tile's accumulator once the
/// main kernel's blocks have published it complete ([`red_release_add_u32`]).
///
/// # Safety
/// `addr` must be a valid, 16-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32x4_l2(addr: u64) -> [f32; 4] {
    let (x, y, z, w): (f32, f32, f32, f32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.global.cg.v4.f32 {{{x}, {y}, {z}, {w}}}, [{a}];",
             x = out(reg32) x, y = out(reg32) y, z = out(reg32) z, w = out(reg32) w, a = in(reg64) addr)
    };
    [x, y, z, w]
}

/// `ld.global.v2.f32` (coherent, not `.nc`): two f32 that this kernel overwrites after reading
/// them (a running context-parallel result, read and rewritten in place by the same thread).
///
/// # Safety
/// `addr` must be a valid, 8-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32x2_rw(addr: u64) -> [f32; 2] {
    let (x, y): (f32, f32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.global.v2.f32 {{{x}, {y}}}, [{a}];", x = out(reg32) x, y = out(reg32) y, a = in(reg64) addr)
    };
    [x, y]
}

/// `ld.global.f32` (coherent, not `.nc`): an f32 that this kernel overwrites after reading it,
/// or that another grid writes while this one runs (a programmatic dependent launch reads the
/// previous grid's results after `griddepcontrol.wait`; `.nc` is only for data read-only for
/// the kernel's whole lifetime).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn load_f32_rw(addr: u64) -> f32 {
    let x: f32;
    // SAFETY: caller's contract.
    unsafe { asm!("ld.global.f32 {x}, [{a}];", x = out(reg32) x, a = in(reg64) addr) };
    x
}

/// `red.global.add.f32`: adds `x` to the f32 at `addr` atomically (no result returned).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn red_add_f32(addr: u64, x: f32) {
    // SAFETY: caller's contract.
    unsafe { asm!("red.global.add.f32 [{a}], {x};", a = in(reg64) addr, x = in(reg32) x) };
}

/// `red.global.add.v4.f32`: adds `x[0..4]` to the four f32 at `addr` atomically (each element on
/// its own; sm_90, PTX ISA 8.1).
///
/// # Safety
/// `addr` must be a valid, 16-byte aligned, writable global address of four f32.
#[cfg(target_feature = "sm_90a")]
#[inline(always)]
pub unsafe fn red_add_f32x4(addr: u64, x: [f32; 4]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!(
            "red.global.add.v4.f32 [{a}], {{{x}, {y}, {z}, {w}}};",
            a = in(reg64) addr, x = in(reg32) x[0], y = in(reg32) x[1], z = in(reg32) x[2], w = in(reg32) x[3]
        )
    };
}

/// `st.global.b32`: one 32-bit word (two packed 16-bit elements).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_u32(addr: u64, x: u32) {
    // SAFETY: caller's contract.
    unsafe { asm!("st.global.b32 [{a}], {x};", a = in(reg64) addr, x = in(reg32) x) };
}

/// `atom.global.add.u32`: adds `x` to the word at `addr` and returns the word before.
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned device address of a word other threads only change
/// atomically.
#[inline(always)]
pub unsafe fn atomic_add_u32(addr: u64, x: u32) -> u32 {
    let old: u32;
    // SAFETY: caller's contract.
    unsafe {
        asm!("atom.global.add.u32 {o}, [{a}], {x};", o = out(reg32) old, a = in(reg64) addr, x = in(reg32) x)
    };
    old
}

/// `ld.acquire.gpu.global.u32`: reads a turn counter another block releases; later reads and
/// writes of this thread are ordered after it.
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned global address.
#[inline(always)]
pub unsafe fn load_acquire_u32(addr: u64) -> u32 {
    let x: u32;
    // SAFETY: caller's contract.
    unsafe { asm!("ld.acquire.gpu.global.u32 {x}, [{a}];", x = out(reg32) x, a = in(reg64) addr) };
    x
}

/// `fence.acq_rel.gpu`: this thread's later writes are ordered after every write it has seen
/// (with a barrier before it: the block's). Followed by relaxed atomics
/// ([`red_release_add_u32`]) it makes them releases, one fence for all of them.
#[inline(always)]
pub fn fence_acq_rel_gpu() {
    // SAFETY: a fence; it changes no memory.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack)) };
}

/// `red.relaxed.gpu.global.add.u32`: adds `x` (wrapping: `u32::MAX` takes one) to the word at
/// `addr`, without a result. After [`fence_acq_rel_gpu`] it publishes what the fence ordered
/// before it to a thread that reads the word with [`load_acquire_u32`].
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned, writable global address of a word other threads only
/// change atomically.
#[inline(always)]
pub unsafe fn red_release_add_u32(addr: u64, x: u32) {
    // SAFETY: caller's contract.
    unsafe { asm!("red.relaxed.gpu.global.add.u32 [{a}], {x};", a = in(reg64) addr, x = in(reg32) x) };
}

/// `fence.acq_rel.gpu` then `st.release.gpu.global.u32`: publishes a turn counter after every
/// write this thread has seen (with a barrier before it: the block's writes).
///
/// # Safety
/// `addr` must be a valid, 4-byte aligned, writable global address.
#[inline(always)]
pub unsafe fn store_release_u32(addr: u64, x: u32) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("fence.acq_rel.gpu;", "st.release.gpu.global.u32 [{a}], {x};", a = in(reg64) addr, x = in(reg32) x)
    };
}

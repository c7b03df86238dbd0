//! Shared memory: the block's dynamic allocation, and loads/stores by 32-bit shared address.

use core::arch::{asm, global_asm};

// The kernel's dynamic shared memory: sized per launch (`shared_bytes`); above 48 KiB the host
// raises the function's limit first. Declared once at file scope (PTX refuses `.extern .shared`
// inside a function).
global_asm!(".extern .shared .align 128 .b8 flashattn_dsmem[];");

/// Shared-state address of the first byte of the dynamic shared memory.
#[inline(always)]
pub fn base() -> u32 {
    let a: u32;
    // SAFETY: reads the address of a symbol.
    unsafe { asm!("mov.u32 {a}, flashattn_dsmem;", a = out(reg32) a) };
    a
}

/// `st.shared.f32`.
///
/// # Safety
/// `addr` must lie inside the launch's shared memory, 4-byte aligned.
#[inline(always)]
pub unsafe fn store_f32(addr: u32, x: f32) {
    // SAFETY: caller's contract.
    unsafe { asm!("st.shared.f32 [{a}], {x};", a = in(reg32) addr, x = in(reg32) x) };
}

/// `st.shared.b32`, any 32-bit word.
///
/// # Safety
/// As [`store_f32`].
#[inline(always)]
pub unsafe fn store_u32(addr: u32, x: u32) {
    // SAFETY: caller's contract.
    unsafe { asm!("st.shared.b32 [{a}], {x};", a = in(reg32) addr, x = in(reg32) x) };
}

/// `ld.shared.b32`, any 32-bit word.
///
/// # Safety
/// As [`store_f32`].
#[inline(always)]
pub unsafe fn load_u32(addr: u32) -> u32 {
    let x: u32;
    // SAFETY: caller's contract.
    unsafe { asm!("ld.shared.b32 {x}, [{a}];", x = out(reg32) x, a = in(reg32) addr) };
    x
}

/// `ld.shared.f32`.
///
/// # Safety
/// As [`store_f32`].
#[inline(always)]
pub unsafe fn load_f32(addr: u32) -> f32 {
    let x: f32;
    // SAFETY: caller's contract.
    unsafe { asm!("ld.shared.f32 {x}, [{a}];", x = out(reg32) x, a = in(reg32) addr) };
    x
}

/// `ld.shared.v4.f32`: four consecutive floats.
///
/// # Safety
/// `addr` must lie inside the launch's shared memory, 16-byte aligned.
#[inline(always)]
pub unsafe fn load_f32x4(addr: u32) -> [f32; 4] {
    let (a, b, c, d): (f32, f32, f32, f32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.shared.v4.f32 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr)
    };
    [a, b, c, d]
}

/// `ld.shared.v4.b32`: four consecutive 32-bit words.
///
/// # Safety
/// `addr` must lie inside the launch's shared memory, 16-byte aligned.
#[inline(always)]
pub unsafe fn load_u32x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ld.shared.v4.b32 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr)
    };
    [a, b, c, d]
}

/// `st.shared.v4.b32`: four consecutive 32-bit words.
///
/// # Safety
/// `addr` must lie inside the launch's shared memory, 16-byte aligned.
#[inline(always)]
pub unsafe fn store_u32x4(addr: u32, v: [u32; 4]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("st.shared.v4.b32 [{p}], {{{a}, {b}, {c}, {d}}};",
             p = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3])
    };
}

/// `st.shared.v2.f32`: two consecutive f32.
///
/// # Safety
/// `addr` must lie inside the launch's shared memory, 8-byte aligned.
#[inline(always)]
pub unsafe fn store_f32x2(addr: u32, v: [f32; 2]) {
    // SAFETY: caller's contract.
    unsafe {
        asm!("st.shared.v2.f32 [{p}], {{{a}, {b}}};", p = in(reg32) addr, a = in(reg32) v[0], b = in(reg32) v[1])
    };
}

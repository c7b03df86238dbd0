//! `ldmatrix`: a warp loads four 8×8 tiles of 16-bit elements from shared memory into the
//! fragment layout of `mma` (see [`super::mma`]).
//!
//! Lanes 8i..8i+7 give the shared addresses of the 8 rows (16 bytes each) of tile `i`. Without
//! `.trans`, register `i` of lane `l` holds tile `i`'s row `l/4`, elements `2(l%4)` and
//! `2(l%4)+1` (an A or B fragment of row-major data); with `.trans` it holds column `l/4`,
//! rows `2(l%4)` and `2(l%4)+1` (a B fragment of data stored k-major, like V).

use core::arch::asm;

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`.
///
/// # Safety
/// `addr` (this lane's row address) must be a 16-byte aligned address inside the block's shared
/// memory; all lanes of the warp execute it.
#[inline(always)]
pub unsafe fn x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr)
    };
    [a, b, c, d]
}

/// `ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`.
///
/// # Safety
/// As [`x4`].
#[inline(always)]
pub unsafe fn x4_trans(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    // SAFETY: caller's contract.
    unsafe {
        asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];",
             a = out(reg32) a, b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr)
    };
    [a, b, c, d]
}

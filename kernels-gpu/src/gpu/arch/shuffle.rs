//! Warp shuffles (`shfl.sync`) and votes (`vote.sync`), all lanes participating (member mask
//! `0xffffffff`).

use core::arch::asm;

/// `shfl.sync.bfly.b32`: the value of lane `lane ^ mask`.
#[inline(always)]
pub fn xor(x: f32, mask: u32) -> f32 {
    let y: f32;
    // SAFETY: register-only warp exchange; every lane of the warp executes it (callers keep it
    // out of divergent code).
    unsafe {
        asm!("shfl.sync.bfly.b32 {y}, {x}, {m}, 0x1f, 0xffffffff;", y = out(reg32) y, x = in(reg32) x, m = in(reg32) mask)
    };
    y
}

/// `shfl.sync.idx.b32`: the value of lane `src`.
#[inline(always)]
pub fn idx(x: f32, src: u32) -> f32 {
    let y: f32;
    // SAFETY: as `xor`.
    unsafe {
        asm!("shfl.sync.idx.b32 {y}, {x}, {s}, 0x1f, 0xffffffff;", y = out(reg32) y, x = in(reg32) x, s = in(reg32) src)
    };
    y
}

/// `vote.sync.all.pred`: whether `x` holds in every lane of the warp.
#[inline(always)]
pub fn all(x: bool) -> bool {
    let r: u32;
    // SAFETY: register-only warp vote; every lane of the warp executes it.
    unsafe {
        asm!("{{ .reg .pred p, q; setp.ne.u32 p, {x}, 0; vote.sync.all.pred q, p, 0xffffffff; selp.u32 {r}, 1, 0, q; }}",
             r = out(reg32) r, x = in(reg32) x as u32)
    };
    r != 0
}

/// Maximum over groups of 4 consecutive lanes (butterfly over lane bits 0 and 1).
#[inline(always)]
pub fn max4(x: f32) -> f32 {
    let x = x.max(xor(x, 1));
    x.max(xor(x, 2))
}

/// Sum over groups of 4 consecutive lanes.
#[inline(always)]
pub fn sum4(x: f32) -> f32 {
    let x = x + xor(x, 1);
    x + xor(x, 2)
}

/// Maximum over the whole warp.
#[inline(always)]
pub fn max32(mut x: f32) -> f32 {
    let mut m = 16;
    while m > 0 {
        x = x.max(xor(x, m));
        m >>= 1;
    }
    x
}

/// `bar.warp.sync 0xffffffff`: the warp's lanes meet here; orders their shared-memory accesses.
#[inline(always)]
pub fn sync_warp() {
    // SAFETY: every lane of the warp executes it.
    unsafe { asm!("bar.warp.sync 0xffffffff;") };
}

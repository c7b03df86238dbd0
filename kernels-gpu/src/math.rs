//! The few transcendental functions the kernels need, with one name on both targets.
//!
//! On the GPU they are the hardware's approximate instructions (`ex2.approx.ftz.f32`,
//! `lg2.approx.ftz.f32`: relative error about 2⁻²², far below bf16/f16 rounding and below the
//! f32 accumulation error of a long row). On the host they are the standard library's.

/// log2(e): multiplying a natural-log argument by this lets the kernels use `ex2`.
pub const LOG2_E: f32 = core::f32::consts::LOG2_E;
/// ln(2): turns a base-2 logarithm back into a natural one (for the log-sum-exp).
pub const LN_2: f32 = core::f32::consts::LN_2;

/// 2^x. `exp2(-inf) == 0`.
#[inline(always)]
pub fn exp2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a pure arithmetic instruction on registers.
        unsafe {
            core::arch::asm!("ex2.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack))
        };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x.exp2()
    }
}

/// log2(x). `log2(0) == -inf`.
#[inline(always)]
pub fn log2(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a pure arithmetic instruction on registers.
        unsafe {
            core::arch::asm!("lg2.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack))
        };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        x.log2()
    }
}

/// `a * b + c` with one rounding, as the GPU's `fma.rn.f32` computes it. Rust never contracts
/// `a * b + c` by itself, so the kernels' inner products call this explicitly. On the host the
/// product of two f32 is exact in f64 and the sum is rounded twice (to f64, then to f32), which
/// differs from a true fused operation only in rare halfway cases — and, unlike two f32
/// roundings, it keeps the host and the GPU agreeing when `a·b` and `c` nearly cancel (the
/// online softmax's largest score). `f32::mul_add` would be exact but is a slow library call on
/// x86-64 CPUs without FMA units.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // An intrinsic rather than `asm!`, so that LLVM still schedules it (`fma.rn.f32`).
        core::intrinsics::fmaf32(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        (a as f64 * b as f64 + c as f64) as f32
    }
}

/// 1/x. On the GPU `rcp.approx.ftz.f32` (at most 1 ulp off; the softcap's `1/(e + 1)`, whose
/// argument is at least 1), on the host a division.
#[inline(always)]
pub fn rcp(x: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        let y: f32;
        // SAFETY: a pure arithmetic instruction on registers.
        unsafe {
            core::arch::asm!("rcp.approx.ftz.f32 {y}, {x};", y = out(reg32) y, x = in(reg32) x, options(pure, nomem, nostack))
        };
        y
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        1.0 / x
    }
}

/// The larger of two floats; `-inf` loses to everything, as the row maximum needs.
#[inline(always)]
pub fn max(a: f32, b: f32) -> f32 {
    a.max(b)
}

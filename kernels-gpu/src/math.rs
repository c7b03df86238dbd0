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

/// `a * b + c`: one fused instruction on the GPU (`fma.rn.f32`, one rounding). Rust never
/// contracts `a * b + c` by itself, so the kernels' inner products call this explicitly. On the host it is
/// a multiply and an add (two roundings), because a CPU without FMA units would call a slow
/// software `fma`; the difference is one f32 rounding, far inside every tolerance used here.
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // An intrinsic rather than `asm!`, so that LLVM still schedules it (`fma.rn.f32`).
        core::intrinsics::fmaf32(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        a * b + c
    }
}

/// The larger of two floats; `-inf` loses to everything, as the row maximum needs.
#[inline(always)]
pub fn max(a: f32, b: f32) -> f32 {
    a.max(b)
}

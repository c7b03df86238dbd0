//! Hopper's warpgroup matrix products: `wgmma.mma_async` (sm_90a), with f32 accumulators.
//!
//! A warpgroup is 4 consecutive warps (the first a multiple of 4); all 128 threads issue each
//! instruction together (`.sync.aligned`). One instruction computes a 64×N×16 product
//! asynchronously: [`fence`] orders earlier register writes before it, [`commit`] closes a group
//! of issued products and [`wait`] blocks until at most `N` groups are in flight.
//!
//! Accumulator layout (64×N, f32), thread `t` of the warpgroup (warp `w = t / 32`, lane `l`,
//! `g = l / 4`, `c = l % 4`): register `4·j + e` holds row `16w + g + 8·(e / 2)`, column
//! `8j + 2c + e % 2` — per 8-column block, exactly `mma.sync`'s 16×8 C fragment of the warp's
//! 16 rows. The register A operand (64×16, 16-bit) is `mma.sync`'s A fragment of those rows, so
//! [`super::mma::MmaElement::acc_to_a`] turns score accumulators into probabilities in place.
//!
//! Shared-memory operands are described by a 64-bit descriptor ([`descriptor`]); this crate
//! uses one layout: 128-byte swizzled panels of 64 columns (what TMA writes with
//! `CU_TENSOR_MAP_SWIZZLE_128B`), tiles 1024-byte aligned, read K-major or MN-major (`.trans`:
//! the backward's Pᵀ, dSᵀ as A; V, dO, Q, K as B).

use core::arch::asm;

use super::mma::{Bf16, F16, MmaElement};

/// `wgmma.fence.sync.aligned`: register writes before it (accumulators rescaled, operands
/// packed) are ordered before the next `wgmma`.
#[inline(always)]
pub fn fence() {
    // SAFETY: a warpgroup-wide fence; callers keep the warpgroup converged.
    unsafe { asm!("wgmma.fence.sync.aligned;") };
}

/// `wgmma.commit_group.sync.aligned`: the products issued since the last commit form a group.
#[inline(always)]
pub fn commit() {
    // SAFETY: as [`fence`].
    unsafe { asm!("wgmma.commit_group.sync.aligned;") };
}

/// `wgmma.wait_group.sync.aligned N`: waits until at most `N` groups are pending. Then
/// [`settle`] the accumulators the finished groups wrote before reading them.
#[inline(always)]
pub fn wait<const N: u32>() {
    // SAFETY: as [`fence`].
    unsafe { asm!("wgmma.wait_group.sync.aligned {n};", n = const N) };
}

/// `fence.proxy.async.shared::cta`: this thread's earlier writes to shared memory through the
/// generic proxy (`st.shared`, `cp.async` once waited for) become visible to the async proxy,
/// which `wgmma` reads its shared-memory operands through. Every writer fences, then a barrier,
/// then the products (TMA's writes need none: they are async-proxy writes).
#[inline(always)]
pub fn fence_proxy_async_shared() {
    // SAFETY: a fence.
    unsafe { asm!("fence.proxy.async.shared::cta;") };
}

/// Ties each register to this point of the program (an empty `asm!` that reads and writes it),
/// so that the compiler neither reads an accumulator before the [`wait`] that completes it nor
/// writes one while a product may still read it.
#[inline(always)]
pub fn settle<const N: usize>(regs: &mut [f32; N]) {
    for r in regs.iter_mut() {
        // SAFETY: an empty instruction.
        unsafe { asm!("/* settle {r} */", r = inout(reg32) * r, options(nomem, nostack)) };
    }
}

/// The same for packed 16-bit operands.
#[inline(always)]
pub fn settle_u32<const N: usize>(regs: &mut [u32; N]) {
    for r in regs.iter_mut() {
        // SAFETY: an empty instruction.
        unsafe { asm!("/* settle {r} */", r = inout(reg32) * r, options(nomem, nostack)) };
    }
}

/// Bytes between 8-row groups of a 128-byte swizzled panel (8 rows of 128 bytes).
pub const SWIZZLE_ATOM_BYTES: u32 = 1024;

/// A shared-memory matrix descriptor for a 128-byte swizzled operand starting at shared address
/// `addr`: `leading` and `stride` are the byte offsets the PTX ISA calls the leading- and
/// stride-dimension offsets. For a K-major operand (rows of K contiguous: Q and K tiles)
/// `leading` is unused (16) and `stride` is [`SWIZZLE_ATOM_BYTES`]; stepping K by 16 elements
/// adds 32 bytes to `addr` inside a panel. For an MN-major operand (V as the B operand of
/// `P·V`: rows are keys, the N columns contiguous), `leading` is the distance between 64-column
/// panels and `stride` is [`SWIZZLE_ATOM_BYTES`] (the next 8 keys).
#[inline(always)]
pub const fn descriptor(addr: u32, leading: u32, stride: u32) -> u64 {
    ((addr as u64 & 0x3_ffff) >> 4)
        | (((leading as u64 >> 4) & 0x3fff) << 16)
        | (((stride as u64 >> 4) & 0x3fff) << 32)
        | (1u64 << 62) // 128-byte swizzle
}

/// A 16-bit input type of `wgmma`.
pub trait WgmmaElement: MmaElement {
    /// `d (+)= a·b` for 64×128×16: A (64×16) and B (128×16, K-major: `Kᵀ` of 128 keys) in shared
    /// memory by descriptor; `accumulate == 0` overwrites `d`.
    ///
    /// # Safety
    /// The descriptors must describe initialised shared memory as above; the whole warpgroup
    /// issues it, after [`fence`]; `d` is read only after [`wait`] and [`settle`].
    unsafe fn ss_n128(d: &mut [f32; 64], a: u64, b: u64, accumulate: u32);

    /// The same for 64×64×16 (B: 64 keys).
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn ss_n64(d: &mut [f32; 32], a: u64, b: u64, accumulate: u32);

    /// The same for 64×176×16 (B: 176 keys, d = 128's tile without a causal mask).
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn ss_n176(d: &mut [f32; 88], a: u64, b: u64, accumulate: u32);

    /// The same for 64×80×16 (B: 80 keys, d = 256's tile).
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn ss_n80(d: &mut [f32; 40], a: u64, b: u64, accumulate: u32);

    /// The same for 64×112×16 (B: 112 keys, d = 192's wider tile).
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn ss_n112(d: &mut [f32; 56], a: u64, b: u64, accumulate: u32);

    /// `S (+)= Q·Kᵀ` for a score tile of `N = 2·SN` keys (`SN` accumulators a thread): the
    /// `n176`, `n128`, `n112`, `n80` or `n64` instruction, chosen at compile time.
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`]; `SN` is 32, 40, 56, 64 or 88.
    #[inline(always)]
    unsafe fn ss_scores<const SN: usize>(d: &mut [f32; SN], a: u64, b: u64, accumulate: u32) {
        const { assert!(SN == 32 || SN == 40 || SN == 56 || SN == 64 || SN == 88) };
        let d = d.as_mut_ptr();
        // SAFETY: `SN` is the array's length, so each cast names the same array; the
        // caller's contract covers the instruction.
        unsafe {
            if SN == 88 {
                Self::ss_n176(&mut *d.cast::<[f32; 88]>(), a, b, accumulate)
            } else if SN == 64 {
                Self::ss_n128(&mut *d.cast::<[f32; 64]>(), a, b, accumulate)
            } else if SN == 56 {
                Self::ss_n112(&mut *d.cast::<[f32; 56]>(), a, b, accumulate)
            } else if SN == 40 {
                Self::ss_n80(&mut *d.cast::<[f32; 40]>(), a, b, accumulate)
            } else {
                Self::ss_n64(&mut *d.cast::<[f32; 32]>(), a, b, accumulate)
            }
        }
    }

    /// `d += a·b` for 64×64×16: A from registers (the 4 packed registers of `mma.sync`'s A
    /// fragment), B (16×64, MN-major: 16 keys of a 64-column V panel) by descriptor.
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn rs_n64(d: &mut [f32; 32], a: &[u32; 4], b: u64);

    /// `d += aᵀ·b` for 64×64×16 with both shared-memory operands MN-major (`.trans` on A and
    /// B): A's 64 rows (M) are contiguous in a 64-column panel whose rows are the 16 `k`
    /// (the backward's Pᵀ and dSᵀ from `[query][key]` panels), B (16×64) as [`Self::rs_n64`]'s.
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn ss_tt_n64(d: &mut [f32; 32], a: u64, b: u64);

    /// `d (+)= a·b` for 64×64×16: A K-major as [`Self::ss_n64`]'s, B MN-major as
    /// [`Self::rs_n64`]'s (`.trans` on B only: the backward's `dS·K`); `accumulate == 0`
    /// overwrites `d`.
    ///
    /// # Safety
    /// As [`WgmmaElement::ss_n128`].
    unsafe fn ss_tn_n64(d: &mut [f32; 32], a: u64, b: u64, accumulate: u32);
}

/// The `asm!` of one product: the accumulators are positional operands `{0}…`, listed by index.
macro_rules! wgmma_asm {
    (ss, $ptx:literal, $n:literal, $d:ident, $a:ident, $b:ident, $acc:expr; $first:tt $($i:tt)*) => {
        // SAFETY: the caller's contract (descriptors of initialised shared memory, a converged
        // warpgroup). Not `nomem`: it reads shared memory.
        unsafe {
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {acc}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ptx, ".", $ptx,
                    " {{{", $first, "}", $(", {", $i, "}",)* "}}, {a}, {b}, p, 1, 1, 0, 0; }}"
                ),
                inout(reg32) $d[$first], $(inout(reg32) $d[$i],)*
                a = in(reg64) $a, b = in(reg64) $b, acc = in(reg32) $acc,
                options(nostack),
            )
        }
    };
    (sstt, $ptx:literal, $n:literal, $d:ident, $a:ident, $b:ident, $acc:expr; $first:tt $($i:tt)*) => {
        // SAFETY: as above.
        unsafe {
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {acc}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ptx, ".", $ptx,
                    " {{{", $first, "}", $(", {", $i, "}",)* "}}, {a}, {b}, p, 1, 1, 1, 1; }}"
                ),
                inout(reg32) $d[$first], $(inout(reg32) $d[$i],)*
                a = in(reg64) $a, b = in(reg64) $b, acc = in(reg32) $acc,
                options(nostack),
            )
        }
    };
    (sstn, $ptx:literal, $n:literal, $d:ident, $a:ident, $b:ident, $acc:expr; $first:tt $($i:tt)*) => {
        // SAFETY: as above.
        unsafe {
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {acc}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ptx, ".", $ptx,
                    " {{{", $first, "}", $(", {", $i, "}",)* "}}, {a}, {b}, p, 1, 1, 0, 1; }}"
                ),
                inout(reg32) $d[$first], $(inout(reg32) $d[$i],)*
                a = in(reg64) $a, b = in(reg64) $b, acc = in(reg32) $acc,
                options(nostack),
            )
        }
    };
    (rs, $ptx:literal, $n:literal, $d:ident, $a:ident, $b:ident, $acc:expr; $first:tt $($i:tt)*) => {
        // SAFETY: as above.
        unsafe {
            asm!(
                concat!(
                    "{{ .reg .pred p; setp.ne.b32 p, {acc}, 0; wgmma.mma_async.sync.aligned.m64n", $n, "k16.f32.", $ptx, ".", $ptx,
                    " {{{", $first, "}", $(", {", $i, "}",)* "}}, {{{a0}, {a1}, {a2}, {a3}}}, {b}, p, 1, 1, 1; }}"
                ),
                inout(reg32) $d[$first], $(inout(reg32) $d[$i],)*
                a0 = in(reg32) $a[0], a1 = in(reg32) $a[1], a2 = in(reg32) $a[2], a3 = in(reg32) $a[3],
                b = in(reg64) $b, acc = in(reg32) $acc,
                options(nostack),
            )
        }
    };
}

/// One `WgmmaElement` impl: the PTX type goes into both instructions.
macro_rules! wgmma_element {
    ($ty:ident, $ptx:literal) => {
        impl WgmmaElement for $ty {
            #[inline(always)]
            unsafe fn ss_n128(d: &mut [f32; 64], a: u64, b: u64, accumulate: u32) {
                wgmma_asm!(ss, $ptx, "128", d, a, b, accumulate; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);
            }

            #[inline(always)]
            unsafe fn ss_n176(d: &mut [f32; 88], a: u64, b: u64, accumulate: u32) {
                wgmma_asm!(ss, $ptx, "176", d, a, b, accumulate; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64 65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87);
            }

            #[inline(always)]
            unsafe fn ss_n112(d: &mut [f32; 56], a: u64, b: u64, accumulate: u32) {
                wgmma_asm!(ss, $ptx, "112", d, a, b, accumulate; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55);
            }

            #[inline(always)]
            unsafe fn ss_n80(d: &mut [f32; 40], a: u64, b: u64, accumulate: u32) {
                wgmma_asm!(ss, $ptx, "80", d, a, b, accumulate; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39);
            }

            #[inline(always)]
            unsafe fn ss_n64(d: &mut [f32; 32], a: u64, b: u64, accumulate: u32) {
                wgmma_asm!(ss, $ptx, "64", d, a, b, accumulate; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
            }

            #[inline(always)]
            unsafe fn rs_n64(d: &mut [f32; 32], a: &[u32; 4], b: u64) {
                wgmma_asm!(rs, $ptx, "64", d, a, b, 1u32; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
            }

            #[inline(always)]
            unsafe fn ss_tt_n64(d: &mut [f32; 32], a: u64, b: u64) {
                wgmma_asm!(sstt, $ptx, "64", d, a, b, 1u32; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
            }

            #[inline(always)]
            unsafe fn ss_tn_n64(d: &mut [f32; 32], a: u64, b: u64, accumulate: u32) {
                wgmma_asm!(sstn, $ptx, "64", d, a, b, accumulate; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
            }
        }
    };
}

wgmma_element!(Bf16, "bf16");
wgmma_element!(F16, "f16");

//! Warp-level tensor-core products: `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32`.
//!
//! Fragment layouts (lane `l`, `g = l / 4`, `t = l % 4`), 16-bit elements packed in pairs:
//! - A (16×16, row-major) in 4 registers: `a0` = (row g, cols 2t..2t+1), `a1` = (row g+8, cols
//!   2t..), `a2` = (row g, cols 2t+8..), `a3` = (row g+8, cols 2t+8..);
//! - B (16×8, "col": element (k, n) with k fastest) in 2 registers: `b0` = (k 2t..2t+1, n g),
//!   `b1` = (k 2t+8.., n g);
//! - C/D (16×8, f32) in 4 registers: `c0, c1` = (row g, cols 2t, 2t+1), `c2, c3` = (row g+8, …).
//!
//! Precondition of every `mma` call: the whole warp is converged there (`.aligned`): callers
//! keep it out of lane-dependent branches.

use core::arch::asm;

/// A 16-bit tensor-core input type.
pub trait MmaElement {
    /// `d += a·b` for one 16×8×16 tile, f32 accumulation.
    fn mma(d: &mut [f32; 4], a: &[u32; 4], b0: u32, b1: u32);
    /// Packs two f32 into one register of this type (`lo` in the low half), rounding to nearest.
    fn pack(lo: f32, hi: f32) -> u32;

    /// The two values of a packed register, exactly, as f32 (`[low half, high half]`): the
    /// inverse of [`MmaElement::pack`] on representable values.
    fn unpack(w: u32) -> [f32; 2];

    /// The accumulator-to-operand repack: two C/D tiles (16×8 each, f32: columns 0–7 and 8–15
    /// of a 16×16 block) become the A operand of the next product (16×16, this type), in
    /// registers. Lane `l` holds C elements (row g, cols 2t, 2t+1) and (row g+8, …) of each tile,
    /// which is exactly A's `a0`/`a1` (first tile) and `a2`/`a3` (second) once rounded and packed
    /// in pairs: no shuffle is needed. (P = softmax(S) reuses S's accumulators this way.)
    #[inline(always)]
    fn acc_to_a(lo: &[f32; 4], hi: &[f32; 4]) -> [u32; 4] {
        [
            Self::pack(lo[0], lo[1]),
            Self::pack(lo[2], lo[3]),
            Self::pack(hi[0], hi[1]),
            Self::pack(hi[2], hi[3]),
        ]
    }
}

/// bfloat16 operands.
pub struct Bf16;
/// IEEE half operands.
pub struct F16;

/// One `MmaElement` impl: the PTX type name goes into both instructions.
macro_rules! mma_element {
    ($ty:ident, $ptx:literal) => {
        impl MmaElement for $ty {
            #[inline(always)]
            fn mma(d: &mut [f32; 4], a: &[u32; 4], b0: u32, b1: u32) {
                // SAFETY: register-only warp-wide instruction; all lanes of the warp execute it.
                // Not `pure`: a warp-collective instruction must not be moved into (or out of)
                // lane-dependent control flow, and without `pure` LLVM treats it as having side
                // effects, which it never sinks, hoists or merges across branches.
                unsafe {
                    asm!(
                        concat!("mma.sync.aligned.m16n8k16.row.col.f32.", $ptx, ".", $ptx, ".f32 {{{d0}, {d1}, {d2}, {d3}}}, {{{a0}, {a1}, {a2}, {a3}}}, {{{b0}, {b1}}}, {{{d0}, {d1}, {d2}, {d3}}};"),
                        d0 = inout(reg32) d[0], d1 = inout(reg32) d[1], d2 = inout(reg32) d[2], d3 = inout(reg32) d[3],
                        a0 = in(reg32) a[0], a1 = in(reg32) a[1], a2 = in(reg32) a[2], a3 = in(reg32) a[3],
                        b0 = in(reg32) b0, b1 = in(reg32) b1,
                        options(nomem, nostack),
                    )
                };
            }

            #[inline(always)]
            fn pack(lo: f32, hi: f32) -> u32 {
                let r: u32;
                // SAFETY: register conversion; the first source goes to the upper half.
                unsafe {
                    asm!(concat!("cvt.rn.", $ptx, "x2.f32 {r}, {hi}, {lo};"), r = out(reg32) r, hi = in(reg32) hi, lo = in(reg32) lo, options(pure, nomem, nostack))
                };
                r
            }

            #[inline(always)]
            fn unpack(w: u32) -> [f32; 2] {
                if $ptx.as_bytes()[0] == b'b' {
                    // bfloat16 is the upper half of an f32: a shift and a mask.
                    [f32::from_bits(w << 16), f32::from_bits(w & 0xffff_0000)]
                } else {
                    let (lo, hi): (f32, f32);
                    // SAFETY: register conversions (exact: every half is an f32).
                    unsafe {
                        asm!(
                            "{{ .reg .b16 l, h; mov.b32 {{l, h}}, {w}; cvt.f32.f16 {lo}, l; cvt.f32.f16 {hi}, h; }}",
                            w = in(reg32) w, lo = out(reg32) lo, hi = out(reg32) hi,
                            options(pure, nomem, nostack),
                        )
                    };
                    [lo, hi]
                }
            }
        }
    };
}

mma_element!(Bf16, "bf16");
mma_element!(F16, "f16");

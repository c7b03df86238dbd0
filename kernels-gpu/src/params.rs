//! Launch parameters shared by the host and the kernels.
//!
//! Every struct here is `#[repr(C)]`, built by the host crate and passed *by value* as the one
//! kernel parameter (PTX `.param .align 8 .b8 name[size]`), so both sides agree on the layout by
//! construction. Device addresses travel as `u64`; strides are in elements, not bytes.

/// Parameters of the `fill_u16` / `fill_u32` kernels: write `value` to `len` words at `ptr`.
///
/// The tests use them to poison outputs (NaN) before every launch, so an element that a kernel
/// forgot to write shows up as NaN instead of as a stale correct value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FillParams {
    /// Device address of the first word.
    pub ptr: u64,
    /// Number of words (of 2 or 4 bytes, by kernel).
    pub len: u64,
    /// The bit pattern to write (the low 16 bits for `fill_u16`).
    pub value: u32,
    /// Padding to a multiple of 8 bytes; must be 0.
    pub _pad: u32,
}

/// Threads per block of the fill kernels.
pub const FILL_THREADS: u32 = 256;

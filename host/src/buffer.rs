//! Element types and device (HBM) buffers.

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};
use half::{bf16, f16};

/// The element types the kernels support. Accumulation is f32 for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
}

impl DType {
    /// Every supported dtype, in a fixed order.
    pub const ALL: [DType; 3] = [DType::F16, DType::BF16, DType::F32];

    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
        }
    }

    /// The lower-case name used in reports and on command lines (`f16`, `bf16`, `f32`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }

    /// Unit roundoff of the storage format (half an ulp at 1.0): 2⁻¹¹, 2⁻⁸, 2⁻²⁴.
    pub const fn unit_roundoff(self) -> f64 {
        match self {
            DType::F16 => 1.0 / 2048.0,
            DType::BF16 => 1.0 / 256.0,
            DType::F32 => 1.0 / 16_777_216.0,
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown dtype `{s}`: expected one of f16, bf16, f32"))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// A storage element type: `f32`, [`f16`] or [`bf16`].
pub trait Element:
    sealed::Sealed + DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + std::fmt::Debug + 'static
{
    /// The runtime tag of this type.
    const DTYPE: DType;
    /// The bit pattern of a quiet NaN in this format, widened to 32 bits.
    const NAN_BITS: u32;
    /// Widen to f32 (exact).
    fn to_f32(self) -> f32;
    /// Round from f32 to this format (round to nearest even).
    fn from_f32(x: f32) -> Self;
    /// Round from f64 to this format.
    fn from_f64(x: f64) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    const NAN_BITS: u32 = 0x7fc0_0000;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    const NAN_BITS: u32 = 0x7e00;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
    fn from_f64(x: f64) -> Self {
        f16::from_f64(x)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    const NAN_BITS: u32 = 0x7fc0;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn from_f64(x: f64) -> Self {
        bf16::from_f64(x)
    }
}

/// A buffer of `T` in device memory (HBM), owned; freed on drop.
///
/// Made by [`crate::Device::alloc`], [`crate::Device::alloc_zeros`] or [`crate::Device::upload`].
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    /// The allocation; one element longer than `len` only when `len == 0`.
    pub(crate) slice: CudaSlice<T>,
    pub(crate) len: usize,
}

impl<T> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The device address of the first element, as the kernels' parameter structs take it.
    pub fn device_address(&self) -> u64 {
        let (ptr, _sync) = self.slice.device_ptr(self.slice.stream());
        ptr
    }
}

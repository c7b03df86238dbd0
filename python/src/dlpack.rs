//! A small DLPack reader: any object with `__dlpack__` / `__dlpack_device__` (PyTorch tensors,
//! NumPy, CuPy and JAX arrays) gives its data pointer, device, dtype, shape and strides, without
//! a copy. Both capsule kinds are read: `dltensor_versioned` (DLPack ≥ 1.0, asked for with
//! `max_version=(1, 0)`, which carries a read-only flag) and the older `dltensor`. A capsule that
//! its producer has already exported is read too ([`import`]).
//!
//! The capsule is consumed as the DLPack protocol says: renamed `used_dltensor[_versioned]` so
//! that its destructor leaves it alone, and the producer's deleter called when the [`Tensor`]
//! is dropped.

use std::ffi::{CStr, c_void};

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use pyo3::{ffi, intern};

/// `DLDeviceType` values this module handles.
pub const DL_CPU: i32 = 1;
/// CUDA device memory.
pub const DL_CUDA: i32 = 2;

/// `DLDataTypeCode` values.
const DL_INT: u8 = 0;
const DL_UINT: u8 = 1;
const DL_FLOAT: u8 = 2;
const DL_BFLOAT: u8 = 4;

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const FLAG_READ_ONLY: u64 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// The element types the bindings read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    /// float16.
    F16,
    /// bfloat16.
    BF16,
    /// float32.
    F32,
    /// int32.
    I32,
    /// int64.
    I64,
    /// Anything else, by its DLPack code and bits.
    Other(u8, u8),
}

impl Dtype {
    fn of(t: DLDataType) -> Dtype {
        match (t.code, t.bits, t.lanes) {
            (DL_FLOAT, 16, 1) => Dtype::F16,
            (DL_BFLOAT, 16, 1) => Dtype::BF16,
            (DL_FLOAT, 32, 1) => Dtype::F32,
            (DL_INT, 32, 1) => Dtype::I32,
            (DL_INT, 64, 1) => Dtype::I64,
            (code, bits, _) => Dtype::Other(code, bits),
        }
    }

    /// The name NumPy and PyTorch use.
    pub fn name(self) -> String {
        match self {
            Dtype::F16 => "float16".into(),
            Dtype::BF16 => "bfloat16".into(),
            Dtype::F32 => "float32".into(),
            Dtype::I32 => "int32".into(),
            Dtype::I64 => "int64".into(),
            Dtype::Other(code, bits) => {
                let kind = match code {
                    DL_INT => "int",
                    DL_UINT => "uint",
                    DL_FLOAT => "float",
                    DL_BFLOAT => "bfloat",
                    5 => "bool",
                    6 => "complex",
                    _ => "dlpack-code-",
                };
                format!("{kind}{bits}")
            }
        }
    }
}

/// Which capsule kind the tensor came in, for its deleter.
enum Managed {
    Legacy(*mut DLManagedTensor),
    Versioned(*mut DLManagedTensorVersioned),
}

/// A tensor imported through DLPack; its producer's deleter runs on drop.
pub struct Tensor {
    managed: Managed,
    /// The argument's name, for messages.
    pub name: &'static str,
    /// Address of the first element (data + byte_offset).
    pub address: u64,
    /// (device type, device id).
    pub device: (i32, i32),
    /// The element type.
    pub dtype: Dtype,
    /// Extents.
    pub shape: Vec<usize>,
    /// Strides in elements (DLPack's; negative strides are refused at import).
    pub strides: Vec<usize>,
    /// Whether the producer marked it read-only (versioned capsules only).
    pub read_only: bool,
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: the pointers came from a consumed capsule; the deleter is called once, as the
        // protocol says the consumer must.
        unsafe {
            match self.managed {
                Managed::Legacy(m) => {
                    if let Some(d) = (*m).deleter {
                        d(m)
                    }
                }
                Managed::Versioned(m) => {
                    if let Some(d) = (*m).deleter {
                        d(m)
                    }
                }
            }
        }
    }
}

/// A device in words: `cpu`, `cuda:1`, or DLPack's code.
pub fn device_name((kind, id): (i32, i32)) -> String {
    match kind {
        DL_CPU => "cpu".to_string(),
        DL_CUDA => format!("cuda:{id}"),
        3 => "pinned host memory (kDLCUDAHost)".to_string(),
        13 => format!("CUDA managed memory (kDLCUDAManaged, device {id})"),
        other => format!("DLPack device type {other}"),
    }
}

/// `obj.__dlpack_device__()`.
pub fn device_of(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<(i32, i32)> {
    let py = obj.py();
    if !obj.hasattr(intern!(py, "__dlpack_device__"))? {
        return Err(PyTypeError::new_err(format!(
            "{name} ({}) does not support DLPack (no __dlpack_device__): pass a PyTorch tensor or a \
             NumPy, CuPy or JAX array",
            obj.get_type().name()?
        )));
    }
    obj.call_method0(intern!(py, "__dlpack_device__"))?.extract()
}

/// Imports `obj` through DLPack. `stream` is the consumer's CUDA stream handle for CUDA memory
/// (the producer orders its pending work before it; 0, the legacy default stream, is passed as
/// DLPack's 1); ignored on the CPU.
///
/// `obj` may also be a DLPack capsule that its producer has already exported (what
/// `torch.utils.dlpack.to_dlpack` returns; the PyTorch layer passes its tensors so, since the
/// work runs on PyTorch's current stream and `__dlpack__`'s stream handshake would be a no-op
/// that costs microseconds per tensor): it is consumed as it is, with no handshake, so the
/// producer's work must already be ordered before `stream`.
pub fn import(obj: &Bound<'_, PyAny>, name: &'static str, stream: Option<usize>) -> PyResult<Tensor> {
    let py = obj.py();
    if obj.is_exact_instance_of::<PyCapsule>() {
        // SAFETY: a capsule of a known name holds the struct the DLPack protocol says (its name
        // is checked before it is read); it stays valid until its deleter is called (on drop of
        // the Tensor).
        return unsafe { consume(obj, name, None) };
    }
    let device = device_of(obj, name)?;
    let versioned_kwargs = PyDict::new(py);
    let stream = (device.0 == DL_CUDA).then(|| match stream.unwrap_or(0) {
        0 => 1,
        s => s,
    });
    if let Some(s) = stream {
        versioned_kwargs.set_item(intern!(py, "stream"), s)?;
    }
    versioned_kwargs.set_item(intern!(py, "max_version"), PyTuple::new(py, [1u32, 0])?)?;
    let method = obj.getattr(intern!(py, "__dlpack__"))?;
    let capsule = match method.call((), Some(&versioned_kwargs)) {
        Ok(c) => c,
        // Producers before DLPack 1.0 know no max_version.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            let kwargs = PyDict::new(py);
            if let Some(s) = stream {
                kwargs.set_item(intern!(py, "stream"), s)?;
            }
            method.call((), Some(&kwargs))?
        }
        Err(e) => return Err(e),
    };
    // SAFETY: as above, for the capsule `__dlpack__` returned.
    unsafe { consume(&capsule, name, Some(device)) }
}

const VERSIONED: &CStr = c"dltensor_versioned";
const LEGACY: &CStr = c"dltensor";
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";
const USED_LEGACY: &CStr = c"used_dltensor";

/// Reads and consumes a DLPack capsule; `device` is what `__dlpack_device__` said (checked
/// against the capsule's), if it was asked.
///
/// # Safety
/// `capsule` came from `__dlpack__` or another DLPack producer: a capsule with one of DLPack's
/// names holds the struct the protocol says.
unsafe fn consume(
    capsule: &Bound<'_, PyAny>,
    name: &'static str,
    device: Option<(i32, i32)>,
) -> PyResult<Tensor> {
    let ptr = capsule.as_ptr();
    // SAFETY: FFI calls on a live object; names are NUL-terminated.
    unsafe {
        if ffi::PyCapsule_IsValid(ptr, VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(ptr, VERSIONED.as_ptr()) as *mut DLManagedTensorVersioned;
            if m.is_null() {
                return Err(PyErr::fetch(capsule.py()));
            }
            if (*m).version.major != 1 {
                return Err(PyBufferError::new_err(format!(
                    "{name}: DLPack version {}.{} is not supported (1.x is)",
                    (*m).version.major,
                    (*m).version.minor
                )));
            }
            if ffi::PyCapsule_SetName(ptr, USED_VERSIONED.as_ptr()) != 0 {
                return Err(PyErr::fetch(capsule.py()));
            }
            let read_only = (*m).flags & FLAG_READ_ONLY != 0;
            return describe(Managed::Versioned(m), &(*m).dl_tensor, name, device, read_only);
        }
        if ffi::PyCapsule_IsValid(ptr, LEGACY.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(ptr, LEGACY.as_ptr()) as *mut DLManagedTensor;
            if m.is_null() {
                return Err(PyErr::fetch(capsule.py()));
            }
            if ffi::PyCapsule_SetName(ptr, USED_LEGACY.as_ptr()) != 0 {
                return Err(PyErr::fetch(capsule.py()));
            }
            return describe(Managed::Legacy(m), &(*m).dl_tensor, name, device, false);
        }
    }
    if device.is_none() {
        return Err(PyTypeError::new_err(format!(
            "{name} is a capsule but not an unused DLPack one (`dltensor` or `dltensor_versioned`; \
             a DLPack capsule can be consumed once)"
        )));
    }
    Err(PyTypeError::new_err(format!(
        "{name}.__dlpack__() did not return a DLPack capsule (`dltensor` or `dltensor_versioned`)"
    )))
}

/// The tensor's description; from here on the Tensor owns the managed struct (its drop calls
/// the deleter, also when this refuses the tensor).
///
/// # Safety
/// `t` is the managed struct's tensor, valid until the deleter runs.
unsafe fn describe(
    managed: Managed,
    t: &DLTensor,
    name: &'static str,
    device: Option<(i32, i32)>,
    read_only: bool,
) -> PyResult<Tensor> {
    let ndim = t.ndim.max(0) as usize;
    let mut tensor = Tensor {
        managed,
        name,
        address: (t.data as u64).wrapping_add(t.byte_offset),
        device: (t.device.device_type, t.device.device_id),
        dtype: Dtype::of(t.dtype),
        shape: Vec::with_capacity(ndim),
        strides: Vec::with_capacity(ndim),
        read_only,
    };
    if let Some(device) = device
        && tensor.device != device
    {
        return Err(PyValueError::new_err(format!(
            "{name}: __dlpack_device__ says {} but the capsule says {}",
            device_name(device),
            device_name(tensor.device)
        )));
    }
    // SAFETY: DLPack: `shape` has `ndim` entries, `strides` too or is null (compact row-major).
    let (shape, strides) = unsafe {
        (
            if ndim == 0 { &[][..] } else { std::slice::from_raw_parts(t.shape, ndim) },
            if t.strides.is_null() || ndim == 0 {
                None
            } else {
                Some(std::slice::from_raw_parts(t.strides, ndim))
            },
        )
    };
    for &n in shape {
        tensor.shape.push(
            usize::try_from(n).map_err(|_| PyValueError::new_err(format!("{name} has a negative extent")))?,
        );
    }
    match strides {
        Some(s) => {
            for (i, &x) in s.iter().enumerate() {
                match usize::try_from(x) {
                    Ok(x) => tensor.strides.push(x),
                    // A negative stride of an extent-1 dimension never moves: 0 says the same.
                    Err(_) if tensor.shape[i] <= 1 => tensor.strides.push(0),
                    Err(_) => {
                        return Err(PyValueError::new_err(format!(
                            "{name} has a negative stride ({x} along dimension {i}): flashattn reads \
                             tensors in increasing address order; pass a copy"
                        )));
                    }
                }
            }
        }
        None => {
            let mut acc = 1usize;
            let mut rev = Vec::with_capacity(ndim);
            for &n in tensor.shape.iter().rev() {
                rev.push(acc);
                acc = acc.saturating_mul(n);
            }
            tensor.strides.extend(rev.into_iter().rev());
        }
    }
    Ok(tensor)
}

impl Tensor {
    /// Elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the elements are dense in row-major order (strides of extent-1 dimensions
    /// ignored).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n > 1 && s != expected {
                return false;
            }
            expected = expected.saturating_mul(n);
        }
        true
    }

    /// The elements of a host integer tensor, in row-major order, as `u32` (each checked).
    pub fn host_u32(&self) -> PyResult<Vec<u32>> {
        let name = self.name;
        if self.device.0 != DL_CPU {
            return Err(PyValueError::new_err(format!(
                "{name} must be in host memory here (it is on {}): pass a CPU copy",
                device_name(self.device)
            )));
        }
        let numel = self.numel();
        let mut out = Vec::with_capacity(numel);
        let mut index = vec![0usize; self.shape.len()];
        for _ in 0..numel {
            let offset: usize = index.iter().zip(&self.strides).map(|(i, s)| i * s).sum();
            // SAFETY: a host tensor of this dtype, shape and strides: every such offset is inside.
            let value: i64 = unsafe {
                match self.dtype {
                    Dtype::I32 => *(self.address as *const i32).add(offset) as i64,
                    Dtype::I64 => *(self.address as *const i64).add(offset),
                    other => {
                        return Err(PyTypeError::new_err(format!(
                            "{name} must be int32 (or int64), not {}",
                            other.name()
                        )));
                    }
                }
            };
            out.push(
                u32::try_from(value)
                    .map_err(|_| PyValueError::new_err(format!("{name} holds {value}, outside 0..2^32")))?,
            );
            // Next row-major index.
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < self.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(out)
    }

    /// The elements of a host float32 vector.
    pub fn host_f32(&self) -> PyResult<Vec<f32>> {
        let name = self.name;
        if self.device.0 != DL_CPU || self.dtype != Dtype::F32 || self.shape.len() != 1 {
            return Err(PyValueError::new_err(format!(
                "{name} must be a 1-D float32 tensor in host memory here, not a {}-D {} one on {}",
                self.shape.len(),
                self.dtype.name(),
                device_name(self.device)
            )));
        }
        // SAFETY: a host float32 vector with this extent and stride.
        Ok((0..self.shape[0])
            .map(|i| unsafe { *(self.address as *const f32).add(i * self.strides[0]) })
            .collect())
    }
}

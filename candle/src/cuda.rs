//! CUDA tensors: flashattn's kernels on candle's memory, queued on candle's stream.
//!
//! candle-core 0.11 and flashattn share cudarc 0.19 and the device's primary context, so
//! candle's slices are passed by device address ([`Device::attention_external`]) and the work
//! is queued on the candle device's own stream: ordered after the work that made the inputs and
//! before any that reads the outputs, as candle's own kernels are. The outputs are allocated by
//! candle, on that stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle::backend::BackendStorage;
use candle::cuda_backend::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, DeviceRepr, ValidAsZeroBits,
};
use candle::cuda_backend::{CudaDType, CudaDevice};
use candle::op::BackpropOp;
use candle::{CudaStorage, Shape, Storage, Tensor};
use flashattn::external::{BackwardTensors, ExternalBuffer, ExternalTensor, ForwardTensors};
use flashattn::{DType, Device, Layout};
use half::{bf16, f16};

use crate::op::{Attn, contiguous, layout, lse_len, wrap};

/// One flashattn [`Device`] per GPU ordinal, opened on first use and kept (with its loaded
/// kernels).
fn device(ordinal: usize) -> candle::Result<Arc<Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    let mut devices = DEVICES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devices.get(&ordinal) {
        return Ok(d.clone());
    }
    // (`open_device` leaves the thread's current context as candle had it.)
    let d = Arc::new(flashattn::external::open_device(ordinal).map_err(wrap)?);
    devices.insert(ordinal, d.clone());
    Ok(d)
}

/// flashattn's dtype of a candle dtype it runs.
fn dtype(dt: candle::DType) -> candle::Result<DType> {
    match dt {
        candle::DType::F16 => Ok(DType::F16),
        candle::DType::BF16 => Ok(DType::BF16),
        candle::DType::F32 => Ok(DType::F32),
        dt => candle::bail!("flash-attn runs f16, bf16 and f32 ({dt:?})"),
    }
}

/// A tensor's view from its layout's start offset on, with flashattn's layout.
fn view<'a, T: CudaDType + DeviceRepr>(
    s: &'a CudaStorage,
    l: &candle::Layout,
    layout: Layout,
) -> candle::Result<(CudaView<'a, T>, Layout)> {
    let slice = s.as_cuda_slice::<T>()?;
    if l.start_offset() > slice.len() {
        candle::bail!("a layout starts at {} past its storage of {}", l.start_offset(), slice.len())
    }
    Ok((slice.slice(l.start_offset()..), layout))
}

/// An input's address for a call on `stream` (the guard records the read when dropped).
fn input<'a, T>(
    v: &'a (CudaView<'a, T>, Layout),
    stream: &'a CudaStream,
) -> (ExternalTensor, impl Drop + 'a) {
    let (address, guard) = v.0.device_ptr(stream);
    (ExternalTensor { address, len: v.0.len(), layout: v.1 }, guard)
}

/// An output's address (the guard records the write when dropped).
fn output<'a, T>(
    s: &'a mut CudaSlice<T>,
    layout: Layout,
    stream: &'a CudaStream,
) -> (ExternalTensor, impl Drop + 'a) {
    let len = s.len();
    let (address, guard) = s.device_ptr_mut(stream);
    (ExternalTensor { address, len, layout }, guard)
}

/// Calls `$f::<T>` with the element type of `$dt`.
macro_rules! with_dtype {
    ($dt:expr, $f:ident, $($arg:expr),*) => {
        match $dt {
            DType::F16 => $f::<f16>($($arg),*),
            DType::BF16 => $f::<bf16>($($arg),*),
            DType::F32 => $f::<f32>($($arg),*),
        }
    };
}

impl Attn {
    /// The forward on CUDA tensors: output storage and shape, and the log-sum-exp if asked.
    pub fn cuda_forward(
        &self,
        q: (&CudaStorage, &candle::Layout),
        k: (&CudaStorage, &candle::Layout),
        v: (&CudaStorage, &candle::Layout),
        want_lse: bool,
    ) -> candle::Result<(CudaStorage, Shape, Option<CudaSlice<f32>>)> {
        let dt = dtype(q.0.dtype())?;
        for (name, s) in [("k", k.0), ("v", v.0)] {
            if s.dtype() != q.0.dtype() {
                candle::bail!("flash-attn: {name} is {:?}, q is {:?}", s.dtype(), q.0.dtype())
            }
        }
        let (out, lse) = with_dtype!(dt, forward, self, dt, [q, k, v], want_lse)?;
        Ok((out, q.1.shape().clone(), lse))
    }

    /// The backward on CUDA tensors (Q, K, V, O, dO), with the forward's log-sum-exp or, without
    /// it, a forward run again for it.
    pub fn cuda_backward(
        &self,
        t: &[&Tensor; 5],
        lse: Option<&CudaSlice<f32>>,
    ) -> candle::Result<[Tensor; 3]> {
        let guards = t.map(|t| t.storage_and_layout());
        let cuda = |i: usize| match &*guards[i].0 {
            Storage::Cuda(s) => Ok((s, guards[i].1)),
            _ => candle::bail!("flash-attn backward: the tensors are on different devices"),
        };
        let s = [cuda(0)?, cuda(1)?, cuda(2)?, cuda(3)?, cuda(4)?];
        let dt = dtype(s[0].0.dtype())?;
        if let Some(other) = s.iter().find(|x| x.0.dtype() != s[0].0.dtype()) {
            candle::bail!("flash-attn backward: a tensor is {:?}, q is {:?}", other.0.dtype(), s[0].0.dtype())
        }
        let recomputed;
        let lse = match lse {
            Some(lse) => lse,
            None => {
                recomputed = self.cuda_forward(s[0], s[1], s[2], true)?.2;
                match &recomputed {
                    Some(lse) => lse,
                    None => candle::bail!("flash-attn backward: the forward gave no log-sum-exp"),
                }
            }
        };
        let [dq, dk, dv] = with_dtype!(dt, backward, self, dt, s, lse)?;
        let tensor = |g: CudaStorage, like: &Tensor| {
            Tensor::from_storage(Storage::Cuda(g), like.shape().clone(), BackpropOp::none(), false)
        };
        Ok([tensor(dq, t[0]), tensor(dk, t[1]), tensor(dv, t[2])])
    }
}

/// The forward on one element type.
fn forward<T: CudaDType + DeviceRepr + ValidAsZeroBits>(
    op: &Attn,
    dt: DType,
    [q, k, v]: [(&CudaStorage, &candle::Layout); 3],
    want_lse: bool,
) -> candle::Result<(CudaStorage, Option<CudaSlice<f32>>)> {
    let [lq, lk, lv] = op.params.layouts(q.1, k.1, v.1)?;
    let opts = op.params.options_for(&lk);
    let dev: &CudaDevice = q.0.device();
    let stream = dev.cuda_stream();
    let fa = device(stream.context().ordinal())?;
    let (vq, vk, vv) = (view::<T>(q.0, q.1, lq)?, view::<T>(k.0, k.1, lk)?, view::<T>(v.0, v.1, lv)?);
    let lo = contiguous(&lq);
    let mut out = dev.alloc_zeros::<T>(lo.required_len().unwrap_or(0))?;
    let mut lse = if want_lse { Some(dev.alloc_zeros::<f32>(lse_len(&lq))?) } else { None };
    {
        let (q, _gq) = input(&vq, &stream);
        let (k, _gk) = input(&vk, &stream);
        let (v, _gv) = input(&vv, &stream);
        let (out, _go) = output(&mut out, lo, &stream);
        let lse_ptr = lse.as_mut().map(|l| {
            let len = l.len();
            let (address, guard) = l.device_ptr_mut(&stream);
            (ExternalBuffer { address, len }, guard)
        });
        let tensors = ForwardTensors { q, k, v, out, lse: lse_ptr.as_ref().map(|(b, _)| *b) };
        // SAFETY: every address is a live allocation of candle's on `fa`'s device, of `len`
        // elements from there (views of the storages from the layouts' offsets; the outputs
        // just allocated), borrowed for the call and kept alive by candle until the work has
        // run (cudarc frees in the stream's order, after the events these guards record). The
        // work is queued on candle's stream, after the work that wrote the inputs and before
        // any that reads the outputs; the outputs are fresh, so nothing else touches them.
        // flashattn checks the device, the stream's context, alignments and overlaps.
        unsafe { fa.attention_external(stream.cu_stream(), dt, &tensors, &opts) }.map_err(wrap)?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), lse))
}

/// The backward on one element type: dQ, dK, dV (contiguous, shaped like Q, K, V).
fn backward<T: CudaDType + DeviceRepr + ValidAsZeroBits>(
    op: &Attn,
    dt: DType,
    s: [(&CudaStorage, &candle::Layout); 5],
    lse: &CudaSlice<f32>,
) -> candle::Result<[CudaStorage; 3]> {
    let [q, k, v, o, d_o] = s;
    let [lq, lk, lv] = op.params.layouts(q.1, k.1, v.1)?;
    let varlen = op.params.varlen.is_some();
    let (lo, ldo) = (layout("out", o.1, varlen)?, layout("grad", d_o.1, varlen)?);
    let opts = op.params.options_for(&lk);
    let dev: &CudaDevice = q.0.device();
    let stream = dev.cuda_stream();
    let fa = device(stream.context().ordinal())?;
    let views = [
        view::<T>(q.0, q.1, lq)?,
        view::<T>(k.0, k.1, lk)?,
        view::<T>(v.0, v.1, lv)?,
        view::<T>(o.0, o.1, lo)?,
        view::<T>(d_o.0, d_o.1, ldo)?,
    ];
    let (gq, gk, gv) = (contiguous(&lq), contiguous(&lk), contiguous(&lv));
    let alloc = |l: &Layout| dev.alloc_zeros::<T>(l.required_len().unwrap_or(0));
    let (mut dq, mut dk, mut dv) = (alloc(&gq)?, alloc(&gk)?, alloc(&gv)?);
    {
        let (q, _g0) = input(&views[0], &stream);
        let (k, _g1) = input(&views[1], &stream);
        let (v, _g2) = input(&views[2], &stream);
        let (o, _g3) = input(&views[3], &stream);
        let (d_o, _g4) = input(&views[4], &stream);
        let (lse_address, _g5) = lse.device_ptr(&stream);
        let (dq, _g6) = output(&mut dq, gq, &stream);
        let (dk, _g7) = output(&mut dk, gk, &stream);
        let (dv, _g8) = output(&mut dv, gv, &stream);
        let lse = ExternalBuffer { address: lse_address, len: lse.len() };
        let tensors = BackwardTensors { q, k, v, o, lse, d_o, dq, dk, dv };
        // SAFETY: as in `forward`: candle's live allocations on `fa`'s device (the
        // log-sum-exp is the forward's, kept by the op), the work queued on candle's stream,
        // the outputs fresh.
        unsafe { fa.attention_backward_external(stream.cu_stream(), dt, &tensors, &opts) }.map_err(wrap)?;
    }
    Ok([dq, dk, dv].map(|g| CudaStorage::wrap_cuda_slice(g, dev.clone())))
}

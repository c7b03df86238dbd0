//! Attention on memory and streams that someone else owns: PyTorch's caching allocator and its
//! current stream (the Python package), candle's storage, any framework that hands out raw
//! addresses.
//!
//! The safe API ([`Device::attention`]) takes [`crate::DeviceBuffer`]s, whose lifetimes and
//! borrows the compiler checks and whose work is ordered on the [`Device`]'s own stream. Here the
//! tensors are addresses ([`ExternalTensor`]: address, element count, [`Layout`]) and the work is
//! queued on the caller's stream, in the device's *primary* context, the one the CUDA runtime
//! (and so PyTorch) uses. The calls are `unsafe`: what the borrow checker proved, the caller
//! promises (each function's `# Safety`). Everything that can be checked is, before anything is
//! queued or written, with the safe API's typed errors:
//! - the safe API's validation, unchanged ([`Problem::new`], the log-sum-exp length, the
//!   backward's shapes, the planner's refusals);
//! - addresses: not null where the layout addresses elements, aligned as the kernels read
//!   ([`required_alignment`]), extents that do not overflow;
//! - no output shares memory with another tensor of the call (checked on byte extents, so
//!   outputs interleaved with other tensors are refused even where no element is shared);
//! - on the GPU, that each tensor is memory of the call's device, and that the stream belongs to
//!   its primary context.
//!
//! The same tensors in host memory run the CPU implementation ([`cpu_attention`],
//! [`cpu_attention_backward`], [`cpu_attention_with_kvcache`]): the Python package's path for
//! NumPy arrays and CPU tensors.
//!
//! One difference from the safe API: `Method::Standard` (cuBLAS, whose handle is bound to the
//! device's own stream) does not run on a caller's stream. Asking for it is
//! [`InvalidInput::ExternalMethod`]; where `Method::Auto` would pick it (f32), the CUDA-core flash
//! kernel runs instead and the plan says so.

use std::ptr::NonNull;
use std::sync::Arc;

/// The driver's stream handle, as the GPU entry points take it (null: the legacy default
/// stream).
pub use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaStream, sys};
use half::{bf16, f16};

use crate::backward::BwdIo;
use crate::buffer::{DType, Element};
use crate::cpu::{Gradients, HostTensor, HostTensorMut};
use crate::device::{Device, DeviceProps};
use crate::error::{DriverContext, InvalidInput, Result};
use crate::plan::{Plan, TC_STRIDE_ALIGN};
use crate::problem::{AttentionOptions, Layout, Method, Problem};

/// A tensor in memory the caller owns, given by address: device memory for the GPU entry points,
/// host memory for the CPU ones. Its dtype is the call's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalTensor {
    /// Address of element `(0, 0, 0, 0)`.
    pub address: u64,
    /// Elements of the call's dtype that may be addressed from `address` on (at least
    /// [`Layout::required_len`]; checked like a buffer's length).
    pub len: usize,
    /// Shape and strides, in elements.
    pub layout: Layout,
}

/// An f32 buffer in memory the caller owns (the log-sum-exp), given by address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalBuffer {
    /// Address of the first element.
    pub address: u64,
    /// Elements (f32) that may be addressed from `address` on.
    pub len: usize,
}

/// The tensors of a forward call: Q, K, V, the output O and optionally the log-sum-exp (f32,
/// laid out as [`Problem::lse_index`] says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardTensors {
    /// Queries, `(batch, seqlen_q, heads, d)`.
    pub q: ExternalTensor,
    /// Keys, `(batch, seqlen_k, heads_kv, d)` (a cache or page pool for
    /// [`cpu_attention_with_kvcache`]).
    pub k: ExternalTensor,
    /// Values, laid out like K's shape.
    pub v: ExternalTensor,
    /// The output, Q's shape (written).
    pub out: ExternalTensor,
    /// The per-row log-sum-exp (written), if wanted.
    pub lse: Option<ExternalBuffer>,
}

/// The tensors of a backward call: the forward's inputs, output and log-sum-exp, the upstream
/// gradient dO (O's shape), and the gradients dQ, dK, dV (written; the shapes of Q, K, V).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardTensors {
    /// Queries.
    pub q: ExternalTensor,
    /// Keys.
    pub k: ExternalTensor,
    /// Values.
    pub v: ExternalTensor,
    /// The forward's output.
    pub o: ExternalTensor,
    /// The forward's log-sum-exp.
    pub lse: ExternalBuffer,
    /// ∂L/∂O.
    pub d_o: ExternalTensor,
    /// ∂L/∂Q (written).
    pub dq: ExternalTensor,
    /// ∂L/∂K (written).
    pub dk: ExternalTensor,
    /// ∂L/∂V (written).
    pub dv: ExternalTensor,
}

/// A training forward's residuals in memory the caller owns (what [`crate::SavedForBackward`]
/// holds for the safe API): O's residual `o_lo` (the call's dtype, O's layout) and the rows'
/// statistics `rows` (f32, two per log-sum-exp row). [`Device::attention_for_backward_external`]
/// writes them where its plan says so ([`Plan::residuals`]);
/// [`Device::attention_backward_from_residuals_external`] reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalResiduals {
    /// O's residual, laid out as O.
    pub o_lo: ExternalTensor,
    /// Each row's probability offset and sum.
    pub rows: ExternalBuffer,
}

/// The bytes a tensor's address must be a multiple of on the GPU: 16 where the tensor-core
/// kernels may copy its rows 16 bytes at a time (16-bit elements, a head dim and every stride of
/// a dimension longer than 1 multiples of [`TC_STRIDE_ALIGN`] elements; the planner assumes such
/// rows start 16-byte aligned, as every allocation does), else one element.
pub fn required_alignment(dtype: DType, layout: &Layout) -> u64 {
    let rows_of_chunks = layout.head_dim % TC_STRIDE_ALIGN == 0
        && layout.moving_strides().all(|(_, s)| s % TC_STRIDE_ALIGN == 0);
    if dtype.size_bytes() == 2 && rows_of_chunks { 16 } else { dtype.size_bytes() as u64 }
}

/// One tensor's bytes, for the address checks.
#[derive(Clone, Copy, Debug)]
struct Extent {
    name: &'static str,
    start: u64,
    /// Bytes the layout addresses (0: the tensor is empty and its address is never used).
    bytes: u64,
    /// Elements the layout addresses.
    elems: usize,
    output: bool,
}

/// A tensor's extent: its layout's elements (the buffer's length was checked to hold them), not
/// null, aligned to `align`, not past the end of the address space.
fn extent(
    name: &'static str,
    address: u64,
    elems: Option<usize>,
    elem_bytes: usize,
    align: u64,
    output: bool,
) -> Result<Extent, InvalidInput> {
    let overflow = InvalidInput::LayoutOverflow { tensor: name };
    let elems = elems.ok_or(overflow.clone())?;
    let bytes = (elems as u64).checked_mul(elem_bytes as u64).ok_or(overflow.clone())?;
    if bytes > 0 {
        if address == 0 {
            return Err(InvalidInput::NullAddress { tensor: name, needed: elems });
        }
        if address % align != 0 {
            return Err(InvalidInput::Misaligned { tensor: name, address, align });
        }
        address.checked_add(bytes).ok_or(overflow)?;
    }
    Ok(Extent { name, start: address, bytes, elems, output })
}

/// A tensor's extent ([`extent`]), with a buffer length checked against its layout.
fn tensor_extent(
    name: &'static str,
    t: &ExternalTensor,
    dtype: DType,
    on_gpu: bool,
    output: bool,
) -> Result<Extent, InvalidInput> {
    let elems = t.layout.required_len();
    if let Some(needed) = elems
        && needed > t.len
    {
        return Err(InvalidInput::BufferTooSmall { tensor: name, needed, len: t.len });
    }
    let align = if on_gpu { required_alignment(dtype, &t.layout) } else { dtype.size_bytes() as u64 };
    extent(name, t.address, elems, dtype.size_bytes(), align, output)
}

/// The log-sum-exp's extent: the rows of `q`'s layout (what [`Problem::lse_len`] counts).
fn lse_extent(lse: &ExternalBuffer, q: &Layout, output: bool) -> Result<Extent, InvalidInput> {
    let rows = q.batch.checked_mul(q.heads).and_then(|x| x.checked_mul(q.seqlen));
    let rows = rows.ok_or(InvalidInput::LayoutOverflow { tensor: "lse" })?;
    if rows > lse.len {
        return Err(InvalidInput::LseTooSmall { needed: rows, len: lse.len });
    }
    extent("lse", lse.address, Some(rows), 4, 4, output)
}

/// Refuses an output whose bytes meet another tensor's.
fn check_disjoint(extents: &[Extent]) -> Result<(), InvalidInput> {
    for (i, a) in extents.iter().enumerate() {
        if !a.output || a.bytes == 0 {
            continue;
        }
        let other = extents.iter().enumerate().find(|&(j, b)| {
            j != i && b.bytes > 0 && a.start < b.start + b.bytes && b.start < a.start + a.bytes
        });
        if let Some((_, b)) = other {
            let end = a.start + a.bytes;
            return Err(InvalidInput::OutputOverlap { output: a.name, other: b.name, start: a.start, end });
        }
    }
    Ok(())
}

/// A forward call's extents (outputs: O and the log-sum-exp).
fn forward_extents(dtype: DType, t: &ForwardTensors, on_gpu: bool) -> Result<Vec<Extent>, InvalidInput> {
    let mut extents = vec![
        tensor_extent("q", &t.q, dtype, on_gpu, false)?,
        tensor_extent("k", &t.k, dtype, on_gpu, false)?,
        tensor_extent("v", &t.v, dtype, on_gpu, false)?,
        tensor_extent("out", &t.out, dtype, on_gpu, true)?,
    ];
    if let Some(lse) = &t.lse {
        extents.push(lse_extent(lse, &t.q.layout, true)?);
    }
    check_disjoint(&extents)?;
    Ok(extents)
}

/// A backward call's extents (outputs: dQ, dK, dV).
fn backward_extents(dtype: DType, t: &BackwardTensors, on_gpu: bool) -> Result<Vec<Extent>, InvalidInput> {
    let mut extents = Vec::with_capacity(9);
    for (name, x) in [("q", &t.q), ("k", &t.k), ("v", &t.v), ("o", &t.o), ("d_o", &t.d_o)] {
        extents.push(tensor_extent(name, x, dtype, on_gpu, false)?);
    }
    extents.push(lse_extent(&t.lse, &t.q.layout, false)?);
    for (name, x) in [("dq", &t.dq), ("dk", &t.dk), ("dv", &t.dv)] {
        extents.push(tensor_extent(name, x, dtype, on_gpu, true)?);
    }
    check_disjoint(&extents)?;
    Ok(extents)
}

/// The residuals' extents beside a call's own (inputs of a backward, outputs of a forward): O's
/// residual must be laid out as `o` (the kernels address it with O's strides), the rows hold two
/// f32 per log-sum-exp row.
fn residual_extents(
    dtype: DType,
    r: &ExternalResiduals,
    o: &ExternalTensor,
    lse_rows: usize,
    output: bool,
) -> Result<[Extent; 2], InvalidInput> {
    if r.o_lo.layout != o.layout {
        return Err(InvalidInput::ResidualLayout {
            expected: Box::new(o.layout),
            actual: Box::new(r.o_lo.layout),
        });
    }
    let rows = lse_rows.checked_mul(2).ok_or(InvalidInput::LayoutOverflow { tensor: "rows" })?;
    if rows > r.rows.len {
        return Err(InvalidInput::SavedTooSmall { what: "row statistics", needed: rows, len: r.rows.len });
    }
    Ok([
        tensor_extent("o_lo", &r.o_lo, dtype, true, output)?,
        extent("rows", r.rows.address, Some(rows), 4, 8, output)?,
    ])
}

/// [`plan_attention`] for a training forward ([`crate::plan_for_backward`]) that writes its
/// residuals to `r` where its plan says so ([`Plan::residuals`]); the log-sum-exp is required.
/// What [`Device::attention_for_backward_external`] checks before it queues work.
pub fn plan_attention_for_backward(
    props: &DeviceProps,
    dtype: DType,
    t: &ForwardTensors,
    r: &ExternalResiduals,
    opts: &AttentionOptions,
) -> Result<(Problem, Plan)> {
    training_forward_checked(props, dtype, t, r, opts).map(|(problem, plan, _)| (problem, plan))
}

/// [`plan_attention_for_backward`], with the call's extents.
fn training_forward_checked(
    props: &DeviceProps,
    dtype: DType,
    t: &ForwardTensors,
    r: &ExternalResiduals,
    opts: &AttentionOptions,
) -> Result<(Problem, Plan, Vec<Extent>)> {
    // (The log-sum-exp is required: the backward reads it.)
    let problem = forward_problem(t, Some(t.lse.map_or(0, |l| l.len)), opts)?;
    let mut extents = forward_extents(dtype, t, true)?;
    extents.extend(residual_extents(dtype, r, &t.out, problem.lse_len(), true)?);
    check_disjoint(&extents)?;
    if opts.method == Method::Standard {
        return Err(InvalidInput::ExternalMethod { method: Method::Standard }.into());
    }
    let plan = crate::plan::plan_for_backward(props, dtype, &problem, opts)?;
    // Where Auto took standard attention (f32: no training instance), `forward_plan`'s fallback.
    let plan =
        if plan.method == Method::Standard { forward_plan(props, dtype, &problem, opts)? } else { plan };
    Ok((problem, plan, extents))
}

/// [`plan_attention_backward`] from a training forward's residuals
/// ([`crate::plan_backward_from_residuals`]): what
/// [`Device::attention_backward_from_residuals_external`] checks before it queues work.
pub fn plan_attention_backward_from_residuals(
    props: &DeviceProps,
    dtype: DType,
    t: &BackwardTensors,
    r: &ExternalResiduals,
    opts: &AttentionOptions,
) -> Result<(Problem, Plan)> {
    backward_from_residuals_checked(props, dtype, t, r, opts).map(|(problem, plan, _)| (problem, plan))
}

/// [`plan_attention_backward_from_residuals`], with the call's extents.
fn backward_from_residuals_checked(
    props: &DeviceProps,
    dtype: DType,
    t: &BackwardTensors,
    r: &ExternalResiduals,
    opts: &AttentionOptions,
) -> Result<(Problem, Plan, Vec<Extent>)> {
    let problem = backward_problem(t, opts)?;
    let mut extents = backward_extents(dtype, t, true)?;
    extents.extend(residual_extents(dtype, r, &t.o, problem.lse_len(), false)?);
    check_disjoint(&extents)?;
    let layouts = [("d_o", &t.d_o.layout), ("dq", &t.dq.layout), ("dk", &t.dk.layout), ("dv", &t.dv.layout)];
    let plan = crate::plan::plan_backward_from_residuals(props, dtype, &problem, opts, layouts)?;
    Ok((problem, plan, extents))
}

/// The forward's problem, the checks on its addresses (GPU rules) and its plan on a device with
/// `props`, without running anything: what [`Device::attention_external`] checks before it
/// queues work, as a pure function (a plan on [`DeviceProps::h200`] needs no GPU).
pub fn plan_attention(
    props: &DeviceProps,
    dtype: DType,
    t: &ForwardTensors,
    opts: &AttentionOptions,
) -> Result<(Problem, Plan)> {
    let problem = forward_problem(t, t.lse.map(|l| l.len), opts)?;
    forward_extents(dtype, t, true)?;
    let plan = forward_plan(props, dtype, &problem, opts)?;
    Ok((problem, plan))
}

/// The planner's choice, without `Method::Standard` (see the module's documentation).
fn forward_plan(
    props: &DeviceProps,
    dtype: DType,
    problem: &Problem,
    opts: &AttentionOptions,
) -> Result<Plan, InvalidInput> {
    if opts.method == Method::Standard {
        return Err(InvalidInput::ExternalMethod { method: Method::Standard });
    }
    let plan = crate::plan::plan(props, dtype, problem, opts)?;
    if plan.method != Method::Standard {
        return Ok(plan);
    }
    let flash = AttentionOptions { method: Method::Flash, ..opts.clone() };
    let mut fallback = crate::plan::plan(props, dtype, problem, &flash)?;
    fallback.not_taken = plan.not_taken;
    fallback.why.insert(
        0,
        "on a caller's stream: auto's standard attention (cuBLAS, bound to the Device's own stream) \
         is not available, so the CUDA-core flash kernel runs"
            .to_string(),
    );
    Ok(fallback)
}

/// The backward's problem, the checks on its addresses (GPU rules) and its plan on a device
/// with `props`, without running anything (see [`plan_attention`]).
pub fn plan_attention_backward(
    props: &DeviceProps,
    dtype: DType,
    t: &BackwardTensors,
    opts: &AttentionOptions,
) -> Result<(Problem, Plan)> {
    let problem = backward_problem(t, opts)?;
    backward_extents(dtype, t, true)?;
    let layouts = [("d_o", &t.d_o.layout), ("dq", &t.dq.layout), ("dk", &t.dk.layout), ("dv", &t.dv.layout)];
    let plan = crate::plan::plan_backward(props, dtype, &problem, opts, layouts)?;
    Ok((problem, plan))
}

/// The forward's problem and its log-sum-exp's length (`lse_len`, if one is written): the safe
/// API's checks, in its order.
fn forward_problem(t: &ForwardTensors, lse_len: Option<usize>, opts: &AttentionOptions) -> Result<Problem> {
    let lens = [t.q.len, t.k.len, t.v.len, t.out.len];
    let problem = Problem::new(t.q.layout, t.k.layout, t.v.layout, t.out.layout, lens, opts)?;
    problem.check_lse_len(lse_len)?;
    Ok(problem)
}

/// The backward's problem: the safe API's checks, in its order.
fn backward_problem(t: &BackwardTensors, opts: &AttentionOptions) -> Result<Problem, InvalidInput> {
    let lens = [t.q.len, t.k.len, t.v.len, t.o.len];
    let problem = Problem::new(t.q.layout, t.k.layout, t.v.layout, t.o.layout, lens, opts)?;
    problem.check_lse_len(Some(t.lse.len))?;
    problem.check_backward(
        (&t.d_o.layout, t.d_o.len),
        [("dq", &t.dq.layout, t.dq.len), ("dk", &t.dk.layout, t.dk.len), ("dv", &t.dv.layout, t.dv.len)],
    )?;
    Ok(problem)
}

/// Restores the calling thread's current CUDA context when dropped (the library binds the
/// device's primary context for its driver calls; a framework's thread may have had another
/// device's current).
struct RestoreContext(sys::CUcontext);

impl RestoreContext {
    /// The calling thread's current context (none when the driver is missing or not yet
    /// initialised).
    fn save() -> RestoreContext {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, once the driver library is known to load.
        let ok = driver_present() && unsafe { sys::cuCtxGetCurrent(&mut ctx) } == sys::CUresult::CUDA_SUCCESS;
        RestoreContext(if ok { ctx } else { std::ptr::null_mut() })
    }
}

/// Whether the CUDA driver library can be loaded, probed once per process: the probe
/// (`is_culib_present`) opens and closes the library under each of its candidate names until one
/// loads, which costs microseconds where the first name loads and about a millisecond where none
/// does, and every GPU call on a caller's stream asks.
fn driver_present() -> bool {
    static PRESENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PRESENT.get_or_init(crate::device::driver_library_present)
}

/// [`Device::new`] for a thread that a framework also drives (PyTorch's): the thread's current
/// CUDA context is the same on return as before (`Device::new` makes the device's primary
/// context current, which would change the CUDA runtime's current device).
pub fn open_device(ordinal: usize) -> Result<Device> {
    let _restore = RestoreContext::save();
    Device::new(ordinal)
}

impl Drop for RestoreContext {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the context was current on this thread when the call began; a failure
            // leaves the device's primary context current, which is still a valid state.
            let _ = unsafe { sys::cuCtxSetCurrent(self.0) };
        }
    }
}

impl Device {
    /// Validates the stream and the tensors' memory (each on this device), then wraps the
    /// stream for the call.
    ///
    /// # Safety
    /// `stream` is a live stream handle (or null: the legacy default stream).
    unsafe fn external_stream(&self, stream: sys::CUstream, extents: &[Extent]) -> Result<Arc<CudaStream>> {
        self.bind()?;
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the caller's contract: a live stream (null is the current context's default).
        unsafe { sys::cuStreamGetCtx(stream, &mut ctx) }.result().context("reading the stream's context")?;
        let device = self.props().ordinal;
        if ctx != self.cu_ctx() {
            return Err(InvalidInput::ForeignStream { device }.into());
        }
        for e in extents.iter().filter(|e| e.bytes > 0) {
            let mut ordinal: i32 = -1;
            // SAFETY: valid out-pointer of the attribute's type (an int); any address may be
            // asked about.
            let found = unsafe {
                sys::cuPointerGetAttribute(
                    (&mut ordinal as *mut i32).cast(),
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    e.start,
                )
            };
            let found = (found == sys::CUresult::CUDA_SUCCESS).then_some(ordinal.max(0) as usize);
            if found != Some(device) {
                return Err(InvalidInput::ForeignMemory { tensor: e.name, found, device }.into());
            }
        }
        // SAFETY: checked to be a stream of this device's primary context; the caller keeps it
        // alive for the call, and the wrapper and the call's allocations end with the call
        // (their frees are queued on the stream).
        Ok(unsafe { self.borrow_stream(stream) })
    }

    /// [`Device::attention`] on tensors in device memory that the caller owns, queued on the
    /// caller's stream `stream` (a `CUstream` of this device's primary context, or null for the
    /// legacy default stream): PyTorch's tensors on its current stream, say. `dtype` is the
    /// element type of Q, K, V and O; the log-sum-exp is f32.
    ///
    /// Everything is checked before any work is queued (the module's list) and nothing is
    /// written on error. The call returns once the work is queued; split-KV's partial results
    /// and varlen's offsets are allocated and freed in the stream's order (the driver's
    /// stream-ordered allocator, not the caller's). The calling thread's current context is
    /// the same on return as before the call.
    ///
    /// # Safety
    /// - Each tensor's `address` is device memory of this device (checked) holding `len`
    ///   elements of its type (`dtype`, f32 for the log-sum-exp) from there on: the
    ///   allocation really is that long.
    /// - The memory stays allocated until the queued work has finished (for PyTorch: the tensors
    ///   are alive, or their memory is only reused in the stream's order, as PyTorch's caching
    ///   allocator does on the stream a tensor was made on; on another stream, `record_stream`).
    /// - Work that writes the inputs, or reads or writes the outputs, is ordered with `stream`:
    ///   before the call for work that produces the inputs, after it for work that reads the
    ///   outputs (on another stream: events).
    /// - No other work writes the inputs or touches the outputs while this work runs.
    /// - `stream` is a live stream handle (its context is checked; a dangling handle cannot be)
    ///   and stays alive until the work has been queued.
    pub unsafe fn attention_external(
        &self,
        stream: sys::CUstream,
        dtype: DType,
        tensors: &ForwardTensors,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        let (problem, plan) = plan_attention(self.props(), dtype, tensors, opts)?;
        if plan.launches.is_empty() {
            return Ok(plan);
        }
        let extents = forward_extents(dtype, tensors, true)?;
        let _restore = RestoreContext::save();
        // SAFETY: the caller's contract on `stream`.
        let stream = unsafe { self.external_stream(stream, &extents) }?;
        let io = crate::attention::Io {
            q: tensors.q.address,
            k: tensors.k.address,
            v: tensors.v.address,
            o: tensors.out.address,
            lse: tensors.lse.map_or(0, |l| l.address),
            partial: None,
            residuals: None,
        };
        // (The plan is never `Standard` here: `forward_plan`.)
        self.run_kernels(&stream, dtype, &problem, io, &plan)?;
        Ok(plan)
    }

    /// The training forward ([`Device::attention_for_backward`]) on tensors in device memory
    /// that the caller owns, queued on the caller's stream (see [`Device::attention_external`]):
    /// writes O, the log-sum-exp (required) and, where the returned plan says so
    /// ([`Plan::residuals`]: the Hopper kernel's training instances), the residuals `r` with
    /// which [`Device::attention_backward_from_residuals_external`] skips its pass over the keys
    /// (one O-sized tensor and 8 bytes a row more than the log-sum-exp). Where the plan keeps no
    /// residuals, `r` is not written and the backward takes the log-sum-exp
    /// ([`Device::attention_backward_external`]).
    ///
    /// # Safety
    /// As [`Device::attention_external`], for every tensor (`r`'s are outputs).
    pub unsafe fn attention_for_backward_external(
        &self,
        stream: sys::CUstream,
        dtype: DType,
        tensors: &ForwardTensors,
        r: &ExternalResiduals,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        let (problem, plan, extents) = training_forward_checked(self.props(), dtype, tensors, r, opts)?;
        if plan.launches.is_empty() {
            return Ok(plan);
        }
        let _restore = RestoreContext::save();
        // SAFETY: the caller's contract on `stream`.
        let stream = unsafe { self.external_stream(stream, &extents) }?;
        let io = crate::attention::Io {
            q: tensors.q.address,
            k: tensors.k.address,
            v: tensors.v.address,
            o: tensors.out.address,
            lse: tensors.lse.map_or(0, |l| l.address),
            partial: None,
            residuals: plan.residuals.then_some((r.o_lo.address, r.rows.address)),
        };
        self.run_kernels(&stream, dtype, &problem, io, &plan)?;
        Ok(plan)
    }

    /// [`Device::attention_backward_saved`] on tensors in device memory that the caller owns,
    /// queued on the caller's stream (see [`Device::attention_external`]): the backward that
    /// takes `D` from O and its residual instead of a pass over the keys.
    ///
    /// # Safety
    /// As [`Device::attention_backward_external`], and: `r` and the log-sum-exp are what
    /// [`Device::attention_for_backward_external`] wrote for this problem (the same tensors'
    /// layouts and options, O its output), with a plan that kept residuals
    /// ([`Plan::residuals`]). (Residuals of another forward give wrong gradients; their sizes,
    /// layout and memory are checked, so they cannot make the call read out of bounds.)
    pub unsafe fn attention_backward_from_residuals_external(
        &self,
        stream: sys::CUstream,
        dtype: DType,
        tensors: &BackwardTensors,
        r: &ExternalResiduals,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        let (problem, plan, extents) =
            backward_from_residuals_checked(self.props(), dtype, tensors, r, opts)?;
        if plan.launches.is_empty() {
            return Ok(plan);
        }
        let _restore = RestoreContext::save();
        // SAFETY: the caller's contract on `stream`.
        let stream = unsafe { self.external_stream(stream, &extents) }?;
        let t = tensors;
        let io = BwdIo {
            q: t.q.address,
            k: t.k.address,
            v: t.v.address,
            lse: t.lse.address,
            d_o: (t.d_o.address, t.d_o.layout),
            dq: (t.dq.address, t.dq.layout),
            dk: (t.dk.address, t.dk.layout),
            dv: (t.dv.address, t.dv.layout),
            residuals: plan.residuals.then_some((t.o.address, r.o_lo.address, r.rows.address)),
        };
        self.run_backward(&stream, &problem, &plan, &io, opts.deterministic)?;
        Ok(plan)
    }

    /// FlashAttention's `flash_attn_with_kvcache` on tensors in device memory that the caller
    /// owns, queued on the caller's stream (see [`Device::attention_external`]): appends
    /// `new_kv` `(batch, n, heads_kv, d)` (if given) to the cache `tensors.k`/`tensors.v` after
    /// each entry's `opts.cache_seqlens` (the lengths *before* the new tokens; required with
    /// `new_kv`), in place, then attends `tensors.q` to the grown cache (lengths + n). The cache
    /// is contiguous or paged (`opts.block_table`). Everything — the append's checks
    /// ([`crate::cpu::append_kv`]'s) and the attention's, and that no output overlaps another
    /// tensor — is checked before anything is queued.
    ///
    /// # Safety
    /// As [`Device::attention_external`], for every tensor (the caches are outputs too).
    pub unsafe fn attention_with_kvcache_external(
        &self,
        stream: sys::CUstream,
        dtype: DType,
        tensors: &ForwardTensors,
        new_kv: Option<(ExternalTensor, ExternalTensor)>,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        let Some((k_new, v_new)) = new_kv else {
            // SAFETY: the caller's contract.
            return unsafe { self.attention_external(stream, dtype, tensors, opts) };
        };
        let t = tensors;
        let before = opts.cache_seqlens.clone().ok_or(InvalidInput::CacheSeqlens {
            len: 0,
            batch: t.q.layout.batch,
            capacity: t.k.layout.seqlen,
            varlen: opts.varlen.is_some(),
        })?;
        let n = k_new.layout.seqlen.min(u32::MAX as usize) as u32;
        crate::cpu::check_append_layouts(
            [
                (&t.k.layout, t.k.len),
                (&t.v.layout, t.v.len),
                (&k_new.layout, k_new.len),
                (&v_new.layout, v_new.len),
            ],
            &before,
            opts.block_table.as_ref(),
        )?;
        let extents = kvcache_extents(dtype, t, (&k_new, &v_new), true)?;
        let grown = AttentionOptions {
            cache_seqlens: Some(before.iter().map(|&l| l.saturating_add(n)).collect()),
            ..opts.clone()
        };
        let (problem, plan) = plan_attention(self.props(), dtype, tensors, &grown)?;
        let _restore = RestoreContext::save();
        // SAFETY: the caller's contract on `stream`.
        let stream = unsafe { self.external_stream(stream, &extents) }?;
        let caches = [(t.k.address, t.k.layout), (t.v.address, t.v.layout)];
        let new = [(k_new.address, k_new.layout), (v_new.address, v_new.layout)];
        // SAFETY: the append's arguments were checked above, on the caller's allocations (their
        // contract), ordered on `stream`.
        unsafe {
            self.enqueue_append(&stream, dtype.size_bytes(), caches, new, &before, opts.block_table.as_ref())
        }?;
        if plan.launches.is_empty() {
            return Ok(plan);
        }
        let io = crate::attention::Io {
            q: t.q.address,
            k: t.k.address,
            v: t.v.address,
            o: t.out.address,
            lse: t.lse.map_or(0, |l| l.address),
            partial: None,
            residuals: None,
        };
        self.run_kernels(&stream, dtype, &problem, io, &plan)?;
        Ok(plan)
    }

    /// [`Device::attention_backward`] on tensors in device memory that the caller owns, queued
    /// on the caller's stream (see [`Device::attention_external`]): from Q, K, V, the forward's
    /// O and log-sum-exp and dO, writes dQ, dK and dV. `opts` must be the forward's. Its scratch
    /// (`Plan::scratch_bytes`) is allocated and freed in the stream's order.
    ///
    /// # Safety
    /// As [`Device::attention_external`], for every tensor of `tensors` (dQ, dK and dV are the
    /// outputs).
    pub unsafe fn attention_backward_external(
        &self,
        stream: sys::CUstream,
        dtype: DType,
        tensors: &BackwardTensors,
        opts: &AttentionOptions,
    ) -> Result<Plan> {
        let (problem, plan) = plan_attention_backward(self.props(), dtype, tensors, opts)?;
        if plan.launches.is_empty() {
            return Ok(plan);
        }
        let extents = backward_extents(dtype, tensors, true)?;
        let _restore = RestoreContext::save();
        // SAFETY: the caller's contract on `stream`.
        let stream = unsafe { self.external_stream(stream, &extents) }?;
        let t = tensors;
        let io = BwdIo {
            q: t.q.address,
            k: t.k.address,
            v: t.v.address,
            lse: t.lse.address,
            d_o: (t.d_o.address, t.d_o.layout),
            dq: (t.dq.address, t.dq.layout),
            dk: (t.dk.address, t.dk.layout),
            dv: (t.dv.address, t.dv.layout),
            residuals: None,
        };
        self.run_backward(&stream, &problem, &plan, &io, opts.deterministic)?;
        Ok(plan)
    }
}

/// Host memory of `e`'s elements as a slice (empty: a dangling, aligned pointer).
///
/// # Safety
/// `e` was checked ([`extent`]: aligned, not null when not empty), and its memory holds
/// `e.elems` initialised elements of `T` that nothing writes while the slice lives.
unsafe fn host_slice<'a, T>(e: &Extent) -> &'a [T] {
    if e.elems == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(e.start as *const T, e.elems) }
}

/// Host memory of `e`'s elements as a writable slice.
///
/// # Safety
/// As [`host_slice`], and no other reference to the memory exists while the slice lives
/// ([`check_disjoint`] checked it against the call's other tensors).
unsafe fn host_slice_mut<'a, T>(e: &Extent) -> &'a mut [T] {
    if e.elems == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(NonNull::new_unchecked(e.start as *mut T).as_ptr(), e.elems) }
}

/// Calls `f` with the Rust element type of `dtype`.
macro_rules! with_element {
    ($dtype:expr, $f:ident, $($arg:expr),*) => {
        match $dtype {
            DType::F16 => $f::<f16>($($arg),*),
            DType::BF16 => $f::<bf16>($($arg),*),
            DType::F32 => $f::<f32>($($arg),*),
        }
    };
}

/// [`crate::cpu::attention`] on tensors in host memory that the caller owns, given by address:
/// the same checks as [`Device::attention_external`] except those of device memory (elements
/// need only their own alignment), then the CPU implementation. Nothing is written on error.
///
/// # Safety
/// - Each tensor's `address` is host memory holding `len` initialised elements of its type
///   (`dtype`, f32 for the log-sum-exp) from there on, valid for the call.
/// - No other thread writes the inputs or touches the outputs during the call.
pub unsafe fn cpu_attention(dtype: DType, tensors: &ForwardTensors, opts: &AttentionOptions) -> Result<()> {
    forward_problem(tensors, tensors.lse.map(|l| l.len), opts)?;
    let extents = forward_extents(dtype, tensors, false)?;
    // SAFETY: the caller's contract, on extents checked for alignment and overlap.
    unsafe { with_element!(dtype, cpu_forward, tensors, &extents, opts) }
}

/// # Safety
/// As [`cpu_attention`], with `extents` from [`forward_extents`].
unsafe fn cpu_forward<T: Element>(
    t: &ForwardTensors,
    extents: &[Extent],
    opts: &AttentionOptions,
) -> Result<()> {
    // SAFETY: the caller's contract; the outputs overlap nothing else.
    let (q, k, v, out) = unsafe {
        (
            host_slice::<T>(&extents[0]),
            host_slice::<T>(&extents[1]),
            host_slice(&extents[2]),
            host_slice_mut(&extents[3]),
        )
    };
    // SAFETY: as above.
    let lse = extents.get(4).map(|e| unsafe { host_slice_mut::<f32>(e) });
    crate::cpu::attention(
        HostTensor { data: q, layout: t.q.layout },
        HostTensor { data: k, layout: t.k.layout },
        HostTensor { data: v, layout: t.v.layout },
        HostTensorMut { data: out, layout: t.out.layout },
        lse,
        opts,
    )
}

/// [`crate::cpu::attention_backward`] on tensors in host memory that the caller owns (see
/// [`cpu_attention`]).
///
/// # Safety
/// As [`cpu_attention`], for every tensor of `tensors` (dQ, dK and dV are the outputs).
pub unsafe fn cpu_attention_backward(
    dtype: DType,
    tensors: &BackwardTensors,
    opts: &AttentionOptions,
) -> Result<()> {
    backward_problem(tensors, opts)?;
    let extents = backward_extents(dtype, tensors, false)?;
    // SAFETY: the caller's contract, on extents checked for alignment and overlap.
    unsafe { with_element!(dtype, cpu_backward, tensors, &extents, opts) }
}

/// # Safety
/// As [`cpu_attention_backward`], with `extents` from [`backward_extents`].
unsafe fn cpu_backward<T: Element>(t: &BackwardTensors, e: &[Extent], opts: &AttentionOptions) -> Result<()> {
    // SAFETY: the caller's contract; the outputs (dQ, dK, dV) overlap nothing else.
    unsafe {
        let input = |i: usize, layout: Layout| HostTensor { data: host_slice::<T>(&e[i]), layout };
        let grads = Gradients {
            dq: HostTensorMut { data: host_slice_mut::<T>(&e[6]), layout: t.dq.layout },
            dk: HostTensorMut { data: host_slice_mut::<T>(&e[7]), layout: t.dk.layout },
            dv: HostTensorMut { data: host_slice_mut::<T>(&e[8]), layout: t.dv.layout },
        };
        crate::cpu::attention_backward(
            input(0, t.q.layout),
            input(1, t.k.layout),
            input(2, t.v.layout),
            input(3, t.o.layout),
            host_slice::<f32>(&e[5]),
            input(4, t.d_o.layout),
            grads,
            opts,
        )
    }
}

/// [`crate::cpu::attention_with_kvcache`] on tensors in host memory that the caller owns:
/// `tensors.k` and `tensors.v` are the cache (or page pools), `new_kv` the tokens to append to
/// it in place after each entry's `opts.cache_seqlens` (then the cache is written too, and must
/// overlap nothing else). See [`cpu_attention`].
///
/// # Safety
/// As [`cpu_attention`], for every tensor (the cache is an output when `new_kv` is given).
pub unsafe fn cpu_attention_with_kvcache(
    dtype: DType,
    tensors: &ForwardTensors,
    new_kv: Option<(ExternalTensor, ExternalTensor)>,
    opts: &AttentionOptions,
) -> Result<()> {
    let Some((k_new, v_new)) = new_kv else {
        // Nothing to append: attention to the cache as it is.
        // SAFETY: the caller's contract.
        return unsafe { cpu_attention(dtype, tensors, opts) };
    };
    let t = tensors;
    let extents = kvcache_extents(dtype, t, (&k_new, &v_new), false)?;
    // SAFETY: the caller's contract, on extents checked for alignment and overlap.
    unsafe { with_element!(dtype, cpu_kvcache, t, (k_new.layout, v_new.layout), &extents, opts) }
}

/// The extents of an append-then-attend call, in this order: q, k_cache, v_cache, out, k, v
/// and the log-sum-exp if any (the caches are outputs too), checked for alignment, for device
/// or host memory (`on_gpu`), and that no output overlaps another tensor.
fn kvcache_extents(
    dtype: DType,
    t: &ForwardTensors,
    (k_new, v_new): (&ExternalTensor, &ExternalTensor),
    on_gpu: bool,
) -> Result<Vec<Extent>, InvalidInput> {
    let mut extents = vec![
        tensor_extent("q", &t.q, dtype, on_gpu, false)?,
        tensor_extent("k_cache", &t.k, dtype, on_gpu, true)?,
        tensor_extent("v_cache", &t.v, dtype, on_gpu, true)?,
        tensor_extent("out", &t.out, dtype, on_gpu, true)?,
        tensor_extent("k", k_new, dtype, on_gpu, false)?,
        tensor_extent("v", v_new, dtype, on_gpu, false)?,
    ];
    if let Some(lse) = &t.lse {
        extents.push(lse_extent(lse, &t.q.layout, true)?);
    }
    check_disjoint(&extents)?;
    Ok(extents)
}

/// # Safety
/// As [`cpu_attention_with_kvcache`], with its extents.
unsafe fn cpu_kvcache<T: Element>(
    t: &ForwardTensors,
    (k_new, v_new): (Layout, Layout),
    e: &[Extent],
    opts: &AttentionOptions,
) -> Result<()> {
    // SAFETY: the caller's contract; the outputs (cache, out, lse) overlap nothing else.
    unsafe {
        crate::cpu::attention_with_kvcache(
            HostTensor { data: host_slice::<T>(&e[0]), layout: t.q.layout },
            HostTensorMut { data: host_slice_mut::<T>(&e[1]), layout: t.k.layout },
            HostTensorMut { data: host_slice_mut::<T>(&e[2]), layout: t.v.layout },
            Some((
                HostTensor { data: host_slice::<T>(&e[4]), layout: k_new },
                HostTensor { data: host_slice::<T>(&e[5]), layout: v_new },
            )),
            HostTensorMut { data: host_slice_mut::<T>(&e[3]), layout: t.out.layout },
            e.get(6).map(|l| host_slice_mut::<f32>(l)),
            opts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::plan::Reason;

    /// A device-memory tensor at `address` with a contiguous `(b, s, h, d)` layout.
    fn at(address: u64, b: usize, s: usize, h: usize, d: usize) -> ExternalTensor {
        let layout = Layout::bshd(b, s, h, d);
        ExternalTensor { address, len: layout.required_len().unwrap(), layout }
    }

    /// Q, K, V, O of `(2, 128, 4, 64)` bf16 at separate 1 MiB-aligned addresses, with an LSE.
    fn forward() -> ForwardTensors {
        let mib = 1 << 20;
        ForwardTensors {
            q: at(mib, 2, 128, 4, 64),
            k: at(2 * mib, 2, 128, 4, 64),
            v: at(3 * mib, 2, 128, 4, 64),
            out: at(4 * mib, 2, 128, 4, 64),
            lse: Some(ExternalBuffer { address: 5 * mib, len: 2 * 4 * 128 }),
        }
    }

    fn invalid(r: Result<(Problem, Plan)>) -> InvalidInput {
        match r {
            Err(Error::InvalidInput(i)) => i,
            other => panic!("expected invalid input, got {other:?}"),
        }
    }

    fn h200() -> DeviceProps {
        DeviceProps::h200()
    }

    #[test]
    fn valid_forward_plans_like_the_safe_api() {
        let t = forward();
        let (problem, plan) = plan_attention(&h200(), DType::BF16, &t, &AttentionOptions::default()).unwrap();
        let safe = crate::plan::plan(&h200(), DType::BF16, &problem, &AttentionOptions::default()).unwrap();
        assert_eq!(plan, safe);
    }

    #[test]
    fn the_safe_api_checks_come_first() {
        let mut t = forward();
        (t.k, t.v) = (at(2 << 20, 2, 128, 3, 64), at(3 << 20, 2, 128, 3, 64));
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &AttentionOptions::default())),
            InvalidInput::HeadGroups { q_heads: 4, kv_heads: 3 }
        ));
        let mut t = forward();
        t.v.len -= 1;
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &AttentionOptions::default())),
            InvalidInput::BufferTooSmall { tensor: "v", .. }
        ));
        let mut t = forward();
        t.lse = Some(ExternalBuffer { address: 5 << 20, len: 10 });
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &AttentionOptions::default())),
            InvalidInput::LseTooSmall { len: 10, .. }
        ));
    }

    #[test]
    fn null_and_misaligned_addresses_are_refused() {
        let opts = AttentionOptions::default();
        let mut t = forward();
        t.q.address = 0;
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::NullAddress { tensor: "q", .. }
        ));
        // 16-byte rows (d = 64, strides of whole chunks) need 16-byte aligned addresses.
        let mut t = forward();
        t.k.address += 8;
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::Misaligned { tensor: "k", align: 16, .. }
        ));
        // Rows copied element by element (d = 59) need only 2-byte alignment ...
        let odd = |a| at(a, 1, 16, 2, 59);
        let t = ForwardTensors {
            q: odd((1 << 20) + 2),
            k: odd(2 << 20),
            v: odd(3 << 20),
            out: odd(4 << 20),
            lse: None,
        };
        plan_attention(&h200(), DType::BF16, &t, &opts).unwrap();
        // ... but that one.
        let t = ForwardTensors { q: odd((1 << 20) + 1), ..t };
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::Misaligned { tensor: "q", align: 2, .. }
        ));
        // The log-sum-exp is f32.
        let mut t = forward();
        t.lse = Some(ExternalBuffer { address: (5 << 20) + 2, len: 1024 });
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::Misaligned { tensor: "lse", align: 4, .. }
        ));
        // An empty tensor's address is never used: null is fine.
        let empty = |a| at(a, 2, 0, 4, 64);
        let t = ForwardTensors {
            q: empty(0),
            k: at(2 << 20, 2, 5, 4, 64),
            v: at(3 << 20, 2, 5, 4, 64),
            out: empty(0),
            lse: None,
        };
        let (_, plan) = plan_attention(&h200(), DType::BF16, &t, &opts).unwrap();
        assert!(plan.launches.is_empty());
    }

    #[test]
    fn outputs_sharing_memory_are_refused() {
        let opts = AttentionOptions::default();
        let mut t = forward();
        t.out.address = t.q.address; // in place over Q
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::OutputOverlap { output: "out", other: "q", .. }
        ));
        let mut t = forward();
        t.lse = Some(ExternalBuffer { address: t.out.address + 4096, len: 1024 });
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::OutputOverlap { output: "out", other: "lse", .. }
        ));
        // Inputs may share memory (K and V views of one packed tensor, broadcasts).
        let mut t = forward();
        t.v = t.k;
        plan_attention(&h200(), DType::BF16, &t, &opts).unwrap();
    }

    #[test]
    fn standard_attention_is_not_run_on_a_callers_stream() {
        let t = forward();
        let standard = AttentionOptions { method: Method::Standard, ..Default::default() };
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &standard)),
            InvalidInput::ExternalMethod { method: Method::Standard }
        ));
        // f32: auto picks cuBLAS on the safe API, the CUDA-core flash kernel here.
        let f32_at = |a| at(a, 2, 128, 4, 64);
        let t = ForwardTensors {
            q: f32_at(1 << 20),
            k: f32_at(2 << 20),
            v: f32_at(3 << 20),
            out: f32_at(4 << 20),
            lse: None,
        };
        let opts = AttentionOptions::default();
        let (problem, plan) = plan_attention(&h200(), DType::F32, &t, &opts).unwrap();
        assert_eq!(crate::plan::plan(&h200(), DType::F32, &problem, &opts).unwrap().method, Method::Standard);
        assert_eq!(plan.method, Method::Flash);
        assert!(plan.why[0].contains("caller's stream"), "{:?}", plan.why);
    }

    #[test]
    fn the_planners_refusals_pass_through() {
        let t = forward();
        let opts = AttentionOptions { softcap: Some(30.0), method: Method::Flash, ..Default::default() };
        assert!(matches!(
            invalid(plan_attention(&h200(), DType::BF16, &t, &opts)),
            InvalidInput::Unsupported { reason: Reason::ScoreMod, .. }
        ));
    }

    fn backward(d: usize) -> BackwardTensors {
        let mib = 1 << 20;
        let x = |i: u64| at(i * mib, 1, 64, 2, d);
        BackwardTensors {
            q: x(1),
            k: x(2),
            v: x(3),
            o: x(4),
            lse: ExternalBuffer { address: 5 * mib, len: 128 },
            d_o: x(6),
            dq: x(7),
            dk: x(8),
            dv: x(9),
        }
    }

    #[test]
    fn backward_checks() {
        let opts = AttentionOptions::default();
        plan_attention_backward(&h200(), DType::F16, &backward(64), &opts).unwrap();
        let mut t = backward(64);
        t.dk.address = t.dq.address + 64;
        assert!(matches!(
            invalid(plan_attention_backward(&h200(), DType::F16, &t, &opts)),
            InvalidInput::OutputOverlap { output: "dq", other: "dk", .. }
        ));
        let mut t = backward(64);
        t.dv.address = t.d_o.address;
        assert!(matches!(
            invalid(plan_attention_backward(&h200(), DType::F16, &t, &opts)),
            InvalidInput::OutputOverlap { output: "dv", other: "d_o", .. }
        ));
        let mut t = backward(64);
        t.d_o.layout.head_dim = 32;
        assert!(matches!(
            invalid(plan_attention_backward(&h200(), DType::F16, &t, &opts)),
            InvalidInput::ShapeMismatch { tensor: "d_o", what: "head_dim", .. }
        ));
        // The planner decides what the GPU backward runs (f32 is the CPU path's).
        assert!(matches!(
            invalid(plan_attention_backward(&h200(), DType::F32, &backward(64), &opts)),
            InvalidInput::Unsupported { reason: Reason::DType { .. }, .. }
        ));
    }

    /// A training forward and its backward through the residuals: the safe API's plans, and
    /// the residuals' own checks (O's layout, the rows' length, overlaps, a log-sum-exp).
    #[test]
    fn residual_plans_and_checks() {
        let mib = 1 << 20;
        let opts = AttentionOptions { causal: true, ..Default::default() };
        let t = forward();
        let r = ExternalResiduals {
            o_lo: at(6 * mib, 2, 128, 4, 64),
            rows: ExternalBuffer { address: 7 * mib, len: 2 * 2 * 4 * 128 },
        };
        let (problem, plan) = plan_attention_for_backward(&h200(), DType::BF16, &t, &r, &opts).unwrap();
        assert_eq!(plan, crate::plan::plan_for_backward(&h200(), DType::BF16, &problem, &opts).unwrap());
        assert!(plan.residuals, "{plan}");
        let mut bad = r;
        bad.o_lo.layout = Layout::bhsd(2, 128, 4, 64);
        assert!(matches!(
            invalid(plan_attention_for_backward(&h200(), DType::BF16, &t, &bad, &opts)),
            InvalidInput::ResidualLayout { .. }
        ));
        let mut bad = r;
        bad.rows.len -= 1;
        assert!(matches!(
            invalid(plan_attention_for_backward(&h200(), DType::BF16, &t, &bad, &opts)),
            InvalidInput::SavedTooSmall { what: "row statistics", .. }
        ));
        let mut bad = r;
        bad.rows.address = t.out.address + 8;
        assert!(matches!(
            invalid(plan_attention_for_backward(&h200(), DType::BF16, &t, &bad, &opts)),
            InvalidInput::OutputOverlap { .. }
        ));
        let no_lse = ForwardTensors { lse: None, ..t };
        assert!(matches!(
            invalid(plan_attention_for_backward(&h200(), DType::BF16, &no_lse, &r, &opts)),
            InvalidInput::LseTooSmall { len: 0, .. }
        ));
        // The backward reads them (inputs: they may not overlap its outputs).
        let b = backward(64);
        let r = ExternalResiduals {
            o_lo: at(10 * mib, 1, 64, 2, 64),
            rows: ExternalBuffer { address: 11 * mib, len: 2 * 128 },
        };
        let (problem, plan) =
            plan_attention_backward_from_residuals(&h200(), DType::BF16, &b, &r, &opts).unwrap();
        let layouts =
            [("d_o", &b.d_o.layout), ("dq", &b.dq.layout), ("dk", &b.dk.layout), ("dv", &b.dv.layout)];
        let safe = crate::plan::plan_backward_from_residuals(&h200(), DType::BF16, &problem, &opts, layouts)
            .unwrap();
        assert_eq!(plan, safe);
        assert!(plan.residuals, "{plan}");
        let mut bad = r;
        bad.o_lo.address = b.dq.address;
        assert!(matches!(
            invalid(plan_attention_backward_from_residuals(&h200(), DType::BF16, &b, &bad, &opts)),
            InvalidInput::OutputOverlap { output: "dq", other: "o_lo", .. }
        ));
    }

    /// Host tensors: the raw entry points give the slice API's results, bit for bit.
    #[test]
    fn host_entry_points_match_the_slice_api() {
        let (b, s, h, d) = (2, 37, 4, 24);
        let l = Layout::bshd(b, s, h, d);
        let n = l.required_len().unwrap();
        let data = |seed: u32| -> Vec<f32> {
            (0..n)
                .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
                .collect()
        };
        let (q, k, v) = (data(1), data(2), data(3));
        let opts = AttentionOptions { causal: true, ..Default::default() };
        let (mut want, mut want_lse) = (vec![0.0f32; n], vec![0.0f32; b * h * s]);
        crate::cpu::attention(
            HostTensor { data: &q, layout: l },
            HostTensor { data: &k, layout: l },
            HostTensor { data: &v, layout: l },
            HostTensorMut { data: &mut want, layout: l },
            Some(&mut want_lse),
            &opts,
        )
        .unwrap();
        let (mut out, mut lse) = (vec![f32::NAN; n], vec![f32::NAN; b * h * s]);
        let ext = |p: *const f32| ExternalTensor { address: p as u64, len: n, layout: l };
        let t = ForwardTensors {
            q: ext(q.as_ptr()),
            k: ext(k.as_ptr()),
            v: ext(v.as_ptr()),
            out: ext(out.as_mut_ptr()),
            lse: Some(ExternalBuffer { address: lse.as_mut_ptr() as u64, len: lse.len() }),
        };
        // SAFETY: every address is a live Vec of its length; outputs are distinct Vecs.
        unsafe { cpu_attention(DType::F32, &t, &opts) }.unwrap();
        assert_eq!(out, want);
        assert_eq!(lse, want_lse);

        // The backward, against the slice API.
        let d_o = data(4);
        let mut grads_want = [vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]];
        {
            let [dq, dk, dv] = &mut grads_want;
            crate::cpu::attention_backward(
                HostTensor { data: &q, layout: l },
                HostTensor { data: &k, layout: l },
                HostTensor { data: &v, layout: l },
                HostTensor { data: &want, layout: l },
                &want_lse,
                HostTensor { data: &d_o, layout: l },
                Gradients {
                    dq: HostTensorMut { data: dq, layout: l },
                    dk: HostTensorMut { data: dk, layout: l },
                    dv: HostTensorMut { data: dv, layout: l },
                },
                &opts,
            )
            .unwrap();
        }
        let mut grads = [vec![f32::NAN; n], vec![f32::NAN; n], vec![f32::NAN; n]];
        let bt = BackwardTensors {
            q: ext(q.as_ptr()),
            k: ext(k.as_ptr()),
            v: ext(v.as_ptr()),
            o: ext(out.as_ptr()),
            lse: ExternalBuffer { address: lse.as_ptr() as u64, len: lse.len() },
            d_o: ext(d_o.as_ptr()),
            dq: ext(grads[0].as_mut_ptr()),
            dk: ext(grads[1].as_mut_ptr()),
            dv: ext(grads[2].as_mut_ptr()),
        };
        // SAFETY: as above.
        unsafe { cpu_attention_backward(DType::F32, &bt, &opts) }.unwrap();
        assert_eq!(grads, grads_want);

        // Overlapping outputs are refused before anything is written.
        let mut poisoned = vec![f32::NAN; n];
        let bad = ForwardTensors {
            out: ext(poisoned.as_mut_ptr()),
            lse: Some(ExternalBuffer { address: poisoned.as_ptr() as u64, len: b * h * s }),
            ..t
        };
        // SAFETY: as above (the overlap is refused before any slice is made).
        let err = unsafe { cpu_attention(DType::F32, &bad, &opts) }.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(InvalidInput::OutputOverlap { .. })), "{err:?}");
        assert!(poisoned.iter().all(|x| x.is_nan()));
        // A misaligned f32 address (not memory the call could read: it is refused first).
        let bad =
            ForwardTensors { q: ExternalTensor { address: q.as_ptr() as u64 + 2, len: n, layout: l }, ..t };
        // SAFETY: refused before any read.
        let err = unsafe { cpu_attention(DType::F32, &bad, &opts) }.unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput(InvalidInput::Misaligned { tensor: "q", align: 4, .. })),
            "{err:?}"
        );
    }

    /// Appending to a host cache through raw addresses: the cache is written, and must not
    /// overlap the new tokens.
    #[test]
    fn host_kvcache_appends_in_place() {
        let (b, cap, h, d) = (2, 32, 2, 16);
        let cache_l = Layout::bshd(b, cap, h, d);
        let new_l = Layout::bshd(b, 1, h, d);
        let q_l = Layout::bshd(b, 1, 4, d);
        let mut kc = vec![0.5f32; cache_l.required_len().unwrap()];
        let mut vc = vec![0.25f32; kc.len()];
        let kn = vec![1.0f32; new_l.required_len().unwrap()];
        let vn = vec![2.0f32; kn.len()];
        let q = vec![0.1f32; q_l.required_len().unwrap()];
        let mut out = vec![f32::NAN; q.len()];
        let ext = |p: u64, layout: Layout| ExternalTensor {
            address: p,
            len: layout.required_len().unwrap(),
            layout,
        };
        let t = ForwardTensors {
            q: ext(q.as_ptr() as u64, q_l),
            k: ext(kc.as_mut_ptr() as u64, cache_l),
            v: ext(vc.as_mut_ptr() as u64, cache_l),
            out: ext(out.as_mut_ptr() as u64, q_l),
            lse: None,
        };
        let opts = AttentionOptions { cache_seqlens: Some(vec![3, 7]), causal: true, ..Default::default() };
        let new_kv = Some((ext(kn.as_ptr() as u64, new_l), ext(vn.as_ptr() as u64, new_l)));
        // SAFETY: live Vecs of their lengths; caches and outputs are distinct Vecs.
        unsafe { cpu_attention_with_kvcache(DType::F32, &t, new_kv, &opts) }.unwrap();
        assert_eq!(kc[cache_l.offset(0, 3, 0)], 1.0);
        assert_eq!(vc[cache_l.offset(1, 7, 1)], 2.0);
        assert_eq!(kc[cache_l.offset(1, 8, 0)], 0.5);
        assert!(out.iter().all(|x| x.is_finite()));
        // New tokens inside the cache: refused.
        let inside = Some((ext(kc.as_ptr() as u64, new_l), ext(vn.as_ptr() as u64, new_l)));
        // SAFETY: refused before any slice is made.
        let err = unsafe { cpu_attention_with_kvcache(DType::F32, &t, inside, &opts) }.unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput(InvalidInput::OutputOverlap { output: "k_cache", other: "k", .. })
            ),
            "{err:?}"
        );
    }
}

//! `flashattn._core`: the framework-agnostic core of the Python package. Tensors arrive through
//! DLPack (any strides; no copy), outputs are allocated by the caller (PyTorch's allocator, or
//! NumPy's), and the call runs
//! - on the CPU implementation (`flashattn::external::cpu_*`) for host memory, with the GIL
//!   released;
//! - on the GPU for CUDA memory, queued on the caller's stream (`Device::attention_external`),
//!   in the device's primary context, which PyTorch shares.
//!
//! The Python layer (`flashattn/interface.py`) gives FlashAttention-2's functions on top.

mod dlpack;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use flashattn::external::{
    self, BackwardTensors, ExternalBuffer, ExternalResiduals, ExternalTensor, ForwardTensors,
};
use flashattn::{AttentionOptions, BlockTable, DType, Device, Error, InvalidInput, Layout, VarLen, Window};
use pyo3::exceptions::{PyMemoryError, PyNotImplementedError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use dlpack::{DL_CPU, DL_CUDA, Dtype, Tensor, device_name};

/// A library error as the Python exception that fits it, with the library's message: what the
/// library (or this device's planner) does not support is `NotImplementedError`, inconsistent
/// inputs `ValueError`, device memory `MemoryError`, the rest `RuntimeError`.
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::InvalidInput(InvalidInput::Unsupported { .. } | InvalidInput::ExternalMethod { .. }) => {
            PyNotImplementedError::new_err(msg)
        }
        Error::InvalidInput(_) => PyValueError::new_err(msg),
        Error::OutOfMemory { .. } => PyMemoryError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

/// One `Device` per GPU ordinal, opened on first use and kept (its loaded kernels with it).
fn device(ordinal: usize) -> PyResult<Arc<Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    let mut devices = DEVICES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devices.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Arc::new(external::open_device(ordinal).map_err(to_py)?);
    devices.insert(ordinal, d.clone());
    Ok(d)
}

/// The library's dtype of an attention tensor.
fn attn_dtype(t: &Tensor) -> PyResult<DType> {
    match t.dtype {
        Dtype::F16 => Ok(DType::F16),
        Dtype::BF16 => Ok(DType::BF16),
        Dtype::F32 => Ok(DType::F32),
        other => Err(PyTypeError::new_err(format!(
            "{} has dtype {}; flashattn runs float16, bfloat16 and float32",
            t.name,
            other.name()
        ))),
    }
}

/// An attention tensor, `(batch, seqlen, heads, head_dim)` (or `(total, heads, head_dim)` when
/// `packed`), as the library's layout: the head dimension must be contiguous.
fn attn_tensor(t: &Tensor, packed: bool) -> PyResult<ExternalTensor> {
    let name = t.name;
    let want = if packed { 3 } else { 4 };
    if t.shape.len() != want {
        let shape =
            if packed { "(total_tokens, heads, head_dim)" } else { "(batch, seqlen, heads, head_dim)" };
        return Err(PyValueError::new_err(format!(
            "{name} must be {want}-D {shape}, got shape {:?}",
            t.shape
        )));
    }
    let (b, bs) = if packed { (1, 0) } else { (t.shape[0], t.strides[0]) };
    let o = want - 3;
    let (s, h, d) = (t.shape[o], t.shape[o + 1], t.shape[o + 2]);
    if d > 1 && t.strides[o + 2] != 1 {
        return Err(PyValueError::new_err(format!(
            "{name}'s last (head) dimension must be contiguous (stride 1), got strides {:?}",
            t.strides
        )));
    }
    let layout = Layout {
        batch: b,
        seqlen: s,
        heads: h,
        head_dim: d,
        batch_stride: bs,
        seq_stride: t.strides[o],
        head_stride: t.strides[o + 1],
    };
    let len =
        layout.required_len().ok_or_else(|| PyValueError::new_err(format!("{name}'s extent overflows")))?;
    Ok(ExternalTensor { address: t.address, len, layout })
}

/// An output: not marked read-only by its producer.
fn writable(t: &Tensor) -> PyResult<()> {
    if t.read_only {
        return Err(PyValueError::new_err(format!("{} is read-only; outputs must be writable", t.name)));
    }
    Ok(())
}

/// A contiguous float32 tensor as the core's buffer: the log-sum-exp, and a training forward's
/// rows' statistics (`rows`, two elements per log-sum-exp row). `name` says which.
fn f32_buffer(t: &Tensor, name: &str) -> PyResult<ExternalBuffer> {
    if t.dtype != Dtype::F32 || !t.is_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{name} must be a contiguous float32 tensor, got a {} one with shape {:?} and strides {:?}",
            t.dtype.name(),
            t.shape,
            t.strides
        )));
    }
    Ok(ExternalBuffer { address: t.address, len: t.numel() })
}

/// The log-sum-exp output: a dense float32 tensor.
fn lse_buffer(t: &Tensor) -> PyResult<ExternalBuffer> {
    writable(t)?;
    f32_buffer(t, "lse")
}

/// Every tensor on one device, all attention tensors of one dtype.
fn same_device_and_dtype(tensors: &[&Tensor], lse: &[&Tensor]) -> PyResult<((i32, i32), DType)> {
    let first = tensors[0];
    let dtype = attn_dtype(first)?;
    for t in tensors.iter().chain(lse) {
        if t.device != first.device {
            return Err(PyValueError::new_err(format!(
                "{} is on {} but {} is on {}: every tensor must be on the same device",
                first.name,
                device_name(first.device),
                t.name,
                device_name(t.device)
            )));
        }
    }
    for t in &tensors[1..] {
        if attn_dtype(t)? != dtype {
            return Err(PyTypeError::new_err(format!(
                "{} is {} but {} is {}: q, k, v and the outputs must have one dtype",
                first.name,
                first.dtype.name(),
                t.name,
                t.dtype.name()
            )));
        }
    }
    match first.device.0 {
        DL_CPU | DL_CUDA => Ok((first.device, dtype)),
        _ => Err(PyValueError::new_err(format!(
            "tensors on {} are not supported: flashattn runs host (CPU) and CUDA device memory",
            device_name(first.device)
        ))),
    }
}

/// Whether `obj` is read through DLPack: an array with `__dlpack__`, or a capsule its producer
/// exported ([`dlpack::import`]).
fn is_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj.is_exact_instance_of::<PyCapsule>() || obj.hasattr(intern!(obj.py(), "__dlpack__"))?)
}

/// Integers from a DLPack tensor (host memory) or a Python sequence.
fn ints(obj: &Bound<'_, PyAny>, name: &'static str) -> PyResult<Vec<u32>> {
    if is_dlpack(obj)? {
        return dlpack::import(obj, name, None)?.host_u32();
    }
    let values: Vec<i64> = obj.extract().map_err(|_| {
        PyTypeError::new_err(format!("{name} must be an int32 array in host memory or a sequence of ints"))
    })?;
    values
        .into_iter()
        .map(|v| {
            u32::try_from(v).map_err(|_| PyValueError::new_err(format!("{name} holds {v}, outside 0..2^32")))
        })
        .collect()
}

/// The options every call shares, from the Python keywords.
#[allow(clippy::too_many_arguments)]
fn options(
    softmax_scale: Option<f32>,
    causal: bool,
    window_left: Option<usize>,
    window_right: Option<usize>,
    softcap: Option<f32>,
    alibi_slopes: Option<&Bound<'_, PyAny>>,
    cu_seqlens: (Option<&Bound<'_, PyAny>>, Option<&Bound<'_, PyAny>>),
    num_splits: Option<usize>,
    deterministic: bool,
) -> PyResult<AttentionOptions> {
    let alibi_slopes = match alibi_slopes {
        None => None,
        Some(a) if is_dlpack(a)? => Some(dlpack::import(a, "alibi_slopes", None)?.host_f32()?),
        Some(a) => Some(a.extract::<Vec<f32>>()?),
    };
    let varlen = match cu_seqlens {
        (None, None) => None,
        (Some(q), Some(k)) => {
            Some(VarLen { cu_seqlens_q: ints(q, "cu_seqlens_q")?, cu_seqlens_k: ints(k, "cu_seqlens_k")? })
        }
        _ => {
            return Err(PyValueError::new_err(
                "cu_seqlens_q and cu_seqlens_k go together: pass both or neither",
            ));
        }
    };
    Ok(AttentionOptions {
        scale: softmax_scale,
        causal,
        window: Window { left: window_left, right: window_right },
        softcap,
        alibi_slopes,
        varlen,
        splits: num_splits,
        deterministic,
        ..Default::default()
    })
}

/// Forward attention: writes `out` (Q's shape) and, if given, `lse` (float32, `(batch, heads,
/// seqlen_q)`, or `(heads, total_q)` with `cu_seqlens_*`). Returns the plan in words (`"cpu"`
/// for host memory).
///
/// Host tensors run the CPU implementation; CUDA tensors are queued on `stream` (a `CUstream`
/// handle such as `torch.cuda.current_stream().cuda_stream`; `None` or 0: the legacy default
/// stream). Tensors are DLPack arrays, exported with `__dlpack__(stream=stream)`, or DLPack
/// capsules already exported (`torch.utils.dlpack.to_dlpack(t)`), consumed with no stream
/// handshake: their producer's work must be ordered before `stream` already. With `cache_seqlens` / `block_table`, `k` and `v` are a K/V cache (FlashAttention's
/// `flash_attn_with_kvcache`), and `k_new` / `v_new` are appended to it in place first.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse=None, *, softmax_scale=None, causal=false, window_left=None,
    window_right=None, softcap=None, alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None,
    cache_seqlens=None, block_table=None, k_new=None, v_new=None, num_splits=None, stream=None))]
#[allow(clippy::too_many_arguments)]
fn forward(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    lse: Option<&Bound<'_, PyAny>>,
    softmax_scale: Option<f32>,
    causal: bool,
    window_left: Option<usize>,
    window_right: Option<usize>,
    softcap: Option<f32>,
    alibi_slopes: Option<&Bound<'_, PyAny>>,
    cu_seqlens_q: Option<&Bound<'_, PyAny>>,
    cu_seqlens_k: Option<&Bound<'_, PyAny>>,
    cache_seqlens: Option<&Bound<'_, PyAny>>,
    block_table: Option<&Bound<'_, PyAny>>,
    k_new: Option<&Bound<'_, PyAny>>,
    v_new: Option<&Bound<'_, PyAny>>,
    num_splits: Option<usize>,
    stream: Option<usize>,
) -> PyResult<String> {
    let packed = cu_seqlens_q.is_some() || cu_seqlens_k.is_some();
    let imp = |obj: &Bound<'_, PyAny>, name| dlpack::import(obj, name, stream);
    let (tq, tk, tv, to) = (imp(q, "q")?, imp(k, "k")?, imp(v, "v")?, imp(out, "out")?);
    writable(&to)?;
    let tl = lse.map(|l| imp(l, "lse")).transpose()?;
    let new_kv = match (k_new, v_new) {
        (None, None) => None,
        (Some(kn), Some(vn)) => Some((imp(kn, "k")?, imp(vn, "v")?)),
        _ => return Err(PyValueError::new_err("k and v (the new tokens) go together: pass both or neither")),
    };
    let mut all = vec![&tq, &tk, &tv, &to];
    if let Some((kn, vn)) = &new_kv {
        all.extend([kn, vn]);
    }
    let (dev, dtype) = same_device_and_dtype(&all, &tl.iter().collect::<Vec<_>>())?;
    let mut opts = options(
        softmax_scale,
        causal,
        window_left,
        window_right,
        softcap,
        alibi_slopes,
        (cu_seqlens_q, cu_seqlens_k),
        num_splits,
        false,
    )?;
    opts.cache_seqlens = cache_seqlens.map(|c| ints(c, "cache_seqlens")).transpose()?;
    if let Some(table) = block_table {
        let t = dlpack::import(table, "block_table", None)?;
        if t.shape.len() != 2 {
            return Err(PyValueError::new_err(format!(
                "block_table must be 2-D (batch, pages per entry), got shape {:?}",
                t.shape
            )));
        }
        let pages_per_entry = t.shape[1];
        // The page size is the pools' token extent: K is (pages, page_size, heads_k, d).
        let page_size = tk.shape.get(1).copied().unwrap_or(0);
        opts.block_table = Some(BlockTable { page_size, pages_per_entry, pages: t.host_u32()?.into() });
    }
    let tensors = ForwardTensors {
        q: attn_tensor(&tq, packed)?,
        k: attn_tensor(&tk, packed)?,
        v: attn_tensor(&tv, packed)?,
        out: attn_tensor(&to, packed)?,
        lse: tl.as_ref().map(lse_buffer).transpose()?,
    };
    let new_kv = match &new_kv {
        Some((kn, vn)) => Some((attn_tensor(kn, false)?, attn_tensor(vn, false)?)),
        None => None,
    };
    if dev.0 == DL_CPU {
        let kvcache = opts.cache_seqlens.is_some() || opts.block_table.is_some() || new_kv.is_some();
        py.detach(|| {
            // SAFETY: DLPack tensors of host memory that stay imported (alive) for the call;
            // outputs are checked by the library to overlap nothing else.
            unsafe {
                if kvcache {
                    external::cpu_attention_with_kvcache(dtype, &tensors, new_kv, &opts)
                } else {
                    external::cpu_attention(dtype, &tensors, &opts)
                }
            }
        })
        .map_err(to_py)?;
        return Ok("cpu".to_string());
    }
    let device = device(dev.1.max(0) as usize)?;
    // SAFETY: DLPack tensors of CUDA memory, alive for the call and kept alive by the caller
    // until the work has run (the Python layer holds them, and PyTorch's allocator reuses memory
    // in its stream's order); `stream` is the caller's live stream on which their producer's
    // work is ordered (DLPack's `stream` argument). The library checks the device, the stream's
    // context, addresses and overlaps.
    // With new K/V tokens they are appended to the cache first (in place, on the same stream).
    let plan = unsafe {
        device.attention_with_kvcache_external(stream_handle(stream), dtype, &tensors, new_kv, &opts)
    }
    .map_err(to_py)?;
    Ok(plan.to_string())
}

/// A stream handle from Python's integer (`None`: the legacy default stream).
fn stream_handle(stream: Option<usize>) -> external::CUstream {
    stream.unwrap_or(0) as external::CUstream
}

/// The training forward (CUDA tensors): `forward`'s output and log-sum-exp, and, where the
/// kernel keeps them (the Hopper kernel's training instances), the residuals with which
/// `backward` skips its pass over the keys: `o_lo`, O's residual (laid out as `out`:
/// `torch.empty_like(out)`), and `rows`, two float32 per log-sum-exp row. Returns the plan in
/// words and whether the residuals were written (if not, pass none to `backward`).
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, o_lo, rows, *, softmax_scale=None, causal=false, window_left=None,
    window_right=None, softcap=None, alibi_slopes=None, cu_seqlens_q=None, cu_seqlens_k=None, stream=None))]
#[allow(clippy::too_many_arguments)]
fn forward_train(
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    lse: &Bound<'_, PyAny>,
    o_lo: &Bound<'_, PyAny>,
    rows: &Bound<'_, PyAny>,
    softmax_scale: Option<f32>,
    causal: bool,
    window_left: Option<usize>,
    window_right: Option<usize>,
    softcap: Option<f32>,
    alibi_slopes: Option<&Bound<'_, PyAny>>,
    cu_seqlens_q: Option<&Bound<'_, PyAny>>,
    cu_seqlens_k: Option<&Bound<'_, PyAny>>,
    stream: Option<usize>,
) -> PyResult<(String, bool)> {
    let packed = cu_seqlens_q.is_some() || cu_seqlens_k.is_some();
    let imp = |obj: &Bound<'_, PyAny>, name| dlpack::import(obj, name, stream);
    let (tq, tk, tv, to) = (imp(q, "q")?, imp(k, "k")?, imp(v, "v")?, imp(out, "out")?);
    let (tl, tlo, trows) = (imp(lse, "lse")?, imp(o_lo, "o_lo")?, imp(rows, "rows")?);
    for t in [&to, &tlo, &trows] {
        writable(t)?;
    }
    let (dev, dtype) = same_device_and_dtype(&[&tq, &tk, &tv, &to, &tlo], &[&tl, &trows])?;
    if dev.0 != DL_CUDA {
        return Err(PyValueError::new_err(
            "forward_train runs on CUDA tensors (host tensors: forward, whose backward takes the log-sum-exp)",
        ));
    }
    let opts = options(
        softmax_scale,
        causal,
        window_left,
        window_right,
        softcap,
        alibi_slopes,
        (cu_seqlens_q, cu_seqlens_k),
        None,
        false,
    )?;
    let tensors = ForwardTensors {
        q: attn_tensor(&tq, packed)?,
        k: attn_tensor(&tk, packed)?,
        v: attn_tensor(&tv, packed)?,
        out: attn_tensor(&to, packed)?,
        lse: Some(lse_buffer(&tl)?),
    };
    let residuals = ExternalResiduals { o_lo: attn_tensor(&tlo, packed)?, rows: f32_buffer(&trows, "rows")? };
    let device = device(dev.1.max(0) as usize)?;
    // SAFETY: as in `forward` (o_lo and rows are outputs, checked like `out`).
    let plan = unsafe {
        device.attention_for_backward_external(stream_handle(stream), dtype, &tensors, &residuals, &opts)
    }
    .map_err(to_py)?;
    Ok((plan.to_string(), plan.residuals))
}

/// Backward attention: from the forward's `q`, `k`, `v`, `out`, `lse` and the upstream gradient
/// `dout`, writes `dq`, `dk`, `dv` (the shapes of q, k, v; K/V gradients summed over the query
/// heads of each group). `softmax_scale`, `causal`, the window and `cu_seqlens_*` must be the
/// forward's. With `o_lo` and `rows` (CUDA: what `forward_train` wrote for this forward, when
/// it returned true) it takes `D` from O and its residual instead of a pass over the keys.
/// Returns the plan in words (`"cpu"` for host memory).
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, dout, dq, dk, dv, *, softmax_scale=None, causal=false,
    window_left=None, window_right=None, softcap=None, alibi_slopes=None, cu_seqlens_q=None,
    cu_seqlens_k=None, deterministic=false, o_lo=None, rows=None, stream=None))]
#[allow(clippy::too_many_arguments)]
fn backward(
    py: Python<'_>,
    q: &Bound<'_, PyAny>,
    k: &Bound<'_, PyAny>,
    v: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    lse: &Bound<'_, PyAny>,
    dout: &Bound<'_, PyAny>,
    dq: &Bound<'_, PyAny>,
    dk: &Bound<'_, PyAny>,
    dv: &Bound<'_, PyAny>,
    softmax_scale: Option<f32>,
    causal: bool,
    window_left: Option<usize>,
    window_right: Option<usize>,
    softcap: Option<f32>,
    alibi_slopes: Option<&Bound<'_, PyAny>>,
    cu_seqlens_q: Option<&Bound<'_, PyAny>>,
    cu_seqlens_k: Option<&Bound<'_, PyAny>>,
    deterministic: bool,
    o_lo: Option<&Bound<'_, PyAny>>,
    rows: Option<&Bound<'_, PyAny>>,
    stream: Option<usize>,
) -> PyResult<String> {
    let packed = cu_seqlens_q.is_some() || cu_seqlens_k.is_some();
    let imp = |obj: &Bound<'_, PyAny>, name| dlpack::import(obj, name, stream);
    let (tq, tk, tv, to, tdo) =
        (imp(q, "q")?, imp(k, "k")?, imp(v, "v")?, imp(out, "out")?, imp(dout, "dout")?);
    let (tdq, tdk, tdv) = (imp(dq, "dq")?, imp(dk, "dk")?, imp(dv, "dv")?);
    let tl = imp(lse, "lse")?;
    for t in [&tdq, &tdk, &tdv] {
        writable(t)?;
    }
    let (dev, dtype) = same_device_and_dtype(&[&tq, &tk, &tv, &to, &tdo, &tdq, &tdk, &tdv], &[&tl])?;
    if tl.dtype != Dtype::F32 || !tl.is_contiguous() {
        return Err(PyValueError::new_err("lse must be the forward's contiguous float32 log-sum-exp"));
    }
    let opts = options(
        softmax_scale,
        causal,
        window_left,
        window_right,
        softcap,
        alibi_slopes,
        (cu_seqlens_q, cu_seqlens_k),
        None,
        deterministic,
    )?;
    let t = |x: &Tensor| attn_tensor(x, packed);
    let tensors = BackwardTensors {
        q: t(&tq)?,
        k: t(&tk)?,
        v: t(&tv)?,
        o: t(&to)?,
        lse: ExternalBuffer { address: tl.address, len: tl.numel() },
        d_o: t(&tdo)?,
        dq: t(&tdq)?,
        dk: t(&tdk)?,
        dv: t(&tdv)?,
    };
    let residuals = match (o_lo, rows) {
        (None, None) => None,
        (Some(lo), Some(r)) if dev.0 == DL_CUDA => {
            let (tlo, trows) = (imp(lo, "o_lo")?, imp(r, "rows")?);
            same_device_and_dtype(&[&tq, &tlo], &[&tl, &trows])?;
            Some(ExternalResiduals { o_lo: t(&tlo)?, rows: f32_buffer(&trows, "rows")? })
        }
        (Some(_), Some(_)) => {
            return Err(PyValueError::new_err("o_lo and rows are a CUDA training forward's (forward_train)"));
        }
        _ => return Err(PyValueError::new_err("o_lo and rows go together: pass both or neither")),
    };
    if dev.0 == DL_CPU {
        // SAFETY: as in `forward`.
        py.detach(|| unsafe { external::cpu_attention_backward(dtype, &tensors, &opts) }).map_err(to_py)?;
        return Ok("cpu".to_string());
    }
    let device = device(dev.1.max(0) as usize)?;
    let stream = stream_handle(stream);
    // SAFETY: as in `forward`; the residuals are the caller's `forward_train`'s for this
    // forward (documented), their sizes and layout checked.
    let plan = unsafe {
        match &residuals {
            Some(r) => device.attention_backward_from_residuals_external(stream, dtype, &tensors, r, &opts),
            None => device.attention_backward_external(stream, dtype, &tensors, &opts),
        }
    }
    .map_err(to_py)?;
    Ok(plan.to_string())
}

/// The extension module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(forward, m)?)?;
    m.add_function(wrap_pyfunction!(forward_train, m)?)?;
    m.add_function(wrap_pyfunction!(backward, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

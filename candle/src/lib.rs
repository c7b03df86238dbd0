//! # flashattn-candle
//!
//! [flashattn](https://crates.io/crates/flashattn) for [candle](https://github.com/huggingface/candle):
//! the functions of `candle-flash-attn`, with its signatures, as candle custom ops. Switching is
//! one line:
//!
//! ```ignore
//! // use candle_flash_attn::{flash_attn, flash_attn_varlen};
//! use flashattn_candle::{flash_attn, flash_attn_varlen};
//! ```
//!
//! - **CPU tensors** run flashattn's tiled CPU implementation (candle-flash-attn has none), in
//!   f16, bf16 and f32.
//! - **CUDA tensors** (the `cuda` feature) run flashattn's GPU kernels on candle's own memory and
//!   stream, without a copy: [`flashattn::Device::attention_external`] on the slices' device
//!   addresses, queued on the candle device's stream (candle-core 0.11 and flashattn share
//!   cudarc 0.19 and the device's primary context). f16 and bf16 (f32 too, on CUDA cores).
//! - **Backward**: every op here has candle's backward ([`candle::CustomOp3::bwd`]): when an
//!   input tracks gradients, the forward keeps its log-sum-exp and the backward runs flashattn's
//!   (CPU, or GPU for f16/bf16).
//!
//! Shapes are candle-flash-attn's: `(batch, seq_len, num_heads, head_size)` for Q, K and V (K and
//! V may have fewer heads, a divisor of Q's: grouped-query attention), `(total_tokens, num_heads,
//! head_size)` for the varlen functions. Any strides work as long as the head dimension is
//! contiguous (a narrowed or transposed view needs no copy); a tensor whose head dimension is
//! strided is copied first. The output is contiguous, shaped like Q.
//!
//! What flashattn does not run yet is an error, never a silent fallback: sliding windows, ALiBi
//! slopes and the softcap run on the GPU with the tensor-core kernels only (f16/bf16, head dims
//! that are multiples of 8; f32 CUDA tensors with them are an error that says so). The paged
//! variant (`flash_attn_varlen_paged_windowed`) is not provided.

mod op;

#[cfg(feature = "cuda")]
mod cuda;

use candle::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor};
use flashattn::VarLen;

use op::{Attn, Params};

/// candle-flash-attn's op struct, with its fields: `q.apply_op3(k, v, FlashAttn { .. })` runs the
/// same attention as [`flash_attn_alibi_windowed_softcap`].
///
/// Its backward recomputes the forward's log-sum-exp (the struct has nowhere to keep it); the
/// functions of this crate keep it instead.
#[derive(Clone, Debug)]
pub struct FlashAttn {
    pub softmax_scale: f32,
    /// Slopes of shape `(num_heads_q)`, f32.
    pub alibi_slopes: Option<Tensor>,
    pub window_size_left: Option<usize>,
    pub window_size_right: Option<usize>,
    pub softcap: Option<f32>,
}

impl FlashAttn {
    fn op(&self) -> Result<Attn> {
        let alibi_slopes = self.alibi_slopes.as_ref().map(slopes).transpose()?;
        let params = Params {
            softmax_scale: self.softmax_scale,
            window_left: self.window_size_left,
            window_right: self.window_size_right,
            alibi_slopes,
            softcap: self.softcap,
            varlen: None,
        };
        Ok(Attn::new(params, false))
    }
}

impl CustomOp3 for FlashAttn {
    fn name(&self) -> &'static str {
        "flash-attn"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        ql: &Layout,
        k: &CpuStorage,
        kl: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.op()?.cpu_fwd(q, ql, k, kl, v, vl)
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        q: &candle::CudaStorage,
        ql: &Layout,
        k: &candle::CudaStorage,
        kl: &Layout,
        v: &candle::CudaStorage,
        vl: &Layout,
    ) -> Result<(candle::CudaStorage, Shape)> {
        self.op()?.cuda_fwd(q, ql, k, kl, v, vl)
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        self.op()?.bwd(q, k, v, out, grad)
    }
}

/// ALiBi slopes as flashattn takes them: one f32 per query head.
fn slopes(t: &Tensor) -> Result<Vec<f32>> {
    if t.dtype() != DType::F32 {
        candle::bail!("DType mismatch alibi_slopes {:?}, expected {:?}", t.dtype(), DType::F32)
    }
    t.to_vec1::<f32>()
}

/// Cumulative sequence offsets (`batch + 1` of them, from 0) as flashattn takes them: a rank-1
/// u32 tensor, as candle-flash-attn's (i32 and i64 are accepted too), on any device (CUDA
/// offsets are copied to the host: the GPU launch sizes its grid from them).
fn offsets(name: &str, t: &Tensor) -> Result<Vec<u32>> {
    let t = match t.dtype() {
        DType::U32 => t.clone(),
        DType::I32 | DType::I64 => t.to_dtype(DType::U32)?,
        dt => candle::bail!("{name} must be u32 (or i32, i64), got {dt:?}"),
    };
    if t.rank() != 1 {
        candle::bail!("{name} must have rank 1 (batch + 1 offsets), got shape {:?}", t.shape())
    }
    t.to_vec1::<u32>()
}

/// A tensor whose head dimension is contiguous (a copy only where it is not).
fn rows(t: &Tensor) -> Result<Tensor> {
    match t.stride().last() {
        Some(&s) if s != 1 && t.dims().last().is_some_and(|&d| d > 1) => t.contiguous(),
        _ => Ok(t.clone()),
    }
}

/// Runs the op on `q`, `k`, `v`, keeping the log-sum-exp when one of them tracks gradients.
fn run(q: &Tensor, k: &Tensor, v: &Tensor, params: Params) -> Result<Tensor> {
    let (q, k, v) = (rows(q)?, rows(k)?, rows(v)?);
    let keep_lse = q.track_op() || k.track_op() || v.track_op();
    q.apply_op3(&k, &v, Attn::new(params, keep_lse))
}

/// The parameters of a fixed-length call.
fn fixed(
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> Result<Params> {
    Ok(Params {
        softmax_scale,
        window_left: window.0,
        window_right: window.1,
        alibi_slopes: alibi_slopes.map(slopes).transpose()?,
        softcap,
        varlen: None,
    })
}

/// candle-flash-attn's `(window_size_left, window_size_right)` of `causal`.
fn causal_window(causal: bool) -> (Option<usize>, Option<usize>) {
    (None, causal.then_some(0))
}

/// The parameters of a variable-length call; `max_seqlen_q` and `max_seqlen_k` must be at least
/// the longest sequence (FlashAttention sizes its grid by them; flashattn reads the offsets).
#[allow(clippy::too_many_arguments)]
fn varlen(
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    alibi_slopes: Option<&Tensor>,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> Result<Params> {
    let v = VarLen {
        cu_seqlens_q: offsets("seqlens_q", seqlens_q)?,
        cu_seqlens_k: offsets("seqlens_k", seqlens_k)?,
    };
    let longest = |c: &[u32]| c.windows(2).map(|w| w[1].saturating_sub(w[0]) as usize).max().unwrap_or(0);
    for (name, max, c) in
        [("max_seqlen_q", max_seqlen_q, &v.cu_seqlens_q), ("max_seqlen_k", max_seqlen_k, &v.cu_seqlens_k)]
    {
        if longest(c) > max {
            candle::bail!("{name} is {max} but a sequence has {} tokens", longest(c))
        }
    }
    let mut params = fixed(softmax_scale, alibi_slopes, window, softcap)?;
    params.varlen = Some((v, max_seqlen_q, max_seqlen_k));
    Ok(params)
}

/// Flash attention: `softmax(Q·Kᵀ·softmax_scale)·V`, causal (bottom-right aligned, as
/// FlashAttention ≥ 2.1) if asked.
///
/// Multi-query and grouped-query attention: K and V may have fewer heads than Q, a divisor of
/// Q's.
///
/// # Arguments
///
/// * `q` - Query tensor with shape `(batch, seq_len_q, num_heads_q, head_size)`.
/// * `k` - Key tensor with shape `(batch, seq_len_kv, num_heads_kv, head_size)`.
/// * `v` - Value tensor with shape `(batch, seq_len_kv, num_heads_kv, head_size)`.
///
/// The resulting tensor has dimensions `(batch, seq_len_q, num_heads_q, head_size)`.
pub fn flash_attn(q: &Tensor, k: &Tensor, v: &Tensor, softmax_scale: f32, causal: bool) -> Result<Tensor> {
    run(q, k, v, fixed(softmax_scale, None, causal_window(causal), None)?)
}

/// [`flash_attn`] with a sliding window: each query sees `window_size_left` keys before its
/// diagonal and `window_size_right` after it (`None`: no limit on that side).
///
/// `window_size_left=None` with `window_size_right=Some(0)` is the causal mask.
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    run(q, k, v, fixed(softmax_scale, None, (window_size_left, window_size_right), None)?)
}

/// [`flash_attn`] with ALiBi: `alibi_slopes` has shape `(num_heads_q)`, f32. CPU tensors only
/// for now (CUDA tensors: an error).
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    run(q, k, v, fixed(softmax_scale, Some(alibi_slopes), causal_window(causal), None)?)
}

/// [`flash_attn_alibi`] with a sliding window ([`flash_attn_windowed`]).
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    run(q, k, v, fixed(softmax_scale, Some(alibi_slopes), window, None)?)
}

/// Optional ALiBi, a sliding window and Gemma-2's softcap (scaled scores `s` become
/// `softcap·tanh(s/softcap)`). ALiBi and the softcap: CPU tensors only for now.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    run(q, k, v, fixed(softmax_scale, alibi_slopes, window, Some(softcap))?)
}

/// Flash attention over variable-length sequences packed along the token axis.
///
/// # Arguments
///
/// * `q` - Query tensor with shape `(total_q, num_heads_q, head_size)`.
/// * `k` - Key tensor with shape `(total_kv, num_heads_kv, head_size)`.
/// * `v` - Value tensor with shape `(total_kv, num_heads_kv, head_size)`.
/// * `seqlens_q` - The cumulative lengths of the sequences in the batch, used to index in q
///   (u32, `batch_size + 1` elements: `0`, `seqlen_1`, `seqlen_1 + seqlen_2`, ...).
/// * `seqlens_k` - The cumulative lengths of the sequences in the batch, used to index in k and v.
/// * `max_seqlen_q` - The maximum query sequence length for q in the batch (checked).
/// * `max_seqlen_k` - The maximum query sequence length for k and v in the batch (checked).
///
/// The offsets may live on the CPU or the GPU; they are read on the host. The resulting tensor
/// has dimensions `(total_q, num_heads_q, head_size)`.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let p = varlen(
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        None,
        causal_window(causal),
        None,
    )?;
    run(q, k, v, p)
}

/// [`flash_attn_varlen`] with a sliding window ([`flash_attn_windowed`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    let p = varlen(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, None, window, None)?;
    run(q, k, v, p)
}

/// [`flash_attn_varlen`] with ALiBi ([`flash_attn_alibi`]; CPU tensors only for now).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let (slopes, window) = (Some(alibi_slopes), causal_window(causal));
    let p = varlen(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, slopes, window, None)?;
    run(q, k, v, p)
}

/// [`flash_attn_varlen_alibi`] with a sliding window.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let (slopes, window) = (Some(alibi_slopes), (window_size_left, window_size_right));
    let p = varlen(seqlens_q, seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, slopes, window, None)?;
    run(q, k, v, p)
}

/// [`flash_attn_varlen`] with optional ALiBi, a sliding window and the softcap
/// ([`flash_attn_alibi_windowed_softcap`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let window = (window_size_left, window_size_right);
    let p = varlen(
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale,
        alibi_slopes,
        window,
        Some(softcap),
    )?;
    run(q, k, v, p)
}

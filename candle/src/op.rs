//! The custom op: what a call computes ([`Params`]), its CPU forward and backward, and the
//! mapping from candle's layouts to flashattn's.

use std::sync::Mutex;

use candle::CpuStorage::{BF16, F16, F32};
use candle::backend::BackendStorage;
use candle::op::BackpropOp;
use candle::{CpuStorage, CustomOp3, Shape, Storage, Tensor};
use flashattn::cpu::{Gradients, HostTensor, HostTensorMut};
use flashattn::{AttentionOptions, Element, Layout, VarLen, Window};

/// What one call computes, in flashattn's terms (candle-flash-attn's arguments, resolved).
#[derive(Clone, Debug)]
pub(crate) struct Params {
    pub softmax_scale: f32,
    /// candle-flash-attn's `window_size_left` / `window_size_right`, as given: resolved against
    /// the key length by [`Params::options`], as FlashAttention-2 does.
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    /// One slope per query head.
    pub alibi_slopes: Option<Vec<f32>>,
    pub softcap: Option<f32>,
    /// Packed variable-length sequences: the cumulative offsets and the callers' maxima.
    pub varlen: Option<(VarLen, usize, usize)>,
}

impl Params {
    /// flashattn's options for keys of length `seqlen_k` (`max_seqlen_k` for varlen).
    ///
    /// FlashAttention-2's rules: a window side longer than the keys is no limit on that side,
    /// and `(None, Some(0))` is the causal mask (our `causal`, which every method runs; a
    /// window only the tensor-core kernels do).
    pub fn options(&self, seqlen_k: usize) -> AttentionOptions {
        let side = |w: Option<usize>| w.filter(|&w| w <= seqlen_k);
        let (left, right) = (side(self.window_left), side(self.window_right));
        let causal = left.is_none() && right == Some(0);
        let window = if causal { Window::default() } else { Window { left, right } };
        AttentionOptions {
            scale: Some(self.softmax_scale),
            causal,
            window,
            varlen: self.varlen.as_ref().map(|(v, _, _)| v.clone()),
            alibi_slopes: self.alibi_slopes.clone(),
            softcap: self.softcap,
            ..Default::default()
        }
    }

    /// The options of a call on these K/V layouts.
    pub fn options_for(&self, k: &Layout) -> AttentionOptions {
        match &self.varlen {
            Some((_, _, max_seqlen_k)) => self.options(*max_seqlen_k),
            None => self.options(k.seqlen),
        }
    }

    /// The layouts of Q, K and V (each checked: rank, contiguous last dimension).
    pub fn layouts(
        &self,
        q: &candle::Layout,
        k: &candle::Layout,
        v: &candle::Layout,
    ) -> candle::Result<[Layout; 3]> {
        let varlen = self.varlen.is_some();
        Ok([layout("q", q, varlen)?, layout("k", k, varlen)?, layout("v", v, varlen)?])
    }
}

/// flashattn's layout of a candle tensor: `(batch, seq_len, num_heads, head_size)`, or
/// `(total_tokens, num_heads, head_size)` for packed variable-length input. Strides carry over
/// as they are (narrowed, transposed or strided views need no copy); the head dimension must be
/// contiguous. The start offset is the caller's: the tensor's data begins there.
pub(crate) fn layout(name: &str, l: &candle::Layout, varlen: bool) -> candle::Result<Layout> {
    let (dims, stride) = (l.dims(), l.stride());
    let layout = match (varlen, dims, stride) {
        (false, &[b, s, h, d], &[sb, ss, sh, sd]) => {
            check_last(name, d, sd, stride)?;
            Layout {
                batch: b,
                seqlen: s,
                heads: h,
                head_dim: d,
                batch_stride: sb,
                seq_stride: ss,
                head_stride: sh,
            }
        }
        (true, &[t, h, d], &[st, sh, sd]) => {
            check_last(name, d, sd, stride)?;
            Layout {
                batch: 1,
                seqlen: t,
                heads: h,
                head_dim: d,
                batch_stride: 0,
                seq_stride: st,
                head_stride: sh,
            }
        }
        (false, _, _) => candle::bail!(
            "flash-attn expects {name} of rank 4, (batch, seq_len, num_heads, head_size); got shape {:?}",
            l.shape()
        ),
        (true, _, _) => candle::bail!(
            "flash-attn-varlen expects {name} of rank 3, (total_tokens, num_heads, head_size); got shape {:?}",
            l.shape()
        ),
    };
    Ok(layout)
}

fn check_last(name: &str, d: usize, stride: usize, strides: &[usize]) -> candle::Result<()> {
    if stride != 1 && d > 1 {
        candle::bail!("the last dim of {name} must be contiguous {strides:?}")
    }
    Ok(())
}

/// The contiguous layout of an output shaped like `like`.
pub(crate) fn contiguous(like: &Layout) -> Layout {
    Layout::bshd(like.batch, like.seqlen, like.heads, like.head_dim)
}

/// Rows of the log-sum-exp of a problem with queries laid out as `q`.
pub(crate) fn lse_len(q: &Layout) -> usize {
    q.batch * q.heads * q.seqlen
}

/// A flashattn error as a candle error (its message says what to do).
pub(crate) fn wrap(e: flashattn::Error) -> candle::Error {
    candle::Error::wrap(e)
}

/// The forward's log-sum-exp, kept for the backward (where the device holds it).
pub(crate) enum Lse {
    Cpu(Vec<f32>),
    #[cfg(feature = "cuda")]
    Cuda(candle::cuda_backend::cudarc::driver::CudaSlice<f32>),
}

/// The op behind every function of this crate.
pub(crate) struct Attn {
    pub params: Params,
    /// Whether the forward keeps its log-sum-exp for the backward (an input tracks gradients).
    pub keep_lse: bool,
    pub lse: Mutex<Option<Lse>>,
}

impl Attn {
    pub fn new(params: Params, keep_lse: bool) -> Attn {
        Attn { params, keep_lse, lse: Mutex::new(None) }
    }

    fn keep(&self, lse: Option<Lse>) {
        if let Some(lse) = lse.filter(|_| self.keep_lse) {
            *self.lse.lock().unwrap_or_else(|p| p.into_inner()) = Some(lse);
        }
    }

    pub fn name(&self) -> &'static str {
        if self.params.varlen.is_some() { "flash-attn-varlen" } else { "flash-attn" }
    }
}

/// Calls `$f::<T>` with the element type of three CPU storages of one float dtype.
macro_rules! with_cpu_dtype {
    ($f:ident, $q:expr, $k:expr, $v:expr, $($arg:expr),*) => {
        match ($q, $k, $v) {
            (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v)) => $f(q, k, v, $($arg),*),
            (CpuStorage::BF16(q), CpuStorage::BF16(k), CpuStorage::BF16(v)) => $f(q, k, v, $($arg),*),
            (CpuStorage::F32(q), CpuStorage::F32(k), CpuStorage::F32(v)) => $f(q, k, v, $($arg),*),
            (q, k, v) => candle::bail!(
                "flash-attn runs f16, bf16 and f32 with q, k and v of one dtype; got q {:?}, k {:?}, v {:?}",
                q.dtype(),
                k.dtype(),
                v.dtype()
            ),
        }
    };
}

/// The CPU forward on one element type: the output (contiguous) and, if asked, the
/// log-sum-exp.
fn cpu_forward<T: Element + candle::WithDType>(
    q: &[T],
    k: &[T],
    v: &[T],
    ls: [(&candle::Layout, Layout); 3],
    opts: &AttentionOptions,
    want_lse: bool,
) -> candle::Result<(CpuStorage, Option<Vec<f32>>)> {
    let [(ql, lq), (kl, lk), (vl, lv)] = ls;
    let lo = contiguous(&lq);
    let mut out = vec![T::default(); lo.required_len().unwrap_or(0)];
    let mut lse = want_lse.then(|| vec![0f32; lse_len(&lq)]);
    flashattn::cpu::attention(
        HostTensor { data: from(q, ql)?, layout: lq },
        HostTensor { data: from(k, kl)?, layout: lk },
        HostTensor { data: from(v, vl)?, layout: lv },
        HostTensorMut { data: &mut out, layout: lo },
        lse.as_deref_mut(),
        opts,
    )
    .map_err(wrap)?;
    Ok((T::to_cpu_storage_owned(out), lse))
}

/// A storage's elements from a layout's start offset on.
fn from<'a, T>(data: &'a [T], l: &candle::Layout) -> candle::Result<&'a [T]> {
    match data.get(l.start_offset()..) {
        Some(s) => Ok(s),
        None => candle::bail!("a layout starts at {} past its storage of {}", l.start_offset(), data.len()),
    }
}

impl Attn {
    /// The forward on the CPU: output storage and shape, and the log-sum-exp if asked.
    pub fn cpu_forward(
        &self,
        (q, ql): (&CpuStorage, &candle::Layout),
        (k, kl): (&CpuStorage, &candle::Layout),
        (v, vl): (&CpuStorage, &candle::Layout),
        want_lse: bool,
    ) -> candle::Result<(CpuStorage, Shape, Option<Vec<f32>>)> {
        let [lq, lk, lv] = self.params.layouts(ql, kl, vl)?;
        let opts = self.params.options_for(&lk);
        let ls = [(ql, lq), (kl, lk), (vl, lv)];
        let (out, lse) = with_cpu_dtype!(cpu_forward, q, k, v, ls, &opts, want_lse)?;
        Ok((out, ql.shape().clone(), lse))
    }

    /// The backward on the CPU.
    fn cpu_backward(&self, t: &[&Tensor; 5], lse: Option<&[f32]>) -> candle::Result<[Tensor; 3]> {
        let recomputed;
        let guards = t.map(|t| t.storage_and_layout());
        let cpu = |i: usize| match &*guards[i].0 {
            Storage::Cpu(s) => Ok((s, guards[i].1)),
            _ => candle::bail!("flash-attn backward: the tensors are on different devices"),
        };
        let (q, k, v, o, d_o) = (cpu(0)?, cpu(1)?, cpu(2)?, cpu(3)?, cpu(4)?);
        let lse = match lse {
            Some(lse) => lse,
            None => {
                recomputed = self.cpu_forward(q, k, v, true)?.2.unwrap_or_default();
                &recomputed
            }
        };
        let [lq, lk, lv] = self.params.layouts(q.1, k.1, v.1)?;
        let lo = layout("out", o.1, self.params.varlen.is_some())?;
        let ldo = layout("grad", d_o.1, self.params.varlen.is_some())?;
        let opts = self.params.options_for(&lk);
        let ls = [(q.1, lq), (k.1, lk), (v.1, lv), (o.1, lo), (d_o.1, ldo)];
        let (dq, dk, dv) = match (q.0, k.0, v.0, o.0, d_o.0) {
            (F16(q), F16(k), F16(v), F16(o), F16(d_o)) => cpu_backward([q, k, v, o, d_o], ls, lse, &opts)?,
            (BF16(q), BF16(k), BF16(v), BF16(o), BF16(d_o)) => {
                cpu_backward([q, k, v, o, d_o], ls, lse, &opts)?
            }
            (F32(q), F32(k), F32(v), F32(o), F32(d_o)) => cpu_backward([q, k, v, o, d_o], ls, lse, &opts)?,
            _ => candle::bail!(
                "flash-attn backward runs f16, bf16 and f32 with q, k, v, out and its gradient of one dtype; \
                 got {:?}",
                [q.0, k.0, v.0, o.0, d_o.0].map(|s| s.dtype())
            ),
        };
        let tensor = |s: CpuStorage, like: &Tensor| {
            Tensor::from_storage(Storage::Cpu(s), like.shape().clone(), BackpropOp::none(), false)
        };
        Ok([tensor(dq, t[0]), tensor(dk, t[1]), tensor(dv, t[2])])
    }
}

/// The CPU backward on one element type: dQ, dK, dV (contiguous), from Q, K, V, O and dO.
fn cpu_backward<T: Element + candle::WithDType>(
    data: [&[T]; 5],
    ls: [(&candle::Layout, Layout); 5],
    lse: &[f32],
    opts: &AttentionOptions,
) -> candle::Result<(CpuStorage, CpuStorage, CpuStorage)> {
    let [q, k, v, o, d_o] = data;
    let [(ql, lq), (kl, lk), (vl, lv), (ol, lo), (dol, ldo)] = ls;
    let (gq, gk, gv) = (contiguous(&lq), contiguous(&lk), contiguous(&lv));
    let zeros = |l: &Layout| vec![T::default(); l.required_len().unwrap_or(0)];
    let (mut dq, mut dk, mut dv) = (zeros(&gq), zeros(&gk), zeros(&gv));
    flashattn::cpu::attention_backward(
        HostTensor { data: from(q, ql)?, layout: lq },
        HostTensor { data: from(k, kl)?, layout: lk },
        HostTensor { data: from(v, vl)?, layout: lv },
        HostTensor { data: from(o, ol)?, layout: lo },
        lse,
        HostTensor { data: from(d_o, dol)?, layout: ldo },
        Gradients {
            dq: HostTensorMut { data: &mut dq, layout: gq },
            dk: HostTensorMut { data: &mut dk, layout: gk },
            dv: HostTensorMut { data: &mut dv, layout: gv },
        },
        opts,
    )
    .map_err(wrap)?;
    Ok((T::to_cpu_storage_owned(dq), T::to_cpu_storage_owned(dk), T::to_cpu_storage_owned(dv)))
}

impl CustomOp3 for Attn {
    fn name(&self) -> &'static str {
        Attn::name(self)
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        ql: &candle::Layout,
        k: &CpuStorage,
        kl: &candle::Layout,
        v: &CpuStorage,
        vl: &candle::Layout,
    ) -> candle::Result<(CpuStorage, Shape)> {
        let (out, shape, lse) = self.cpu_forward((q, ql), (k, kl), (v, vl), self.keep_lse)?;
        self.keep(lse.map(Lse::Cpu));
        Ok((out, shape))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        q: &candle::CudaStorage,
        ql: &candle::Layout,
        k: &candle::CudaStorage,
        kl: &candle::Layout,
        v: &candle::CudaStorage,
        vl: &candle::Layout,
    ) -> candle::Result<(candle::CudaStorage, Shape)> {
        let (out, shape, lse) = self.cuda_forward((q, ql), (k, kl), (v, vl), self.keep_lse)?;
        self.keep(lse.map(Lse::Cuda));
        Ok((out, shape))
    }

    fn bwd(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> candle::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // The upstream gradient is often a broadcast (a sum's): flashattn wants its rows.
        let grad = if grad.is_contiguous() { grad.clone() } else { grad.contiguous()? };
        let t = [q, k, v, out, &grad];
        let saved = self.lse.lock().unwrap_or_else(|p| p.into_inner());
        let [dq, dk, dv] = match (q.device(), saved.as_ref()) {
            (candle::Device::Cpu, Some(Lse::Cpu(lse))) => self.cpu_backward(&t, Some(lse))?,
            (candle::Device::Cpu, _) => self.cpu_backward(&t, None)?,
            #[cfg(feature = "cuda")]
            (candle::Device::Cuda(_), Some(Lse::Cuda(lse))) => self.cuda_backward(&t, Some(lse))?,
            #[cfg(feature = "cuda")]
            (candle::Device::Cuda(_), _) => self.cuda_backward(&t, None)?,
            (device, _) => candle::bail!("flash-attn backward: no implementation on {device:?}"),
        };
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

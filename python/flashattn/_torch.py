"""The PyTorch layer: outputs from PyTorch's allocator, work on PyTorch's current stream,
gradients through ``torch.autograd.Function`` with the library's backward. Everything else
(checks of devices, dtypes, shapes, strides; which features run where) is the core's.

Decoding calls this once per layer and token, so the per-call Python is kept short: tensors go
to the core as DLPack capsules from PyTorch's C exporter (not through ``__dlpack__``), the stream
is read as a raw handle, and calls that record no graph skip ``autograd.Function``.
"""

import contextlib

import torch
import torch.utils.dlpack

from . import _core
from .interface import alibi_rows, check_max_seqlen, lse_shape, softcap_option, window

# Looked up once, not per call.
_Tensor = torch.Tensor
_to_dlpack = torch.utils.dlpack.to_dlpack
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_forward_ad = torch.autograd.forward_ad
_NO_GUARD = contextlib.nullcontext()


def _stream(x):
    """PyTorch's current stream on ``x``'s device, as the handle the core queues work on."""
    if not x.is_cuda:
        return None
    if _raw_stream is not None:
        # (What ``torch.cuda.current_stream(x.device).cuda_stream`` says, without making a Stream.)
        return _raw_stream(x.get_device())
    return torch.cuda.current_stream(x.device).cuda_stream


def _on_device(x):
    """PyTorch's current device set to ``x``'s for the call, so that DLPack's stream handshake
    (``__dlpack__(stream=...)``) compares with the current stream of the right device."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _export(q, tensors):
    """The call's tensors as the core takes them, and the context to call it in.

    Plain tensors go as DLPack capsules from PyTorch's C exporter
    (``torch.utils.dlpack.to_dlpack``). ``Tensor.__dlpack__`` would give the same capsule after a
    stream handshake that is a no-op here (the core queues its work on PyTorch's current stream
    of the tensors' device, the stream the handshake would order against), and costs
    microseconds of Python per tensor. Tensor subclasses (``__torch_function__``) keep their own
    ``__dlpack__``, with the current device set for its handshake, as before."""
    if all(x is None or type(x) is _Tensor for x in tensors):
        return [None if x is None else _to_dlpack(x) for x in tensors], _NO_GUARD
    return list(tensors), _on_device(q)


def _host_capsule(x):
    """A host tensor for the core (offsets, slopes, page tables) as a capsule; other values as
    they are."""
    return _to_dlpack(x) if type(x) is _Tensor else x


def _core_options(options):
    """The options as the core takes them: host tensors as capsules (the options keep the
    tensors, for the backward)."""
    if options["alibi_slopes"] is None and options["cu_seqlens_q"] is None:
        return options
    return {key: _host_capsule(value) for key, value in options.items()}


def _empty_out(q):
    """A contiguous tensor of ``q``'s shape, dtype and device (``torch.empty(q.shape, ...)``;
    ``empty_like`` is quicker, and gives the same for a plain tensor)."""
    if type(q) is _Tensor:
        return torch.empty_like(q, memory_format=torch.contiguous_format)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _maybe_contiguous(x):
    # As flash_attn: only a head dimension that is not contiguous costs a copy.
    return x.contiguous() if x is not None and x.stride(-1) != 1 else x


def _detached(x):
    """``x.detach()``, skipped for a plain tensor outside any graph (the same tensor then)."""
    return x if type(x) is _Tensor and not x.requires_grad else x.detach()


def _host(x, name):
    """An index tensor (or int list) as int32 in host memory (a CUDA tensor is copied)."""
    if isinstance(x, torch.Tensor):
        if x.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name} must be int32, not {x.dtype}")
        return x.detach().to(device="cpu", dtype=torch.int32)
    return torch.tensor(x, dtype=torch.int32)


def _alibi(alibi_slopes):
    if alibi_slopes is None:
        return None
    slopes = alibi_slopes.detach().to(device="cpu", dtype=torch.float32)
    return alibi_rows(slopes, tuple(slopes.shape)).contiguous()


def varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """Host copies of the offsets, checked against ``max_seqlen_*``."""
    cu_q, cu_k = _host(cu_seqlens_q, "cu_seqlens_q"), _host(cu_seqlens_k, "cu_seqlens_k")
    check_max_seqlen(cu_q.tolist(), max_seqlen_q, "q")
    check_max_seqlen(cu_k.tolist(), max_seqlen_k, "k")
    return cu_q, cu_k


def _forward(q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, train=False):
    """The forward on detached ``q, k, v``: returns them as run (a head dimension that was not
    contiguous copied), the output, the log-sum-exp, the options (for the backward) and, with
    ``train`` on CUDA, the training forward's residuals ``(o_lo, rows)`` where its kernel keeps
    them (else ``None``): one tensor of the output's size and two float32 per row, with which the
    backward skips a pass over the keys (about a fifth of its time)."""
    q, k, v = _maybe_contiguous(q), _maybe_contiguous(k), _maybe_contiguous(v)
    out = _empty_out(q)
    lse = torch.empty(lse_shape(q, varlen is not None), dtype=torch.float32, device=q.device)
    options = dict(
        softmax_scale=softmax_scale,
        causal=causal,
        **window(window_size),
        softcap=softcap_option(softcap),
        alibi_slopes=_alibi(alibi_slopes),
        cu_seqlens_q=None if varlen is None else varlen[0],
        cu_seqlens_k=None if varlen is None else varlen[1],
    )
    if train and q.is_cuda:
        o_lo = torch.empty_like(out)
        rows = torch.empty((2 * lse.numel(),), dtype=torch.float32, device=q.device)
        args, guard = _export(q, (q, k, v, out, lse, o_lo, rows))
        with guard:
            _, kept = _core.forward_train(*args, stream=_stream(q), **_core_options(options))
        return q, k, v, out, lse, options, (o_lo, rows) if kept else None
    args, guard = _export(q, (q, k, v, out, lse))
    with guard:
        _core.forward(*args, stream=_stream(q), **_core_options(options))
    return q, k, v, out, lse, options, None


class FlashAttnFunc(torch.autograd.Function):
    """Attention with the library's forward and backward; ``varlen`` is ``None`` or the host
    offsets ``(cu_seqlens_q, cu_seqlens_k)``."""

    @staticmethod
    def forward(ctx, q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic):
        q, k, v, out, lse, options, residuals = _forward(
            q.detach(), k.detach(), v.detach(), varlen, softmax_scale, causal, window_size, softcap,
            alibi_slopes, train=True,
        )
        ctx.save_for_backward(q, k, v, out, lse, *(residuals or ()))
        ctx.options = options
        ctx.deterministic = deterministic
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        # (The saved output is the Function's own, which requires grad: DLPack exports detached
        # tensors only.)
        q, k, v, out, lse, *residuals = (t.detach() for t in ctx.saved_tensors)
        dout = _maybe_contiguous(dout.detach())
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        args, guard = _export(q, (q, k, v, out, lse, dout, dq, dk, dv, *residuals))
        kept = dict(zip(("o_lo", "rows"), args[9:]))
        with guard:
            _core.backward(
                *args[:9], deterministic=ctx.deterministic, stream=_stream(q), **kept,
                **_core_options(ctx.options),
            )
        return dq, dk, dv, None, None, None, None, None, None, None


def _records_graph(q, k, v, alibi_slopes):
    """Whether ``FlashAttnFunc.apply`` may do more than run the forward: a graph to record
    (grad mode on and an input that requires grad; ``apply`` looks at its tensor arguments),
    forward-mode AD (dual tensors exist only inside a dual level), or functorch transforms. When
    it is not, the forward runs without ``apply`` (its context and output wrapping cost several
    microseconds) and gives the same tensors."""
    if _functorch_active is None or _functorch_active():
        return True
    if getattr(_forward_ad, "_current_level", 0) >= 0:
        return True
    if not torch.is_grad_enabled():
        return False
    return (
        q.requires_grad
        or k.requires_grad
        or v.requires_grad
        or (isinstance(alibi_slopes, torch.Tensor) and alibi_slopes.requires_grad)
    )


def attention(
    q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
    return_attn_probs,
):
    if _records_graph(q, k, v, alibi_slopes):
        out, lse = FlashAttnFunc.apply(
            q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic
        )
    else:
        _, _, _, out, lse, _, _ = _forward(
            _detached(q), _detached(k), _detached(v), varlen, softmax_scale, causal, window_size,
            softcap, alibi_slopes,
        )
    if not return_attn_probs:
        return out
    # As flash_attn without dropout: an empty S_dmask.
    return out, lse, torch.empty((0,), dtype=q.dtype, device=q.device)


def with_kvcache(
    q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal, window_size,
    softcap, alibi_slopes, num_splits, return_softmax_lse,
):
    q, k, v = (None if x is None else _maybe_contiguous(_detached(x)) for x in (q, k, v))
    shape = lse_shape(q, False)
    if isinstance(cache_seqlens, int):
        cache_seqlens = [cache_seqlens] * shape[0]
    out = _empty_out(q)
    lse = torch.empty(shape, dtype=torch.float32, device=q.device)
    if cache_seqlens is not None:
        cache_seqlens = _host_capsule(_host(cache_seqlens, "cache_seqlens"))
    if block_table is not None:
        block_table = _host_capsule(_host(block_table, "block_table"))
    args, guard = _export(q, (q, _detached(k_cache), _detached(v_cache), out, lse, k, v))
    q_, k_cache_, v_cache_, out_, lse_, k_new, v_new = args
    with guard:
        _core.forward(
            q_, k_cache_, v_cache_, out_, lse_,
            softmax_scale=softmax_scale, causal=causal, **window(window_size),
            softcap=softcap_option(softcap), alibi_slopes=_host_capsule(_alibi(alibi_slopes)),
            cache_seqlens=cache_seqlens, block_table=block_table, k_new=k_new, v_new=v_new,
            num_splits=num_splits, stream=_stream(q),
        )
    return (out, lse) if return_softmax_lse else out

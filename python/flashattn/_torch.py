"""The PyTorch layer: outputs from PyTorch's allocator, work on PyTorch's current stream,
gradients through ``torch.autograd.Function`` with the library's backward. Everything else
(checks of devices, dtypes, shapes, strides; which features run where) is the core's.
"""

import contextlib

import torch

from . import _core
from .interface import alibi_rows, check_max_seqlen, lse_shape, softcap_option, window


def _stream(x):
    """PyTorch's current stream on ``x``'s device, as the handle the core queues work on."""
    return torch.cuda.current_stream(x.device).cuda_stream if x.is_cuda else None


def _on_device(x):
    """PyTorch's current device set to ``x``'s for the call, so that DLPack's stream handshake
    (``__dlpack__(stream=...)``) compares with the current stream of the right device."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _maybe_contiguous(x):
    # As flash_attn: only a head dimension that is not contiguous costs a copy.
    return x.contiguous() if x is not None and x.stride(-1) != 1 else x


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


class FlashAttnFunc(torch.autograd.Function):
    """Attention with the library's forward and backward; ``varlen`` is ``None`` or the host
    offsets ``(cu_seqlens_q, cu_seqlens_k)``."""

    @staticmethod
    def forward(ctx, q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic):
        q, k, v = (_maybe_contiguous(x.detach()) for x in (q, k, v))
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
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
        with _on_device(q):
            _core.forward(q, k, v, out, lse, stream=_stream(q), **options)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = options
        ctx.deterministic = deterministic
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        # (The saved output is the Function's own, which requires grad: DLPack exports detached
        # tensors only.)
        q, k, v, out, lse = (t.detach() for t in ctx.saved_tensors)
        dout = _maybe_contiguous(dout.detach())
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        with _on_device(q):
            _core.backward(
                q, k, v, out, lse, dout, dq, dk, dv, deterministic=ctx.deterministic,
                stream=_stream(q), **ctx.options,
            )
        return dq, dk, dv, None, None, None, None, None, None, None


def attention(
    q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
    return_attn_probs,
):
    out, lse = FlashAttnFunc.apply(
        q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic
    )
    if not return_attn_probs:
        return out
    # As flash_attn without dropout: an empty S_dmask.
    return out, lse, torch.empty((0,), dtype=q.dtype, device=q.device)


def with_kvcache(
    q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal, window_size,
    softcap, alibi_slopes, num_splits, return_softmax_lse,
):
    q, k, v = (None if x is None else _maybe_contiguous(x.detach()) for x in (q, k, v))
    shape = lse_shape(q, False)
    if isinstance(cache_seqlens, int):
        cache_seqlens = [cache_seqlens] * shape[0]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(shape, dtype=torch.float32, device=q.device)
    with _on_device(q):
        _core.forward(
            q, k_cache.detach(), v_cache.detach(), out, lse,
            softmax_scale=softmax_scale, causal=causal, **window(window_size),
            softcap=softcap_option(softcap), alibi_slopes=_alibi(alibi_slopes),
            cache_seqlens=None if cache_seqlens is None else _host(cache_seqlens, "cache_seqlens"),
            block_table=None if block_table is None else _host(block_table, "block_table"),
            k_new=k, v_new=v, num_splits=num_splits, stream=_stream(q),
        )
    return (out, lse) if return_softmax_lse else out

"""The PyTorch layer on CPU tensors (the CPU implementation): autograd against float64 autograd
of standard attention, varlen, the K/V cache in place, and the float16/bfloat16 paths. Skipped
without PyTorch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from reference import max_err  # noqa: E402

from flashattn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: E402


def sdpa64(q, k, v, causal=False, scale=None):
    """Standard attention in float64 with PyTorch's autograd: (b, s, h, d) tensors, GQA by
    repetition, the bottom-right causal mask; rows without keys give 0."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k, v = (x.repeat_interleave(h // hk, dim=2) for x in (k, v))
    scale = d**-0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v)


def leaves(*tensors, dtype=torch.float32):
    return [t.detach().to(dtype).requires_grad_() for t in tensors]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 33, 41, 4, 2, 32), (1, 40, 17, 2, 2, 24), (2, 1, 70, 8, 1, 64)])
def test_autograd_matches_float64(shape, causal):
    b, sq, sk, h, hk, d = shape
    gen = torch.Generator().manual_seed(0)
    q0, k0, v0 = (torch.randn(b, n, hh, d, generator=gen) for n, hh in ((sq, h), (sk, hk), (sk, hk)))
    dout = torch.randn(b, sq, h, d, generator=gen)
    q, k, v = leaves(q0, k0, v0)
    out = flash_attn_func(q, k, v, causal=causal)
    out.backward(dout)
    q64, k64, v64 = leaves(q0, k0, v0, dtype=torch.float64)
    ref = sdpa64(q64, k64, v64, causal=causal)
    ref.backward(dout.double())
    assert max_err(out.detach().numpy(), ref.detach().numpy()) < 1e-5
    for ours, r in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert ours.shape == r.shape
        assert max_err(ours.numpy(), r.numpy()) < 1e-4


def test_return_conventions_and_no_copies():
    q, k, v = (torch.randn(1, 9, 2, 16) for _ in range(3))
    out = flash_attn_func(q, k, v)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    out, lse, s_dmask = flash_attn_func(q, k, v, return_attn_probs=True)
    assert lse.shape == (1, 2, 9) and lse.dtype == torch.float32 and s_dmask.numel() == 0
    # A (b, h, s, d) tensor seen as (b, s, h, d): same result without a copy.
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_t.is_contiguous()
    assert torch.equal(flash_attn_func(q_t, k, v), out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    q, k, v = (torch.randn(2, 21, 4, 32) for _ in range(3))
    out = flash_attn_func(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
    assert out.dtype == dtype
    ref = sdpa64(q.double(), k.double(), v.double(), causal=True)
    assert max_err(out.float().numpy(), ref.numpy()) < (2e-2 if dtype == torch.bfloat16 else 3e-3)


def test_varlen_autograd():
    lens = [5, 0, 12, 7]
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lens)]), dtype=torch.int32)
    total = int(cu[-1])
    q0, k0, v0 = (torch.randn(total, 4, 16) for _ in range(3))
    q, k, v = leaves(q0, k0, v0)
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    out.sum().backward()
    for i in range(len(lens)):
        s, e = int(cu[i]), int(cu[i + 1])
        if s == e:
            continue
        q64, k64, v64 = leaves(q0[None, s:e], k0[None, s:e], v0[None, s:e], dtype=torch.float64)
        ref = sdpa64(q64, k64, v64, causal=True)
        ref.sum().backward()
        assert max_err(out[s:e].detach().numpy(), ref[0].detach().numpy()) < 1e-5
        assert max_err(q.grad[s:e].numpy(), q64.grad[0].numpy()) < 1e-4
        assert max_err(k.grad[s:e].numpy(), k64.grad[0].numpy()) < 1e-4


def test_kvcache_in_place():
    kc, vc = torch.zeros(2, 32, 1, 8), torch.zeros(2, 32, 1, 8)
    q, kn, vn = torch.randn(2, 1, 2, 8), torch.randn(2, 1, 1, 8), torch.randn(2, 1, 1, 8)
    out, lse = flash_attn_with_kvcache(
        q, kc, vc, k=kn, v=vn, cache_seqlens=torch.tensor([3, 9], dtype=torch.int32),
        return_softmax_lse=True,
    )
    assert torch.equal(kc[0, 3], kn[0, 0]) and torch.equal(vc[1, 9], vn[1, 0])
    assert lse.shape == (2, 2, 1) and out.shape == q.shape


def test_errors():
    q = torch.randn(1, 4, 2, 8)
    with pytest.raises(NotImplementedError, match="dropout"):
        flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(TypeError, match="float64"):
        flash_attn_func(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="4-D"):
        flash_attn_func(q[0], q, q)


def test_no_graph_without_grad():
    """Calls that record no graph (no_grad, inference mode, inputs that need no grad) skip
    autograd.Function and give the same tensors; an input that needs grad (ALiBi slopes too)
    records one."""
    q, k, v = (torch.randn(1, 9, 2, 16) for _ in range(3))
    want = flash_attn_func(*leaves(q, k, v), causal=True)
    assert want.grad_fn is not None
    for context in (torch.no_grad, torch.inference_mode, torch.enable_grad):
        with context():
            out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        assert out.grad_fn is None and not out.requires_grad and not lse.requires_grad
        assert torch.equal(out, want.detach()) and out.is_contiguous()
    with torch.no_grad():
        assert flash_attn_func(*leaves(q, k, v), causal=True).grad_fn is None
    slopes = torch.tensor([0.5, 0.25], requires_grad=True)
    assert flash_attn_func(q, k, v, alibi_slopes=slopes).requires_grad


class Subclass(torch.Tensor):
    """A tensor subclass: it goes through its own ``__dlpack__`` (PyTorch's stream handshake), not
    the capsule fast path."""


def test_tensor_subclasses():
    q, k, v = (torch.randn(1, 9, 2, 16) for _ in range(3))
    want = flash_attn_func(q, k, v, causal=True)
    sub = [x.as_subclass(Subclass) for x in (q, k, v)]
    assert torch.equal(flash_attn_func(*sub, causal=True), want)
    q_, k_, v_ = leaves(*sub)
    out = flash_attn_func(q_, k_, v_, causal=True)
    out.sum().backward()
    q2, k2, v2 = leaves(q, k, v)
    flash_attn_func(q2, k2, v2, causal=True).sum().backward()
    assert torch.equal(q_.grad, q2.grad) and torch.equal(v_.grad, v2.grad)


def test_kvcache_host_arrays_and_alibi():
    """cache_seqlens as an int, a list or a tensor, a page table, and ALiBi slopes: host arrays
    that reach the core as capsules give what NumPy's path gives."""
    kc, vc = torch.randn(2, 32, 1, 8), torch.randn(2, 32, 1, 8)
    q = torch.randn(2, 1, 2, 8)
    slopes = torch.tensor([0.5, 0.25])
    outs = [
        flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, alibi_slopes=slopes)
        for lens in (9, [9, 9], torch.tensor([9, 9], dtype=torch.int32))
    ]
    want = flash_attn_with_kvcache(
        q.numpy(), kc.numpy(), vc.numpy(), cache_seqlens=9, alibi_slopes=slopes.numpy()
    )
    for out in outs:
        assert np.array_equal(out.numpy(), want)
    pages_k, pages_v = kc.reshape(4, 16, 1, 8), vc.reshape(4, 16, 1, 8)
    table = torch.arange(4, dtype=torch.int32).reshape(2, 2)
    paged = flash_attn_with_kvcache(q, pages_k, pages_v, cache_seqlens=9, block_table=table, alibi_slopes=slopes)
    assert torch.equal(paged, outs[0])


def test_forward_ad_and_transforms_still_see_the_function():
    """Dual tensors and functorch transforms go through autograd.Function (which has no jvp or
    vmap rule: its errors, not a silently dropped tangent)."""
    import torch.autograd.forward_ad as fwAD

    q, k, v = (torch.randn(1, 4, 2, 8) for _ in range(3))
    with fwAD.dual_level():
        with pytest.raises(NotImplementedError, match="jvp"):
            flash_attn_func(fwAD.make_dual(q, torch.randn_like(q)), k, v)
    with pytest.raises(RuntimeError, match="functorch transforms"):
        torch.func.vmap(lambda x: flash_attn_func(x, k[0], v[0]))(q[:, None])

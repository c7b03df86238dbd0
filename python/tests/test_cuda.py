"""The GPU path through PyTorch: outputs, log-sum-exps and gradients against float64 standard
attention, with FlashAttention's rule (at most twice the error of PyTorch's own attention in the
input dtype), PyTorch's current stream (a side stream), layouts without copies, and errors for
wrong devices, dtypes and shapes. Skipped without a CUDA device."""

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

from flashattn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())


def bottom_right(sq, sk, device):
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return j <= i + sk - sq


def standard(q, k, v, causal, scale=None):
    """PyTorch's attention on (b, s, h, d) tensors in their own dtype (GQA by repetition; the
    bottom-right causal mask as an explicit mask, since SDPA's is_causal is top-left)."""
    h, hk = q.shape[2], k.shape[2]
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    kt, vt = (x.repeat_interleave(h // hk, dim=1) for x in (kt, vt))
    mask = bottom_right(q.shape[1], k.shape[1], q.device) if causal else None
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, scale=scale).transpose(1, 2)


def lse64(q, k, causal, scale=None):
    h, hk, d = q.shape[2], k.shape[2], q.shape[3]
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double().repeat_interleave(h // hk, dim=2))
    s = s * (d**-0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(~bottom_right(q.shape[1], k.shape[1], q.device), float("-inf"))
    return torch.logsumexp(s, dim=-1)


def err(a, b):
    return (a.double() - b.double()).abs().max().item()


def inputs(b, sq, sk, h, hk, d, dtype, grad=False, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    mk = lambda n, hh: torch.randn(b, n, hh, d, device=DEV, dtype=dtype, generator=gen)  # noqa: E731
    q, k, v = mk(sq, h), mk(sk, hk), mk(sk, hk)
    return [x.requires_grad_(grad) for x in (q, k, v)]


SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim); causal shapes keep seqlen_q ≤ seqlen_k
    # so that every row sees a key (PyTorch's attention gives NaN for rows without one).
    (2, 128, 128, 8, 8, 64),
    (1, 97, 1025, 4, 2, 128),
    (3, 1, 513, 32, 8, 128),  # decoding, GQA
    (2, 113, 203, 4, 4, 59),  # odd head dim
    (1, 256, 256, 2, 1, 256),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_forward(shape, causal, dtype):
    q, k, v = inputs(*shape, dtype)
    out, lse, _ = flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    ref = standard(q.double(), k.double(), v.double(), causal)
    base = standard(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == dtype and out.device == q.device
    assert err(out, ref) <= 2 * err(base, ref) + 1e-5
    want = lse64(q, k, causal)
    assert (lse.double() - want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "shape",
    [(2, 128, 128, 8, 8, 64), (1, 97, 300, 4, 2, 128), (2, 64, 64, 4, 4, 32), (1, 200, 330, 4, 2, 256)],
)
def test_backward(shape, causal):
    dtype = torch.bfloat16
    q, k, v = inputs(*shape, dtype, grad=True)
    dout = torch.randn_like(q)
    out = flash_attn_func(q, k, v, causal=causal)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = torch.autograd.grad(standard(q64, k64, v64, causal), (q64, k64, v64), dout.double())
    qb, kb, vb = (x.detach().clone().requires_grad_() for x in (q, k, v))
    base = torch.autograd.grad(standard(qb, kb, vb, causal), (qb, kb, vb), dout)
    for name, ours, r, b in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, base):
        assert err(ours, r) <= 2 * err(b, r) + 1e-4, name


def modified(q, k, v, causal, softcap, slopes):
    """Standard attention with a softcap and ALiBi (FlashAttention's: c·tanh(s/c), then
    −slope_h·|i + sk − sq − j|), in the tensors' own dtype, differentiable."""
    h, hk, d = q.shape[2], k.shape[2], q.shape[3]
    kt, vt = (x.repeat_interleave(h // hk, dim=2) for x in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, kt) * d**-0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[1], k.shape[1]
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    dist = (i + sk - sq - j).abs().to(s.dtype)
    s = s - slopes.to(s.dtype)[None, :, None, None] * dist
    if causal:
        s = s.masked_fill(~bottom_right(sq, sk, q.device), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", p, vt)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_softcap_and_alibi_forward_and_backward(causal, dtype):
    # The tensor-core kernels' masked instances, forward and backward (GQA, Nq < Nk).
    q, k, v = inputs(1, 97, 300, 4, 2, 128, dtype, grad=True, seed=5)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625], device=DEV)
    dout = torch.randn_like(q)
    out = flash_attn_func(q, k, v, causal=causal, softcap=20.0, alibi_slopes=slopes)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref_out = modified(q64, k64, v64, causal, 20.0, slopes)
    ref = torch.autograd.grad(ref_out, (q64, k64, v64), dout.double())
    qb, kb, vb = (x.detach().clone().requires_grad_() for x in (q, k, v))
    base_out = modified(qb, kb, vb, causal, 20.0, slopes)
    base = torch.autograd.grad(base_out, (qb, kb, vb), dout)
    assert err(out, ref_out) <= 2 * err(base_out, ref_out) + 1e-5
    for name, ours, r, b in zip(("dq", "dk", "dv"), grads, ref, base):
        assert err(ours, r) <= 2 * err(b, r) + 1e-4, name


@pytest.mark.parametrize("causal", [False, True])
def test_training_forward_keeps_residuals_on_hopper(causal):
    """On sm_90 the autograd Function's forward is the Hopper kernel's training forward, which
    keeps O's residual and the rows' statistics; the backward reads them instead of making a
    pass over the keys. Its gradients hold the rule, on logits in the hundreds too (nearly
    one-hot rows, where `D` from O in the dtype alone would not)."""
    if torch.cuda.get_device_capability(DEV) < (9, 0):
        pytest.skip("the residuals are the Hopper kernel's (sm_90)")
    from flashattn._torch import _forward

    for scale, seed in ((None, 3), (8.0, 4)):
        q, k, v = inputs(2, 300, 333, 4, 2, 128, torch.bfloat16, grad=True, seed=seed)
        *_, residuals = _forward(q.detach(), k.detach(), v.detach(), None, scale, causal, (-1, -1), 0.0, None, train=True)
        assert residuals is not None and residuals[0].shape == q.shape
        dout = torch.randn_like(q)
        out = flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
        ref = torch.autograd.grad(standard(q64, k64, v64, causal, scale), (q64, k64, v64), dout.double())
        qb, kb, vb = (x.detach().clone().requires_grad_() for x in (q, k, v))
        base = torch.autograd.grad(standard(qb, kb, vb, causal, scale), (qb, kb, vb), dout)
        for name, ours, r, b in zip(("dq", "dk", "dv"), grads, ref, base):
            assert torch.isfinite(ours).all(), name
            assert err(ours, r) <= 2 * err(b, r) + 1e-4, (name, scale)


def test_deterministic_backward_is_reproducible():
    q, k, v = inputs(2, 256, 256, 4, 4, 64, torch.float16, grad=True)
    dout = torch.randn_like(q)
    runs = []
    for _ in range(3):
        out = flash_attn_func(q, k, v, causal=True, deterministic=True)
        runs.append(torch.autograd.grad(out, (q, k, v), dout))
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, runs[0]))


def test_layouts_without_copies():
    """(b, h, s, d) memory seen as (b, s, h, d), and K/V slices of one packed tensor."""
    q, k, v = inputs(2, 64, 64, 4, 4, 64, torch.float16)
    want = flash_attn_func(q, k, v, causal=True)
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)
    kv = torch.stack([k, v], dim=2)
    out = flash_attn_func(q_t, kv[:, :, 0], kv[:, :, 1], causal=True)
    assert err(out, want) == 0.0


def test_side_stream():
    """Work runs on PyTorch's current stream: inputs written on a side stream after a long
    sleep there are the ones the kernel reads."""
    q, k, v = inputs(1, 512, 512, 8, 8, 64, torch.float16)
    new_q = torch.randn_like(q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        q.copy_(new_q)
        out = flash_attn_func(q, k, v)
    side.synchronize()
    assert err(out, standard(new_q.double(), k.double(), v.double(), False)) < 1e-2


def test_varlen():
    lens_q, lens_k = [5, 0, 130, 1], [9, 3, 200, 64]
    cu_q = torch.tensor([0, 5, 5, 135, 136], dtype=torch.int32, device=DEV)
    cu_k = torch.tensor([0, 9, 12, 212, 276], dtype=torch.int32, device=DEV)
    q = torch.randn(136, 4, 64, device=DEV, dtype=torch.bfloat16)
    k, v = (torch.randn(276, 2, 64, device=DEV, dtype=torch.bfloat16) for _ in range(2))
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True)
    for i in range(4):
        qs, qe, ks, ke = (int(x) for x in (cu_q[i], cu_q[i + 1], cu_k[i], cu_k[i + 1]))
        if qe > qs:
            ref = standard(q[None, qs:qe].double(), k[None, ks:ke].double(), v[None, ks:ke].double(), True)
            assert err(out[qs:qe], ref[0]) < 2e-2


def test_float32_runs_on_cuda_cores():
    q, k, v = inputs(1, 77, 77, 2, 2, 48, torch.float32)
    out = flash_attn_func(q, k, v, causal=True)
    assert err(out, standard(q.double(), k.double(), v.double(), True)) < 1e-5


def test_planner_refusals_are_not_implemented_errors():
    q, k, v = inputs(1, 16, 16, 2, 2, 64, torch.float32, grad=True)
    out = flash_attn_func(q, k, v)
    with pytest.raises(NotImplementedError, match="does not support"):
        out.sum().backward()  # the GPU backward runs f16 and bf16
    # A feature the GPU may not run yet: either it runs, or the planner's reason is raised.
    q, k, v = inputs(1, 16, 64, 2, 2, 64, torch.float16)
    try:
        out = flash_attn_with_kvcache(q, k, v, cache_seqlens=40)
    except NotImplementedError as e:
        assert "does not support" in str(e)
    else:
        assert err(out, standard(q.double(), k[:, :40].double(), v[:, :40].double(), False)) < 1e-2


def test_paged_kv_cache_decode():
    # Two sequences over a shuffled pool of 16-token pages (two spare), GQA 8:2, one query token
    # each: the GPU's decode instances read through the table; unused rows hold NaN.
    b, h, hk, d, page, ppe = 2, 8, 2, 64, 16, 4
    gen = torch.Generator(device=DEV).manual_seed(3)
    lens = [37, 64]
    order = torch.randperm(b * ppe + 2, generator=gen, device=DEV).to(torch.int32)
    table = order[: b * ppe].reshape(b, ppe).contiguous()
    k_pool = torch.full((b * ppe + 2, page, hk, d), float("nan"), device=DEV, dtype=torch.float16)
    v_pool = k_pool.clone()
    q = torch.randn(b, 1, h, d, device=DEV, dtype=torch.float16, generator=gen)
    k = torch.randn(b, ppe * page, hk, d, device=DEV, dtype=torch.float16, generator=gen)
    v = torch.randn(b, ppe * page, hk, d, device=DEV, dtype=torch.float16, generator=gen)
    for e in range(b):
        for j in range(lens[e]):
            pg, row = int(table[e, j // page]), j % page
            k_pool[pg, row], v_pool[pg, row] = k[e, j], v[e, j]
    seqlens = torch.tensor(lens, device=DEV, dtype=torch.int32)
    out = flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=seqlens, block_table=table)
    for e in range(b):
        n = lens[e]
        ref = standard(q[e : e + 1].double(), k[e : e + 1, :n].double(), v[e : e + 1, :n].double(), False)
        assert err(out[e : e + 1], ref) < 1e-2


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_append_on_gpu(paged):
    # New tokens appended in place (crossing a 16-token page boundary, and into an empty entry),
    # then attention to the grown cache with the causal mask aligned to its end.
    b, h, hk, d, page, ppe, n = 3, 4, 2, 64, 16, 4, 3
    gen = torch.Generator(device=DEV).manual_seed(5)
    lens = [14, 0, 30]
    mk = lambda *shape: torch.randn(*shape, device=DEV, dtype=torch.bfloat16, generator=gen)  # noqa: E731
    q, k_new, v_new = mk(b, n, h, d), mk(b, n, hk, d), mk(b, n, hk, d)
    k_dense, v_dense = mk(b, ppe * page, hk, d), mk(b, ppe * page, hk, d)
    if paged:
        order = torch.randperm(b * ppe, generator=gen, device=DEV).to(torch.int32)
        table = order.reshape(b, ppe).contiguous()
        k_cache = torch.empty(b * ppe, page, hk, d, device=DEV, dtype=torch.bfloat16)
        v_cache = torch.empty_like(k_cache)
        for e in range(b):
            for s in range(ppe):
                k_cache[int(table[e, s])] = k_dense[e, s * page : (s + 1) * page]
                v_cache[int(table[e, s])] = v_dense[e, s * page : (s + 1) * page]
        extra = {"block_table": table}
    else:
        k_cache, v_cache = k_dense.clone(), v_dense.clone()
        extra = {}
    seqlens = torch.tensor(lens, device=DEV, dtype=torch.int32)
    out = flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=seqlens, causal=True, **extra)
    for e in range(b):
        L = lens[e]
        k_dense[e, L : L + n], v_dense[e, L : L + n] = k_new[e], v_new[e]
        ref = standard(q[e : e + 1].double(), k_dense[e : e + 1, : L + n].double(), v_dense[e : e + 1, : L + n].double(), True)
        assert err(out[e : e + 1], ref) < 2e-2
        for j in range(L, L + n):
            row = (int(table[e, j // page]), j % page) if paged else (e, j)
            assert torch.equal(k_cache[row], k_new[e, j - L]) and torch.equal(v_cache[row], v_new[e, j - L])


def test_wrong_devices_dtypes_shapes():
    q, k, v = inputs(1, 16, 16, 2, 2, 64, torch.float16)
    with pytest.raises(ValueError, match="same device"):
        flash_attn_func(q, k.cpu(), v)
    with pytest.raises(TypeError, match="float64"):
        flash_attn_func(q.double(), k.double(), v.double())
    with pytest.raises(TypeError, match="one dtype"):
        flash_attn_func(q, k.bfloat16(), v)
    with pytest.raises(ValueError, match="4-D"):
        flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match="multiple of k/v heads"):
        flash_attn_func(q, k[:, :, :1].expand(1, 16, 3, 64), v[:, :, :1].expand(1, 16, 3, 64))
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (DEV.index + 1) % torch.cuda.device_count())
        with pytest.raises(ValueError, match="same device"):
            flash_attn_func(q, k.to(other), v)
        # All on another device than the current one: runs there, on that device's stream.
        q2, k2, v2 = (x.to(other) for x in (q, k, v))
        out = flash_attn_func(q2, k2, v2)
        assert out.device == other
        assert err(out.to(DEV), flash_attn_func(q, k, v)) == 0.0

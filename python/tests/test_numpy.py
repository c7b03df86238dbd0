"""NumPy arrays through DLPack on the CPU implementation: outputs, log-sum-exps and gradients
against the float64 reference (FlashAttention's rule: at most twice the error of standard
attention computed in float32 from the same inputs), layouts, the K/V cache, and errors."""

import inspect

import numpy as np
import pytest
from reference import attention, max_err, varlen_attention

import flashattn
from flashattn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

RNG = np.random.default_rng(20261130)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def assert_rule(ours, ref64, base, what, eps=1e-6):
    """FlashAttention's test rule: our error ≤ 2 × the float32 baseline's, plus `eps`."""
    err, base_err = max_err(ours, ref64), max_err(base, ref64)
    assert err <= 2 * base_err + eps, f"{what}: error {err:.3g}, baseline {base_err:.3g}"


def check_forward(q, k, v, out, lse, eps=1e-6, **kw):
    ref_out, ref_lse, _ = attention(q, k, v, **kw)
    base_out, base_lse, _ = attention(q, k, v, dt=np.float32, **kw)
    base_out = base_out.astype(q.dtype)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == ref_lse.shape and lse.dtype == np.float32
    assert_rule(out, ref_out, base_out, "out", eps)
    assert_rule(lse, ref_lse, base_lse, "lse", eps)
    # Rows that see no key: output 0, log-sum-exp -inf, exactly.
    empty = np.isneginf(ref_lse)
    assert np.array_equal(np.isneginf(lse), empty)


SHAPES = [
    # (batch, seqlen_q, seqlen_k, heads, heads_kv, head_dim)
    (1, 1, 1, 1, 1, 1),
    (2, 17, 17, 4, 4, 32),
    (1, 97, 113, 4, 2, 59),  # odd lengths, odd head dim, GQA
    (2, 1, 65, 8, 1, 64),  # decoding, MQA
    (2, 33, 17, 3, 3, 40),  # seqlen_q > seqlen_k: causal rows without keys
    (1, 70, 129, 2, 1, 128),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_reference(shape, causal):
    b, sq, sk, h, hk, d = shape
    q, k, v = randn(b, sq, h, d), randn(b, sk, hk, d), randn(b, sk, hk, d)
    out, lse, s_dmask = flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert s_dmask.shape == (0,)
    check_forward(q, k, v, out, lse, causal=causal)


def test_float16():
    q, k, v = (randn(2, 41, 4, 64, dtype=np.float16) for _ in range(3))
    out, lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    check_forward(q, k, v, out, lse, eps=1e-3, causal=True)


@pytest.mark.parametrize(
    "options",
    [
        dict(window_size=(8, 0)),
        dict(window_size=(5, 3)),
        dict(window_size=(-1, 2), causal=False),
        dict(window_size=(16, -1), causal=True),
        dict(softcap=2.0),
        dict(alibi_slopes=np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32), causal=True),
        dict(softmax_scale=0.3),
    ],
)
def test_options(options):
    q, k, v = randn(2, 29, 4, 16), randn(2, 37, 2, 16), randn(2, 37, 2, 16)
    out, lse, _ = flash_attn_func(q, k, v, return_attn_probs=True, **options)
    kw = dict(causal=options.get("causal", False), window=options.get("window_size", (-1, -1)))
    kw.update(softcap=options.get("softcap", 0.0), alibi=options.get("alibi_slopes"))
    kw.update(scale=options.get("softmax_scale"))
    check_forward(q, k, v, out, lse, **kw)


def test_alibi_per_batch_rows():
    q, k, v = randn(2, 9, 2, 8), randn(2, 9, 2, 8), randn(2, 9, 2, 8)
    same = np.array([[0.5, 0.25], [0.5, 0.25]], dtype=np.float32)
    out = flash_attn_func(q, k, v, alibi_slopes=same)
    ref, _, _ = attention(q, k, v, alibi=same[0])
    assert max_err(out, ref) < 1e-5
    with pytest.raises(NotImplementedError, match="per batch entry"):
        flash_attn_func(q, k, v, alibi_slopes=np.array([[0.5, 0.25], [0.1, 0.2]], dtype=np.float32))


def ragged(lens_q, lens_k, h, hk, d):
    cu_q = np.concatenate([[0], np.cumsum(lens_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lens_k)]).astype(np.int32)
    q, k, v = randn(int(cu_q[-1]), h, d), randn(int(cu_k[-1]), hk, d), randn(int(cu_k[-1]), hk, d)
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("causal", [False, True])
def test_varlen(causal):
    lens_q, lens_k = [5, 0, 33, 1, 17], [7, 4, 33, 40, 3]
    q, k, v, cu_q, cu_k = ragged(lens_q, lens_k, 6, 2, 24)
    out, lse, _ = flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_attn_probs=True
    )
    ref_out, ref_lse, _ = varlen_attention(q, k, v, cu_q, cu_k, causal=causal)
    assert lse.shape == (6, q.shape[0])
    assert max_err(out, ref_out) < 2e-5
    assert max_err(lse, ref_lse) < 2e-5
    with pytest.raises(ValueError, match="max_seqlen_q"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 32, 40)


def test_strided_inputs_need_no_copy():
    """Transposed, sliced and broadcast inputs give the contiguous inputs' results, bit for bit
    (the CPU implementation's arithmetic does not depend on the layout)."""
    b, s, h, hk, d = 2, 23, 4, 2, 32
    q, k, v = randn(b, s, h, d), randn(b, s, hk, d), randn(b, s, hk, d)
    want, want_lse, _ = flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    # q from a (b, h, s, d) array (PyTorch's SDPA order); k and v slices of one packed array.
    q_bhsd = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    kv = np.stack([k, v], axis=2)  # (b, s, 2, hk, d)
    assert not q_bhsd.flags.c_contiguous and not kv[:, :, 0].flags.c_contiguous
    out, lse, _ = flash_attn_func(q_bhsd, kv[:, :, 0], kv[:, :, 1], causal=True, return_attn_probs=True)
    assert np.array_equal(out, want) and np.array_equal(lse, want_lse)
    # A K/V head broadcast to every query head (stride 0, a read-only view).
    k1, v1 = randn(b, s, 1, d), randn(b, s, 1, d)
    kb, vb = np.broadcast_to(k1, (b, s, h, d)), np.broadcast_to(v1, (b, s, h, d))
    assert kb.strides[2] == 0
    out = flash_attn_func(q, kb, vb)
    assert np.array_equal(out, flash_attn_func(q, k1, v1))


def test_outputs_in_caller_memory():
    """attention_forward writes outputs the caller allocated, with any non-overlapping layout."""
    q, k, v = randn(1, 19, 2, 16), randn(1, 19, 2, 16), randn(1, 19, 2, 16)
    want = flash_attn_func(q, k, v)
    big = np.full((1, 2, 19, 16), np.nan, dtype=np.float32)
    out = big.transpose(0, 2, 1, 3)  # (b, s, h, d) view of a (b, h, s, d) buffer
    plan = flashattn.attention_forward(q, k, v, out)
    assert plan == "cpu"
    assert np.array_equal(out, want)


def test_backward_matches_reference():
    b, sq, sk, h, hk, d = 2, 31, 45, 4, 2, 24
    q, k, v = randn(b, sq, h, d), randn(b, sk, hk, d), randn(b, sk, hk, d)
    dout = randn(b, sq, h, d)
    out, lse = np.empty_like(q), np.empty((b, h, sq), dtype=np.float32)
    flashattn.attention_forward(q, k, v, out, lse, causal=True)
    dq, dk, dv = np.full_like(q, np.nan), np.full_like(k, np.nan), np.full_like(v, np.nan)
    flashattn.attention_backward(q, k, v, out, lse, dout, dq, dk, dv, causal=True)
    _, _, ref = attention(q, k, v, causal=True, dout=dout)
    _, _, base = attention(q, k, v, causal=True, dout=dout, dt=np.float32)
    for name, ours, r, bse in zip(("dq", "dk", "dv"), (dq, dk, dv), ref, base):
        assert_rule(ours, r, bse, name, eps=1e-5)


def test_varlen_backward():
    q, k, v, cu_q, cu_k = ragged([3, 0, 20], [9, 5, 20], 4, 4, 16)
    dout = randn(*q.shape)
    out, lse = np.empty_like(q), np.empty((4, q.shape[0]), dtype=np.float32)
    opts = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True)
    flashattn.attention_forward(q, k, v, out, lse, **opts)
    grads = [np.empty_like(x) for x in (q, k, v)]
    flashattn.attention_backward(q, k, v, out, lse, dout, *grads, **opts)
    _, _, ref = varlen_attention(q, k, v, cu_q, cu_k, dout=dout, causal=True)
    for ours, r in zip(grads, ref):
        assert max_err(ours, r) < 1e-4


def test_kvcache_append_and_pages():
    b, cap, h, hk, d = 2, 64, 4, 2, 16
    k_cache, v_cache = randn(b, cap, hk, d), randn(b, cap, hk, d)
    q, k_new, v_new = randn(b, 1, h, d), randn(b, 1, hk, d), randn(b, 1, hk, d)
    lens = np.array([10, 40], dtype=np.int32)
    kc, vc = k_cache.copy(), v_cache.copy()
    out, lse = flash_attn_with_kvcache(
        q, kc, vc, k=k_new, v=v_new, cache_seqlens=lens, causal=True, return_softmax_lse=True
    )
    for i, n in enumerate(lens):
        assert np.array_equal(kc[i, n], k_new[i, 0]) and np.array_equal(vc[i, n], v_new[i, 0])
        assert np.array_equal(kc[i, n + 1 :], k_cache[i, n + 1 :])
        ref, ref_lse, _ = attention(q[i : i + 1], kc[i : i + 1, : n + 1], vc[i : i + 1, : n + 1], causal=True)
        assert max_err(out[i : i + 1], ref) < 1e-5 and max_err(lse[i : i + 1], ref_lse) < 1e-5
    # The same cache in 16-token pages, in shuffled order: the same results, bit for bit.
    page = 16
    order = RNG.permutation(b * cap // page).astype(np.int32)
    k_pool = np.empty((b * cap // page, page, hk, d), dtype=np.float32)
    v_pool = np.empty_like(k_pool)
    for i in range(b):
        for p in range(cap // page):
            k_pool[order[i * cap // page + p]] = k_cache[i, p * page : (p + 1) * page]
            v_pool[order[i * cap // page + p]] = v_cache[i, p * page : (p + 1) * page]
    table = order.reshape(b, cap // page)
    paged = flash_attn_with_kvcache(
        q, k_pool, v_pool, k=k_new, v=v_new, cache_seqlens=lens, block_table=table, causal=True
    )
    assert np.array_equal(paged, out)
    # An int cache_seqlens, no new tokens.
    out2 = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=11)
    ref, _, _ = attention(q, kc[:, :11], vc[:, :11])
    assert max_err(out2, ref) < 1e-5


def test_kvcache_full_is_refused_before_any_write():
    kc, vc = randn(1, 16, 1, 8), randn(1, 16, 1, 8)
    before = kc.copy()
    with pytest.raises(ValueError, match="do not fit"):
        flash_attn_with_kvcache(
            randn(1, 2, 1, 8), kc, vc, k=randn(1, 2, 1, 8), v=randn(1, 2, 1, 8), cache_seqlens=15
        )
    assert np.array_equal(kc, before)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda q, k, v: flash_attn_func(q.astype(np.float64), k, v), TypeError, "float64"),
        (lambda q, k, v: flash_attn_func(q.astype(np.int32), k, v), TypeError, "int32"),
        (lambda q, k, v: flash_attn_func(q, k.astype(np.float16), v), TypeError, "one dtype"),
        (lambda q, k, v: flash_attn_func(q[0], k, v), ValueError, "4-D"),
        (lambda q, k, v: flash_attn_func(q, randn(2, 9, 3, 16), randn(2, 9, 3, 16)), ValueError,
         "multiple of k/v heads"),
        (lambda q, k, v: flash_attn_func(q, k[..., :8], v), ValueError, "head_dim"),
        (lambda q, k, v: flash_attn_func(q, k, v[:, :5]), ValueError, "seqlen"),
        (lambda q, k, v: flash_attn_func(q[..., ::2], k[..., ::2], v[..., ::2]), ValueError, "contiguous"),
        (lambda q, k, v: flash_attn_func(q[:, ::-1], k, v), ValueError, "negative stride"),
        (lambda q, k, v: flash_attn_func(q.tolist(), k, v), TypeError, "DLPack"),
        (lambda q, k, v: flash_attn_func(q, k, v, dropout_p=0.1), NotImplementedError, "dropout"),
        (lambda q, k, v: flash_attn_func(q, k, v, window_size=(-2, 0)), ValueError, "window_size"),
        (lambda q, k, v: flash_attn_func(q, k, v, softcap=-1.0), ValueError, "softcap"),
        (lambda q, k, v: flash_attn_func(q, k, v, softmax_scale=-1.0), ValueError, "scale"),
        (lambda q, k, v: flash_attn_func(q, k, v, alibi_slopes=np.ones(3, np.float32)), ValueError, "alibi"),
        (lambda q, k, v: flashattn.attention_forward(q, k, v, q), ValueError, "overlaps"),
        (lambda q, k, v: flashattn.attention_forward(q, k, v, np.empty_like(q), np.empty(3, np.float32)),
         ValueError, "lse"),
        (lambda q, k, v: flash_attn_with_kvcache(q, k, v, rotary_cos=q), NotImplementedError, "rotary"),
        (lambda q, k, v: flash_attn_with_kvcache(q, k, v, cache_batch_idx=q), NotImplementedError, "cache_batch_idx"),
        (lambda q, k, v: flash_attn_with_kvcache(q, k, v, cache_leftpad=q), NotImplementedError, "cache_leftpad"),
        (lambda q, k, v: flash_attn_with_kvcache(q, k, v, k=k), ValueError, "both or neither"),
        (lambda q, k, v: flash_attn_with_kvcache(q, k, v, k=k, v=v), ValueError, "cache_seqlens"),
        (lambda q, k, v: flash_attn_varlen_func(q[0], k[0], v[0], [0, 9], [0, 9], 9, 9, block_table=q),
         NotImplementedError, "block_table"),
    ],
)
def test_errors(call, error, match):
    q, k, v = randn(2, 9, 4, 16), randn(2, 9, 2, 16), randn(2, 9, 2, 16)
    with pytest.raises(error, match=match):
        call(q, k, v)


def test_read_only_output_is_refused():
    q, k, v = randn(1, 4, 1, 8), randn(1, 4, 1, 8), randn(1, 4, 1, 8)
    out = np.empty_like(q)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        flashattn.attention_forward(q, k, v, out)


def test_nothing_written_on_error():
    q, k, v = randn(1, 4, 2, 8), randn(1, 4, 2, 8), randn(1, 4, 2, 8)
    out = np.full_like(q, np.nan)
    with pytest.raises(ValueError):
        flashattn.attention_forward(q, k, v, out, np.empty(1, np.float32))
    assert np.isnan(out).all()


# flash_attn 2.x's signatures (flash_attn/flash_attn_interface.py), to the letter.
SIGNATURES = {
    flash_attn_func: [
        ("q", None), ("k", None), ("v", None), ("dropout_p", 0.0), ("softmax_scale", None),
        ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
        ("deterministic", False), ("return_attn_probs", False),
    ],
    flash_attn_varlen_func: [
        ("q", None), ("k", None), ("v", None), ("cu_seqlens_q", None), ("cu_seqlens_k", None),
        ("max_seqlen_q", None), ("max_seqlen_k", None), ("dropout_p", 0.0), ("softmax_scale", None),
        ("causal", False), ("window_size", (-1, -1)), ("softcap", 0.0), ("alibi_slopes", None),
        ("deterministic", False), ("return_attn_probs", False), ("block_table", None),
    ],
    flash_attn_with_kvcache: [
        ("q", None), ("k_cache", None), ("v_cache", None), ("k", None), ("v", None),
        ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None), ("cache_batch_idx", None),
        ("cache_leftpad", None), ("block_table", None), ("softmax_scale", None), ("causal", False),
        ("window_size", (-1, -1)), ("softcap", 0.0), ("rotary_interleaved", True),
        ("alibi_slopes", None), ("num_splits", 0), ("return_softmax_lse", False),
    ],
}


@pytest.mark.parametrize("function", list(SIGNATURES), ids=lambda f: f.__name__)
def test_signatures_match_flash_attn(function):
    params = list(inspect.signature(function).parameters.values())
    got = [(p.name, None if p.default is inspect.Parameter.empty else p.default) for p in params]
    assert got == SIGNATURES[function]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params)


class Legacy:
    """A producer from before DLPack 1.0: no ``max_version``, unversioned ``dltensor`` capsules."""

    def __init__(self, a):
        self.a = a

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()


def test_legacy_capsules():
    q, k, v = randn(1, 11, 2, 8), randn(1, 11, 2, 8), randn(1, 11, 2, 8)
    want = flash_attn_func(q, k, v, causal=True)
    out = np.empty_like(q)
    flashattn.attention_forward(Legacy(q), Legacy(k), Legacy(v), Legacy(out), causal=True)
    assert np.array_equal(out, want)


def test_capsules_already_exported():
    """Capsules that their producer exported (``np.from_dlpack``'s input, say) are consumed as
    they are; a capsule can be consumed once."""
    q, k, v = randn(1, 11, 2, 8), randn(1, 11, 2, 8), randn(1, 11, 2, 8)
    want = flash_attn_func(q, k, v, causal=True)
    out = np.empty_like(q)
    caps = [x.__dlpack__() for x in (q, k, v, out)]
    flashattn.attention_forward(*caps, causal=True)
    assert np.array_equal(out, want)
    with pytest.raises(TypeError, match="consumed once"):
        flashattn.attention_forward(caps[0], k, v, np.empty_like(q))

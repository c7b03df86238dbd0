"""FlashAttention-2's Python API (``flash_attn`` 2.x): the same functions, argument names, order,
defaults and return values.

PyTorch tensors go through ``flashattn._torch`` (autograd, PyTorch's allocator and current
stream); other DLPack arrays (NumPy, CuPy, ...) run the forward with outputs allocated by their
own array library. Everything the library does not support raises ``NotImplementedError`` with a
message that says so; nothing is silently ignored.

Differences from ``flash_attn`` that code may notice:
- dropout is not implemented (``dropout_p`` must be 0.0) and ``return_attn_probs`` returns an
  empty ``S_dmask``, as ``flash_attn`` does without dropout;
- a query row that sees no key (causal with ``seqlen_q > seqlen_k``, windows, empty sequences) has
  output 0 and log-sum-exp ``-inf`` (``flash_attn`` writes ``+inf``);
- float32 runs too, and head dims need not be multiples of 8 (no padding copy);
- ``cu_seqlens_*``, ``cache_seqlens`` and ``block_table`` are read on the host: CUDA tensors are
  copied to the host first (a synchronisation).
"""

import sys

from . import _core


_torch_layer = None


def _torch_layer_of(x):
    """The PyTorch layer (``flashattn._torch``) if ``x`` is a PyTorch tensor, else None (torch is
    optional: the layer is imported on the first call with a tensor, and kept)."""
    global _torch_layer
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return None
    if _torch_layer is None:
        from . import _torch

        _torch_layer = _torch
    return _torch_layer


def check_dropout(dropout_p):
    if dropout_p != 0.0:
        raise NotImplementedError(
            f"dropout_p={dropout_p}: flashattn has no dropout; pass dropout_p=0.0 "
            "(as flash_attn's callers do in evaluation)"
        )


def window(window_size):
    """FlashAttention's ``window_size=(left, right)`` (-1: unbounded) as the core's keywords."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise ValueError(f"window_size must be a pair (left, right), got {window_size!r}") from None
    sides = []
    for name, side in (("left", left), ("right", right)):
        side = int(side)
        if side < -1:
            raise ValueError(f"window_size {name} is {side}: use -1 (unbounded) or a count ≥ 0")
        sides.append(None if side == -1 else side)
    return {"window_left": sides[0], "window_right": sides[1]}


def softcap_option(softcap):
    softcap = float(softcap)
    if softcap < 0.0:
        raise ValueError(f"softcap is {softcap}: use 0.0 (no softcapping) or a positive cap")
    return softcap if softcap > 0.0 else None


def check_num_splits(num_splits):
    num_splits = int(num_splits)
    if num_splits < 0:
        raise ValueError(f"num_splits is {num_splits}: use 0 (the library chooses) or a count ≥ 1")
    return num_splits if num_splits > 0 else None


def alibi_rows(slopes, shape):
    """One slope per query head: ``(nheads,)``, or ``(batch, nheads)`` with equal rows."""
    if len(shape) == 2:
        if shape[0] > 1 and not bool((slopes == slopes[0:1]).all()):
            raise NotImplementedError(
                "alibi_slopes of shape (batch, nheads) with different slopes per batch entry are "
                "not implemented: flashattn takes one slope per query head"
            )
        return slopes[0]
    if len(shape) != 1:
        raise ValueError(f"alibi_slopes must be (nheads,) or (batch, nheads), got shape {tuple(shape)}")
    return slopes


def lse_shape(q, packed):
    """The log-sum-exp's shape: ``(batch, nheads, seqlen_q)``, or ``(nheads, total_q)`` packed."""
    shape = tuple(getattr(q, "shape", ()))
    if packed and len(shape) == 3:
        return (shape[1], shape[0])
    if not packed and len(shape) == 4:
        return (shape[0], shape[2], shape[1])
    want = "3-D (total_q, nheads, headdim)" if packed else "4-D (batch, seqlen, nheads, headdim)"
    raise ValueError(f"q must be {want}, got shape {shape}")


# ---- Arrays that are not PyTorch tensors: NumPy, or any array library with __array_namespace__.


def _check_arrays(*arrays):
    for name, x in arrays:
        if not hasattr(x, "__dlpack__"):
            raise TypeError(
                f"{name} ({type(x).__name__}) does not support DLPack: pass a PyTorch tensor or a "
                "NumPy, CuPy or JAX array"
            )


def _empty(like, shape, lse=False):
    np = sys.modules.get("numpy")
    if np is not None and isinstance(like, np.ndarray):
        return np.empty(shape, dtype=np.float32 if lse else like.dtype)
    if hasattr(like, "__array_namespace__"):
        xp = like.__array_namespace__()
        return xp.empty(shape, dtype=xp.float32 if lse else like.dtype, device=like.device)
    raise TypeError(
        f"{type(like).__name__} is neither a PyTorch tensor nor a NumPy array, and has no "
        "__array_namespace__ to allocate outputs with: call flashattn.attention_forward with "
        "outputs you allocate"
    )


def _host(x):
    """Index arrays as the core reads them (host memory)."""
    np = sys.modules.get("numpy")
    if np is not None and not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        return np.from_dlpack(x)
    return x


def _alibi_host(alibi_slopes):
    if alibi_slopes is None:
        return None
    import numpy as np

    slopes = np.asarray(alibi_slopes, dtype=np.float32)
    return np.ascontiguousarray(alibi_rows(slopes, slopes.shape))


def _array_result(out, lse, return_extra):
    if not return_extra:
        return out
    return out, lse, _empty(out, (0,))


# ---- The API.


def flash_attn_func(
    q,
    k,
    v,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0,  # 0.0 means deactivated
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
):
    """Attention over ``q: (batch, seqlen_q, nheads, headdim)``, ``k, v: (batch, seqlen_k,
    nheads_k, headdim)`` (nheads divisible by nheads_k: grouped-query attention), as
    ``flash_attn.flash_attn_func``: causal masks aligned to the bottom-right corner, sliding
    windows ``[i + seqlen_k - seqlen_q - left, i + seqlen_k - seqlen_q + right]``, softcapping,
    ALiBi.

    Returns ``out`` (q's shape), or with ``return_attn_probs`` ``(out, softmax_lse, S_dmask)``:
    the float32 log-sum-exp ``(batch, nheads, seqlen_q)`` and an empty ``S_dmask`` (no dropout).
    ``deterministic`` makes the backward's dQ bit-identical from run to run.
    """
    check_dropout(dropout_p)
    _torch = _torch_layer_of(q)
    if _torch is not None:
        return _torch.attention(
            q, k, v, None, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
            return_attn_probs,
        )
    _check_arrays(("q", q), ("k", k), ("v", v))
    out, lse = _empty(q, q.shape), _empty(q, lse_shape(q, False), lse=True)
    _core.forward(
        q, k, v, out, lse, softmax_scale=softmax_scale, causal=causal, **window(window_size),
        softcap=softcap_option(softcap), alibi_slopes=_alibi_host(alibi_slopes),
    )
    return _array_result(out, lse, return_attn_probs)


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    dropout_p=0.0,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0,  # 0.0 means deactivated
    alibi_slopes=None,
    deterministic=False,
    return_attn_probs=False,
    block_table=None,
):
    """Attention over sequences of different lengths packed along the token axis, as
    ``flash_attn.flash_attn_varlen_func``: ``q: (total_q, nheads, headdim)``, ``k, v: (total_k,
    nheads_k, headdim)``, sequence ``i`` at tokens ``cu_seqlens[i]:cu_seqlens[i + 1]`` (int32,
    ``(batch + 1,)``). ``max_seqlen_*`` are checked against the offsets.

    Returns ``out``, or with ``return_attn_probs`` ``(out, softmax_lse, S_dmask)`` with the
    log-sum-exp as ``(nheads, total_q)``.
    """
    check_dropout(dropout_p)
    if block_table is not None:
        raise NotImplementedError(
            "block_table with flash_attn_varlen_func (a paged cache of variable-length sequences) "
            "is not implemented: flashattn pages fixed-length batches (flash_attn_with_kvcache)"
        )
    _torch = _torch_layer_of(q)
    if _torch is not None:
        varlen = _torch.varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
        return _torch.attention(
            q, k, v, varlen, softmax_scale, causal, window_size, softcap, alibi_slopes,
            deterministic, return_attn_probs,
        )
    cu_q, cu_k = _host(cu_seqlens_q), _host(cu_seqlens_k)
    check_max_seqlen(cu_q, max_seqlen_q, "q")
    check_max_seqlen(cu_k, max_seqlen_k, "k")
    _check_arrays(("q", q), ("k", k), ("v", v))
    out, lse = _empty(q, q.shape), _empty(q, lse_shape(q, True), lse=True)
    _core.forward(
        q, k, v, out, lse, softmax_scale=softmax_scale, causal=causal, **window(window_size),
        softcap=softcap_option(softcap), alibi_slopes=_alibi_host(alibi_slopes),
        cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
    )
    return _array_result(out, lse, return_attn_probs)


def check_max_seqlen(cu_seqlens, max_seqlen, which):
    """``max_seqlen_*`` must cover the longest sequence (FlashAttention sizes its grid by it)."""
    lengths = [int(b) - int(a) for a, b in zip(list(cu_seqlens)[:-1], list(cu_seqlens)[1:])]
    longest = max(lengths, default=0)
    if int(max_seqlen) < longest:
        raise ValueError(
            f"max_seqlen_{which} is {max_seqlen}, but cu_seqlens_{which} has a sequence of {longest} tokens"
        )


def flash_attn_with_kvcache(
    q,
    k_cache,
    v_cache,
    k=None,
    v=None,
    rotary_cos=None,
    rotary_sin=None,
    cache_seqlens=None,
    cache_batch_idx=None,
    cache_leftpad=None,
    block_table=None,
    softmax_scale=None,
    causal=False,
    window_size=(-1, -1),  # -1 means infinite context window
    softcap=0.0,  # 0.0 means deactivated
    rotary_interleaved=True,
    alibi_slopes=None,
    num_splits=0,
    return_softmax_lse=False,
):
    """Decoding against a K/V cache, as ``flash_attn.flash_attn_with_kvcache``: ``q: (batch,
    seqlen_q, nheads, headdim)``; ``k_cache, v_cache: (batch, seqlen_cache, nheads_k, headdim)``,
    or page pools ``(num_blocks, page_block_size, nheads_k, headdim)`` with ``block_table:
    (batch, max_num_blocks_per_seq)``; ``cache_seqlens`` (int, or ``(batch,)`` int32) the tokens
    in use. ``k, v: (batch, seqlen_new, nheads_k, headdim)``, if given, are written into the cache
    in place after ``cache_seqlens`` first. No backward.

    Returns ``out``, or with ``return_softmax_lse`` ``(out, softmax_lse)``.
    """
    for name, value in (
        ("rotary_cos", rotary_cos),
        ("rotary_sin", rotary_sin),
    ):
        if value is not None:
            raise NotImplementedError(
                f"{name}: rotary embeddings are not implemented in flashattn; rotate q and k before the call"
            )
    if cache_batch_idx is not None:
        raise NotImplementedError("cache_batch_idx is not implemented: index the cache before the call")
    if cache_leftpad is not None:
        raise NotImplementedError("cache_leftpad is not implemented: caches start at token 0")
    if (k is None) != (v is None):
        raise ValueError("k and v (the new tokens) go together: pass both or neither")
    if k is not None and cache_seqlens is None:
        raise ValueError("k and v are appended after cache_seqlens: pass cache_seqlens")
    num_splits = check_num_splits(num_splits)
    _torch = _torch_layer_of(q)
    if _torch is not None:
        return _torch.with_kvcache(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal,
            window_size, softcap, alibi_slopes, num_splits, return_softmax_lse,
        )
    _check_arrays(("q", q), ("k_cache", k_cache), ("v_cache", v_cache))
    shape = lse_shape(q, False)
    if isinstance(cache_seqlens, int):
        import numpy as np

        cache_seqlens = np.full((shape[0],), cache_seqlens, dtype=np.int32)
    out, lse = _empty(q, q.shape), _empty(q, shape, lse=True)
    _core.forward(
        q, k_cache, v_cache, out, lse, softmax_scale=softmax_scale, causal=causal,
        **window(window_size), softcap=softcap_option(softcap),
        alibi_slopes=_alibi_host(alibi_slopes),
        cache_seqlens=None if cache_seqlens is None else _host(cache_seqlens),
        block_table=None if block_table is None else _host(block_table),
        k_new=k, v_new=v, num_splits=num_splits,
    )
    return (out, lse) if return_softmax_lse else out

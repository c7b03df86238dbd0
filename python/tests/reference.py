"""A float64 NumPy reference of attention and its gradients, independent of the library: whole
score matrices, FlashAttention-2's masks (bottom-right causal, windows), softcapping and ALiBi."""

import numpy as np


def visible(sq, sk, causal, window=(-1, -1)):
    """``(sq, sk)`` booleans: which keys each query sees (the diagonal of query ``i`` is key
    ``i + sk - sq``)."""
    left, right = window
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = i + sk - sq
    mask = np.ones((sq, sk), dtype=bool)
    if causal:
        mask &= j <= diag
    if left >= 0:
        mask &= j >= diag - left
    if right >= 0 and not causal:
        mask &= j <= diag + right
    return mask


def _logits(q, k, scale, softcap, slope, sq, sk):
    """Per head: logits ``(sq, sk)`` and d(logit)/d(q·k)."""
    s = scale * (q @ k.T)
    if softcap:
        t = np.tanh(s / softcap)
        logit, dlogit = softcap * t, scale * (1 - t * t)
    else:
        logit, dlogit = s, np.full_like(s, scale)
    if slope:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        logit = logit - (slope * np.abs(i + sk - sq - j)).astype(logit.dtype)
    return logit, dlogit


def attention(
    q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, alibi=None, dout=None, dt=np.float64
):
    """One sequence batch ``q: (b, sq, h, d)``, ``k, v: (b, sk, hk, d)``, computed in ``dt``
    (float64: the reference; float32: standard attention's baseline for the error rule).

    Returns ``out (b, sq, h, d)``, ``lse (b, h, sq)`` (rows without keys: out 0, lse -inf) and,
    with ``dout``, the gradients ``(dq, dk, dv)`` of ``sum(out * dout)``.
    """
    q, k, v = (np.asarray(x, dtype=dt) for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    g = h // hk
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    mask = visible(sq, sk, causal, window)
    out = np.zeros_like(q)
    lse = np.full((b, h, sq), -np.inf, dtype=dt)
    grads = None
    if dout is not None:
        dout = np.asarray(dout, dtype=dt)
        grads = (np.zeros_like(q), np.zeros_like(k), np.zeros_like(v))
    for bi in range(b):
        for hi in range(h):
            kh = hi // g
            slope = 0.0 if alibi is None else float(alibi[hi])
            logit, dlogit = _logits(q[bi, :, hi], k[bi, :, kh], scale, softcap, slope, sq, sk)
            logit = np.where(mask, logit, dt(-np.inf))
            m = logit.max(axis=1, keepdims=True)
            seen = np.isfinite(m[:, 0])
            m = np.where(np.isfinite(m), m, dt(0.0))
            e = np.where(mask, np.exp(logit - m), dt(0.0))
            total = e.sum(axis=1, keepdims=True)
            p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
            out[bi, :, hi] = p @ v[bi, :, kh]
            lse[bi, hi] = np.where(seen, m[:, 0] + np.log(np.where(seen, total[:, 0], 1.0)), -np.inf)
            if grads is not None:
                do = dout[bi, :, hi]
                dp = do @ v[bi, :, kh].T
                ds = p * (dp - (p * dp).sum(axis=1, keepdims=True)) * dlogit
                grads[0][bi, :, hi] = ds @ k[bi, :, kh]
                grads[1][bi, :, kh] += ds.T @ q[bi, :, hi]
                grads[2][bi, :, kh] += p.T @ do
    return out, lse, grads


def varlen_attention(q, k, v, cu_q, cu_k, dout=None, **kw):
    """Packed sequences ``q: (total_q, h, d)``: out, lse ``(h, total_q)``, gradients."""
    out = np.zeros(q.shape)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    grads = None if dout is None else (np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape))
    for i in range(len(cu_q) - 1):
        qs, qe, ks, ke = int(cu_q[i]), int(cu_q[i + 1]), int(cu_k[i]), int(cu_k[i + 1])
        if qe == qs:
            continue
        o, l, g = attention(
            q[None, qs:qe], k[None, ks:ke], v[None, ks:ke],
            dout=None if dout is None else dout[None, qs:qe], **kw,
        )
        out[qs:qe], lse[:, qs:qe] = o[0], l[0]
        if g is not None:
            grads[0][qs:qe], grads[1][ks:ke], grads[2][ks:ke] = g[0][0], g[1][0], g[2][0]
    return out, lse, grads


def max_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    return float(np.max(np.where(both_inf, 0.0, diff), initial=0.0))

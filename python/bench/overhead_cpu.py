"""Host-side overhead of the Python call, on CPU tensors (no GPU needed): microseconds per call,
back to back, for shapes whose kernel work is negligible (so the time is the Python layer, the
DLPack exports, the PyO3 call and the library's checks), and for the decode shape of
python/bench/overhead.py on the CPU implementation (kernel time included). Each line is the
best of `repeats` runs of `n` calls. Prints one JSON line per case.

    python python/bench/overhead_cpu.py [--n 20000] [--repeats 7]
"""

import argparse
import json
import time

import numpy as np
import torch

import flashattn
from flashattn import attention_forward, flash_attn_func, flash_attn_with_kvcache


def per_call_us(fn, n, repeats):
    for _ in range(max(n // 20, 10)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def cases():
    torch.manual_seed(0)
    tiny = [torch.randn(1, 1, 1, 8) for _ in range(3)]
    out, lse = torch.empty(1, 1, 1, 8), torch.empty(1, 1, 1)
    arrays = [np.random.default_rng(0).standard_normal((1, 1, 1, 8), dtype=np.float32) for _ in range(4)]
    lse_np = np.empty((1, 1, 1), np.float32)
    grad = [t.clone().requires_grad_() for t in tiny]
    cache = [torch.randn(2, 16, 1, 8) for _ in range(2)]
    q2 = torch.randn(2, 1, 1, 8)
    dec = (
        torch.randn(1, 1, 32, 128, dtype=torch.bfloat16),
        torch.randn(1, 1024, 8, 128, dtype=torch.bfloat16),
        torch.randn(1, 1024, 8, 128, dtype=torch.bfloat16),
    )
    return [
        ("flash_attn_func, tiny (1,1,1,8) f32, causal", lambda: flash_attn_func(*tiny, causal=True), 1),
        ("flash_attn_func, tiny, inputs require grad (autograd.Function)",
         lambda: flash_attn_func(*grad, causal=True), 1),
        ("flash_attn_with_kvcache, tiny (2,16,1,8) cache, cache_seqlens=int",
         lambda: flash_attn_with_kvcache(q2, *cache, cache_seqlens=9, causal=True), 1),
        ("attention_forward (core), tiny torch tensors, outputs given",
         lambda: attention_forward(*tiny, out, lse, causal=True), 1),
        ("attention_forward (core), tiny NumPy arrays, outputs given",
         lambda: attention_forward(*arrays, lse_np, causal=True), 1),
        ("flash_attn_func, decode (1,1,32,128) x (1,1024,8,128) bf16, causal (CPU kernel included)",
         lambda: flash_attn_func(*dec, causal=True), 20),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, fn, slower in cases():
        us = per_call_us(fn, max(args.n // slower, 50), args.repeats)
        print(json.dumps({"case": name, "us_per_call": round(us, 2), "flashattn": flashattn.__file__,
                          "torch": torch.__version__}), flush=True)

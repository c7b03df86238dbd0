"""Overhead of the Python call: flashattn.flash_attn_func on CUDA tensors, timed with CUDA events
(GPU time per call, back to back) and with the host clock (wall time per call, synchronised at
the end), for a headline shape and a decode-sized shape. Compare the GPU times with the Rust
bench's medians of the same shapes (flashattn-bench, same machine) to see what the Python layer
adds. Prints one JSON line per shape."""

import json
import statistics
import time

import torch

from flashattn import flash_attn_func


def measure(b, nq, nk, h, hkv, d, causal, reps=50):
    torch.manual_seed(0)
    dev = torch.device("cuda")
    q = torch.randn(b, nq, h, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(b, nk, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, nk, hkv, d, device=dev, dtype=torch.bfloat16)
    for _ in range(10):
        flash_attn_func(q, k, v, causal=causal)
    torch.cuda.synchronize()
    gpu = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        flash_attn_func(q, k, v, causal=causal)
        e.record()
        torch.cuda.synchronize()
        gpu.append(s.elapsed_time(e))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        flash_attn_func(q, k, v, causal=causal)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / reps * 1e3
    return {
        "shape": f"B{b}/H{h}:{hkv}/N{nq}x{nk}/d{d}/{'causal' if causal else 'none'}",
        "gpu_ms_median": statistics.median(gpu),
        "gpu_ms_p10": sorted(gpu)[reps // 10],
        "gpu_ms_p90": sorted(gpu)[reps * 9 // 10],
        "wall_ms_per_call": wall,
    }


if __name__ == "__main__":
    for args in [(4, 4096, 4096, 16, 16, 128, False), (4, 4096, 4096, 16, 16, 128, True),
                 (1, 1, 1024, 32, 8, 128, True), (16, 1, 16384, 32, 8, 128, True)]:
        print(json.dumps(measure(*args)), flush=True)

"""Overhead of the Python call: flashattn.flash_attn_func on CUDA tensors, for headline and
decode-sized shapes. Per shape, in one process:

  stream ms   time per call from CUDA events around back-to-back calls (what a caller's stream sees)
  busy ms     the GPU's own time per call in that same window (kernels, copies, sets; CUDA profiler;
              overlapping activities counted once)
  layer       stream / busy - 1: what the host (Python wrapper, FFI, checks, planning, allocation,
              launch gaps) adds that the GPU does not hide
  wall ms     host time per call, back to back, synchronised at the end
  single ms   one call from the host clock to its completion (call + synchronize), median

Prints one JSON line per shape. `ratios.py` uses `stream_and_busy_ms` for its criterion."""

import json
import statistics
import time

import torch


def stream_and_busy_ms(calls, n):
    """One window of `n` back-to-back calls in rotation: (stream time per call from CUDA events
    around the window, GPU busy time per call from the CUDA profiler (CUPTI) for the same calls,
    or None when the profiler records no GPU activity)."""
    from torch.profiler import ProfilerActivity, profile

    for c in calls:  # warm: nothing first-time (module load, allocator growth) in the window
        c()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        s.record()
        for i in range(n):
            calls[i % len(calls)]()
        e.record()
        torch.cuda.synchronize()
    # The union of the GPU activities' intervals: a dependent launch (the split-KV combine on
    # sm_90) starts before the kernel it depends on ends, so a plain sum would count that twice.
    spans = sorted((ev.time_range.start, ev.time_range.end) for ev in prof.events()
                   if str(getattr(ev, "device_type", "")).endswith("CUDA"))
    if not spans:
        return s.elapsed_time(e) / n, None
    us, (lo, hi) = 0.0, spans[0]
    for a, b in spans[1:]:
        if a > hi:
            us += hi - lo
            lo, hi = a, b
        else:
            hi = max(hi, b)
    us += hi - lo
    return s.elapsed_time(e) / n, us / n / 1e3


def measure(b, nq, nk, h, hkv, d, causal, reps=200):
    from flashattn import flash_attn_func

    torch.manual_seed(0)
    dev = torch.device("cuda")
    sets = [tuple(torch.randn(b, n, hh, d, device=dev, dtype=torch.bfloat16) for n, hh in ((nq, h), (nk, hkv), (nk, hkv)))
            for _ in range(3)]
    calls = [lambda s=s: flash_attn_func(*s, causal=causal) for s in sets]
    for _ in range(10):
        for c in calls:
            c()
    torch.cuda.synchronize()
    stream, busy = stream_and_busy_ms(calls, reps)
    t0 = time.perf_counter()
    for i in range(reps):
        calls[i % 3]()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / reps * 1e3
    single = []
    for i in range(min(reps, 50)):
        t = time.perf_counter()
        calls[i % 3]()
        torch.cuda.synchronize()
        single.append((time.perf_counter() - t) * 1e3)
    return {
        "shape": f"B{b}/H{h}:{hkv}/N{nq}x{nk}/d{d}/{'causal' if causal else 'none'}",
        "stream_ms_per_call": stream,
        "gpu_busy_ms_per_call": busy,
        "layer": None if busy is None else stream / busy - 1,
        "wall_ms_per_call": wall,
        "single_call_ms_median": statistics.median(single),
    }


SHAPES = [(4, 4096, 4096, 16, 16, 128, False), (4, 4096, 4096, 16, 16, 128, True),
          (1, 1, 1024, 32, 8, 128, True), (1, 1, 16384, 32, 8, 128, True), (16, 1, 16384, 32, 8, 128, True)]

if __name__ == "__main__":
    for args in SHAPES:
        print(json.dumps(measure(*args)), flush=True)

"""The backward through PyTorch's autograd, both ways the Python layer can take it: after the
training forward (the Hopper kernel keeps O's residual and the rows' statistics, and the backward
skips its pass over the keys) and from the log-sum-exp alone (what the layer called before it
had the residual path), with PyTorch's FlashAttention-2 backend beside them. Times are medians of
CUDA events around one backward (`torch.autograd.grad` of the output), after warm-up, with the
forward outside the timed region.

Usage, with the wheel installed (on the GPU machine: `pip install --target DIR` the bundle's wheel,
then `PYTHONPATH=DIR`): python backward_paths.py [--out FILE]
"""

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import flashattn._torch as layer
from flashattn import flash_attn_func

SHAPES = [(16, 1024, 32, 64), (4, 4096, 32, 64), (1, 16384, 32, 64), (16, 1024, 16, 128), (4, 4096, 16, 128),
          (1, 16384, 16, 128)]


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    rows = []
    for b, n, h, d in SHAPES:
        for causal in (False, True):
            gen = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
                       for _ in range(3))
            dout = torch.randn_like(q)
            out = flash_attn_func(q, k, v, causal=causal)
            ours = median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True), args.reps)
            # The log-sum-exp path: the same Function with the training forward switched off.
            original = layer._forward
            layer._forward = lambda *a, train=False: original(*a)
            try:
                out_lse = flash_attn_func(q, k, v, causal=causal)
                lse = median_ms(lambda: torch.autograd.grad(out_lse, (q, k, v), dout, retain_graph=True), args.reps)
            finally:
                layer._forward = original
            qt, kt, vt = (x.detach().transpose(1, 2).requires_grad_() for x in (q, k, v))
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                fa2 = median_ms(
                    lambda: torch.autograd.grad(ref, (qt, kt, vt), dout.transpose(1, 2), retain_graph=True),
                    args.reps,
                )
            row = dict(shape=[b, n, h, d], causal=causal, residuals_ms=ours, lse_ms=lse, fa2_ms=fa2)
            rows.append(row)
            print(
                f"B={b} N={n} H={h} d={d} causal={causal}: residuals {ours[0]:.3f} ms, lse {lse[0]:.3f} ms "
                f"({ours[0] / lse[0] - 1:+.1%}), FA2 {fa2[0]:.3f} ms (ours/FA2 speed {fa2[0] / ours[0]:.3f}x)"
            )
    if args.out:
        with open(args.out, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()

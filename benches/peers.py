#!/usr/bin/env python3
"""PyTorch peers for flashattn-bench: the same shapes through each attention backend of torch.

Reads the shapes file that `flashattn-bench run --peers` writes (a JSON list of
{key, group, dtype, batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim, mask, causal,
window_left, softcap, alibi, flops, kv_bytes}) and appends JSON lines in flashattn-bench's record format to --out: one `meta` line,
then one `row` per shape, pass and backend, flushed as measured.

Backends: torch.nn.functional.scaled_dot_product_attention pinned with
torch.nn.attention.sdpa_kernel to FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION and MATH,
plus `naive` (softmax(Q·Kᵀ·scale)·V with the N×N scores materialized). Inputs are random normal,
(B, H, N, d) layout; causal rows use is_causal=True (top-left aligned, so the shapes file holds
causal shapes only with Nq == Nk). Timing: triton.testing.do_bench (median, p10, p90; it clears L2
before each call), or CUDA events with an L2 flush when triton is missing.

FlexAttention (`flex`, rows `torch-flex`): torch.nn.attention.flex_attention.flex_attention under
torch.compile, with a block mask from create_block_mask (built once per shape, outside the timed
call) whose mask_mod encodes the causal mask and the sliding window bottom-right aligned as
flashattn's: query q's diagonal key is q + Nk - Nq; causal keeps kv <= diagonal, a left window
of L keys keeps kv >= diagonal - L. It runs on causal shapes, on window shapes and on shapes with
a score modifier only (a dense shape without one has no flex row). Sliding-window shapes (window_left set; the key ends with /wL) can be
rectangular causal, as FlexAttention aligns them as we do; the SDPA backends cannot apply a window
and record them `unsupported`; `naive` applies it as a boolean mask. FLOPs are the shapes file's
`flops` (for a window: the visible (query, key) pairs, as flashattn-bench counts them). If flex
attention is not importable, or its compilation fails on a shape, its rows are `unsupported` with
the error message; the other backends go on.

Score modifiers (`flashattn-bench run --softcap C`, `--alibi`; the shapes file's softcap, a number
or null, and alibi, a bool; the key ends with /capC and/or /alibi): only flex runs them, through a
score_mod(score, b, h, q_idx, kv_idx) on the scaled score, before the softmax, as flashattn applies
them: the softcap first, c * tanh(score / c), then ALiBi, score - slopes[h] * |q_idx + Nk - Nq -
kv_idx| (bottom-right aligned, FlashAttention's convention), with BLOOM's slopes
slopes[h] = 2^(-8(h+1)/H) over the H query heads (h is the query head under GQA), together with the
block mask above where the shape is causal or windowed (none on a dense shape). Gradients flow
through the score_mod, so the backward passes run too. The SDPA backends and `naive` record such
shapes `unsupported`; the f32 reference of the error column applies the modifiers itself (its
scores materialized, on the (0, 0) slice). FLOPs are unchanged by a modifier.

Grouped-query attention (kv_heads < heads): K and V have kv_heads heads, query head h uses K/V head
h // (heads // kv_heads). The SDPA backends get enable_gqa=True (torch >= 2.5; a backend without
GQA support is recorded `unsupported`, as for any shape it cannot run); on a torch whose SDPA
raises TypeError for enable_gqa, K and V are expanded with repeat_interleave inside the timed call
instead and the row says "gqa": "repeat". `naive` broadcasts each K/V head over its query heads.
Decode rows (seqlen_q == 1) also carry kv_tb_s: the bytes of K and V over the median time, TB/s;
the shapes file's kv_bytes, which with a window counts only the keys a query sees
(min(Nk, Nq + L) per sequence), as flashattn-bench's report does (it recomputes kv_tb_s from the
row's shape and time).

Passes (--passes, like flashattn-bench's --pass; every row carries its "pass"): `fwd` times the
call above. `bwd` and `fwd+bwd` run it on Q, K, V that require gradients and time
torch.autograd.grad(out, (q, k, v), dO), dO random normal like the inputs: `bwd` the backward
alone (the forward once beforehand, untimed, its graph kept with retain_graph=True so each timed
call runs the same backward), `fwd+bwd` the forward then the backward in each timed call. The
backend pinned for the forward also runs the backward (the math and naive backends: autograd's
backward of their operations; a repeat fallback for GQA sums the repeated gradients back in the
timed backward). Their FLOPs are 2.5 and 3.5 times the forward's, as ours. Extra memory: the peak
during one call beyond what was allocated before it (for `bwd`: after the forward) and the
outputs (O, and dQ, dK, dV). Backward rows are not checked against a reference.

FlexAttention's backward: torch >= 2.6 compiles backwards with "donated buffers" (the backward may
overwrite what the forward saved), and such a backward raises if run with retain_graph=True, which
the `bwd` pass needs to run the same backward on one forward's graph in every timed call. So
torch._functorch.config.donated_buffer is set to False before anything is compiled (where this
torch has the setting; older ones donate nothing), and torch-flex's `bwd` rows time the backward
alone, as the other backends'. The meta line's flex_donated_buffer says what was set (null: the
setting does not exist). It changes only the compiled backward's buffer reuse (its memory, not
its work); the eager backends are unaffected.

Needs only python3, torch and (optionally) triton. Exit status: 0 ok, 2 bad arguments, 3 torch or
CUDA unavailable.
"""

import argparse
import contextlib
import datetime
import json
import math
import socket
import sys
import time
import warnings
import zlib

BACKENDS = ["flash", "cudnn", "efficient", "math", "naive", "flex"]
# The backends of torch.nn.functional.scaled_dot_product_attention (no sliding window, no score modifier).
SDPA = ("flash", "cudnn", "efficient", "math")
# Pass names (as flashattn-bench's) and their FLOPs over the forward's (FlashAttention's rule).
PASSES = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}


class FlexUnavailable(Exception):
    """flex_attention could not be compiled for a shape: its rows are `unsupported`."""


def log(msg):
    print(f"peers: {msg}", file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", required=True, help="shapes JSON written by flashattn-bench")
    p.add_argument("--out", required=True, help="JSONL file to append rows to")
    p.add_argument("--warmup-ms", type=float, default=25.0)
    p.add_argument("--rep-ms", type=float, default=100.0)
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated subset of " + ",".join(BACKENDS))
    p.add_argument("--passes", default="fwd", help="comma-separated subset of " + ",".join(PASSES))
    p.add_argument("--run-id", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--layout", choices=["bhsd", "bshd"], default=None,
                   help="memory order of Q, K, V, dO: bhsd (the default, SDPA's own) or bshd, made as "
                        "(B, N, H, d) tensors and passed as their (B, H, N, d) transposed views")
    p.add_argument("--ref-max-pairs", type=float, default=float(16384 * 16384),
                   help="largest Nq*Nk for which one (batch, head) slice is checked against f32 math")
    a = p.parse_args()
    unknown = [b for b in a.backends.split(",") if b not in BACKENDS]
    if unknown:
        p.error(f"unknown backends {unknown}: allowed are {BACKENDS}")
    passes = []
    for x in a.passes.split(","):
        if x not in PASSES:
            p.error(f"unknown pass {x!r}: allowed are {list(PASSES)}")
        if x not in passes:
            passes.append(x)
    a.passes = passes
    return a


def main():
    args = parse_args()
    try:
        with open(args.shapes) as f:
            shapes = json.load(f)
    except (OSError, ValueError) as e:
        log(f"cannot read {args.shapes}: {e}")
        return 2
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # ImportError, or a broken install
        log(f"torch is not importable ({e}): peers skipped")
        return 3
    if not torch.cuda.is_available():
        log("torch sees no CUDA device: peers skipped")
        return 3
    try:
        import triton
        from triton.testing import do_bench
        triton_version = triton.__version__
    except Exception:
        do_bench = None
        triton_version = None

    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    device_name = torch.cuda.get_device_name(dev)
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    sdpa_backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    if do_bench is not None:
        try:
            probe = torch.zeros(1024, device=dev)
            do_bench(lambda: probe.add_(1.0), warmup=1, rep=1)
        except Exception as e:  # triton's driver needs a C compiler at first use, for instance
            log(f"triton.testing.do_bench does not work here ({type(e).__name__}: {e}); timing with CUDA events")
            do_bench = None
    timer = "triton.do_bench" if do_bench else "cuda-events"
    flush_buf = None
    flex_attention = create_block_mask = None
    flex_missing = None
    if "flex" in args.backends.split(","):
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except Exception as e:  # torch < 2.5, or a broken install
            flex_missing = f"flex_attention is not importable: {type(e).__name__}: {e}"[:500]
            log(f"{flex_missing}: torch-flex rows are unsupported")
    # The `bwd` pass times autograd.grad(..., retain_graph=True) on one forward's graph; a compiled
    # backward with donated buffers (torch >= 2.6) refuses retain_graph, so donation is turned off
    # before anything is compiled (see the module doc). None: this torch has no such setting.
    flex_donated_buffer = None
    if flex_missing is None and "flex" in args.backends.split(","):
        try:
            import torch._functorch.config as functorch_config
            if hasattr(functorch_config, "donated_buffer"):
                functorch_config.donated_buffer = False
                flex_donated_buffer = False
        except Exception as e:  # a torch without torch._functorch: nothing is donated there
            log(f"torch._functorch.config.donated_buffer not set ({type(e).__name__}: {e})")

    def probe_enable_gqa():
        """Whether SDPA takes enable_gqa (torch >= 2.5): a TypeError says it does not."""
        qp = torch.zeros((1, 2, 1, 8), device=dev)
        kp = torch.zeros((1, 1, 1, 8), device=dev)
        try:
            with sdpa_kernel([SDPBackend.MATH]):
                F.scaled_dot_product_attention(qp, kp, kp, enable_gqa=True)
            return True
        except TypeError:
            return False
        except Exception as e:  # anything else: assume the keyword exists, let each row say
            log(f"enable_gqa probe: {type(e).__name__}: {e}")
            return True

    any_gqa = any(s.get("kv_heads", s["heads"]) != s["heads"] for s in shapes)
    native_gqa = probe_enable_gqa() if any_gqa else None
    if native_gqa is False:
        log(f"torch {torch.__version__} has no enable_gqa: GQA shapes repeat K and V inside the timed call")

    def bench(fn):
        """(median, p10, p90, samples) in ms."""
        nonlocal flush_buf
        if do_bench is not None:
            try:
                r = do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms, quantiles=[0.5, 0.1, 0.9])
                return float(r[0]), float(r[1]), float(r[2]), None
            except TypeError:
                ms = do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms)
                return float(ms), float(ms), float(ms), None
        if flush_buf is None:
            flush_buf = torch.empty(256 << 20, dtype=torch.int8, device=dev)
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        est = max(start.elapsed_time(end), 1e-3)
        n = max(5, min(1000, int(args.rep_ms / est)))
        times = []
        for _ in range(n):
            flush_buf.zero_()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        q = lambda p: times[min(len(times) - 1, int(round(p * (len(times) - 1))))]
        return q(0.5), q(0.1), q(0.9), len(times)

    def time_backward(ps, attn, qkv, d_o, out_bytes):
        """Times a backward pass of attn(q, k, v) on leaf copies of qkv that require gradients:
        (median, p10, p90, samples, extra bytes). `bwd`: torch.autograd.grad on the graph of one
        untimed forward, kept with retain_graph=True; `fwd+bwd`: the forward and the backward in
        each call. Extra bytes: the peak of one call over what was allocated before it (for `bwd`,
        after the forward: O and what autograd saved are the forward's) less its outputs (dQ, dK,
        dV; and O for `fwd+bwd`). Errors propagate: the caller records them."""
        inputs = tuple(t.detach().requires_grad_(True) for t in qkv)
        grad_bytes = sum(t.numel() * t.element_size() for t in inputs)
        if ps == "bwd":
            o = attn(*inputs)
            fn = lambda: torch.autograd.grad(o, inputs, d_o, retain_graph=True)
            outs = grad_bytes
        else:
            fn = lambda: torch.autograd.grad(attn(*inputs), inputs, d_o)
            outs = grad_bytes + out_bytes
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        before = torch.cuda.memory_allocated(dev)
        grads = fn()
        torch.cuda.synchronize()
        extra = max(0, torch.cuda.max_memory_allocated(dev) - before - outs)
        del grads
        med, p10, p90, n = bench(fn)
        return med, p10, p90, n, extra

    out = open(args.out, "a")

    def clean(x):
        """NaN and infinities become null: JSON has no spelling for them."""
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    def write(rec):
        out.write(json.dumps(clean(rec)) + "\n")
        out.flush()

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    write({
        "kind": "meta",
        "source": "peers.py",
        "run_id": args.run_id,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": socket.gethostname(),
        "commit": args.commit,
        "device": device_name,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton_version,
        "cudnn": cudnn,
        "timer": timer,
        "enable_gqa": native_gqa,
        "flex": flex_missing or "torch.compile(flex_attention)",
        "flex_donated_buffer": flex_donated_buffer,
        "warmup_ms": args.warmup_ms,
        "rep_ms": args.rep_ms,
        "passes": args.passes,
    })

    wanted = args.backends.split(",")
    passes = args.passes
    backward = any(p != "fwd" for p in passes)

    def window_of(s):
        w = s.get("window_left")
        return None if w is None else int(w)

    def softcap_of(s):
        c = s.get("softcap")
        return None if c is None else float(c)

    def score_mods_of(s):
        """The shape's score modifiers in words ("softcap 30", "ALiBi"), empty without any."""
        c = softcap_of(s)
        return ([] if c is None else [f"softcap {c:g}"]) + (["ALiBi"] if s.get("alibi") else [])

    def backends_of(s):
        """The backends run on a shape: flex only on causal, window or score-modifier shapes."""
        return [b for b in wanted
                if b != "flex" or bool(s["causal"]) or window_of(s) is not None or score_mods_of(s)]

    total = sum(len(backends_of(s)) for s in shapes) * len(passes)

    def each_row(base, backends):
        """A row per pass and backend: the pass's name and FLOPs filled in."""
        for ps in passes:
            for b in backends:
                yield ps, dict(base, method="torch-" + b, **{"pass": ps}, flops=base["flops"] * PASSES[ps])

    def keep_mask(Nq, Nk, causal, left):
        """(Nq, Nk) booleans: the keys each query sees, bottom-right aligned as flashattn's."""
        keep = torch.ones((Nq, Nk), dtype=torch.bool, device=dev)
        if causal:
            keep = keep.tril(diagonal=Nk - Nq)
        if left is not None:
            keep = keep.triu(diagonal=Nk - Nq - left)
        return keep

    def flex_mask_mod(Nq, Nk, causal, left):
        """FlexAttention's mask_mod: causal and/or a left window around diagonal q + Nk - Nq."""
        offset = Nk - Nq
        if causal and left is not None:
            return lambda b, h, q_idx, kv_idx: (kv_idx <= q_idx + offset) & (q_idx + offset - left <= kv_idx)
        if causal:
            return lambda b, h, q_idx, kv_idx: kv_idx <= q_idx + offset
        return lambda b, h, q_idx, kv_idx: q_idx + offset - left <= kv_idx

    def alibi_slopes(H):
        """BLOOM's ALiBi slopes, 2^(-8(h+1)/H) for query head h, as flashattn-bench's."""
        return torch.exp2(-8.0 * torch.arange(1, H + 1, dtype=torch.float32, device=dev) / H)

    def flex_score_mod(Nq, Nk, c, slopes):
        """FlexAttention's score_mod on the scaled score: the softcap c (None: none), then ALiBi
        with one slope per query head (None: none), bottom-right aligned as flashattn's."""
        def score_mod(score, b, h, q_idx, kv_idx):
            if c is not None:
                score = c * torch.tanh(score / c)
            if slopes is not None:
                score = score - slopes[h] * (q_idx + Nk - Nq - kv_idx).abs()
            return score
        return score_mod

    def modified_reference(q1, k1, v1, scale, causal, left, c, slope):
        """softmax(mods(Q·Kᵀ·scale))·V on one (batch, head) slice (f32 inputs), the scores
        materialized: the softcap c (None: none), then ALiBi with the slice's slope (None: none),
        then the mask."""
        Nq, Nk = q1.shape[-2], k1.shape[-2]
        sc = torch.matmul(q1, k1.transpose(-2, -1)) * scale
        if c is not None:
            sc = c * torch.tanh(sc / c)
        if slope is not None:
            t = torch.arange(Nq, device=dev).unsqueeze(1)
            j = torch.arange(Nk, device=dev).unsqueeze(0)
            sc = sc - slope * (t + Nk - Nq - j).abs()
        if causal or left is not None:
            sc = sc.masked_fill(~keep_mask(Nq, Nk, causal, left), float("-inf"))
        return torch.matmul(torch.softmax(sc, dim=-1), v1)

    done = 0
    t0 = time.time()
    for s in shapes:
        dtype = dtypes.get(s["dtype"])
        B, H, Nq, Nk, d = s["batch"], s["heads"], s["seqlen_q"], s["seqlen_k"], s["head_dim"]
        KV = s.get("kv_heads", H)
        causal = bool(s["causal"])
        left = window_of(s)
        cap = softcap_of(s)
        alibi = bool(s.get("alibi"))
        mods = score_mods_of(s)
        backends = backends_of(s)
        base = {
            "kind": "row", "backend": "peer", "run_id": args.run_id, "device": device_name,
            "commit": args.commit, "key": s["key"], "group": s.get("group", ""), "dtype": s["dtype"],
            "batch": B, "heads": H, "kv_heads": KV, "seqlen_q": Nq, "seqlen_k": Nk, "head_dim": d,
            "mask": s["mask"], "flops": s["flops"], "status": "ok",
        }
        if left is not None:
            base["window_left"] = left
        if cap is not None:
            base["softcap"] = cap
        if alibi:
            base["alibi"] = True
        if args.layout is not None:
            base["layout"] = args.layout
        if KV != H and (KV <= 0 or H % KV != 0):
            for _, row in each_row(base, backends):
                write(dict(row, status="invalid", message=f"{H} query heads are not a multiple of {KV} K/V heads"))
            continue
        group = H // KV
        if group > 1:
            base["gqa"] = "native" if native_gqa else "repeat"
        if dtype is None:
            for _, row in each_row(base, backends):
                write(dict(row, status="unsupported", message=f"dtype {s['dtype']}"))
            continue
        try:
            gen = torch.Generator(device=dev).manual_seed(zlib.crc32(s["key"].encode()))
            def draw(heads, n):
                """A (B, heads, n, d) tensor in the run's memory order."""
                if args.layout == "bshd":
                    x = torch.randn((B, n, heads, d), dtype=dtype, device=dev, generator=gen)
                    return x.transpose(1, 2)
                return torch.randn((B, heads, n, d), dtype=dtype, device=dev, generator=gen)
            q = draw(H, Nq)
            k = draw(KV, Nk)
            v = draw(KV, Nk)
            # The backward's upstream gradient, drawn after Q, K, V (which stay as without it).
            d_o = draw(H, Nq) if backward else None
        except torch.cuda.OutOfMemoryError as e:
            for _, row in each_row(base, backends):
                write(dict(row, status="oom", message=f"inputs: {e}"[:500]))
            torch.cuda.empty_cache()
            continue
        scale = 1.0 / math.sqrt(d)
        slopes = alibi_slopes(H) if alibi else None
        out_bytes = B * H * Nq * d * q.element_size()
        # The keys some query sees (a window's min(Nk, Nq + L), as flashattn-bench counts them).
        visible = Nk if left is None else min(Nk, Nq + left)
        kv_bytes = s.get("kv_bytes") or 2 * B * KV * visible * d * q.element_size()
        ref = None
        if Nq * Nk <= args.ref_max_pairs:
            try:
                q1, k1, v1 = q[:1, :1].float(), k[:1, :1].float(), v[:1, :1].float()
                if mods:
                    slope = None if slopes is None else slopes[0]
                    ref = modified_reference(q1, k1, v1, scale, causal, left, cap, slope)
                else:
                    with sdpa_kernel([SDPBackend.MATH]):
                        if left is None:
                            ref = F.scaled_dot_product_attention(q1, k1, v1, is_causal=causal)
                        else:
                            ref = F.scaled_dot_product_attention(
                                q1, k1, v1, attn_mask=keep_mask(Nq, Nk, causal, left))
                del q1, k1, v1
            except Exception as e:  # the rows go on without an error column
                log(f"{s['key']}: no f32 reference ({type(e).__name__}: {e})")
                ref = None

        def naive(q, k, v):
            # Grouped: (B, KV, group, Nq, d) queries against (B, KV, 1, Nk, d) keys, broadcast.
            qg = q.view(B, KV, group, Nq, d)
            sc = torch.matmul(qg, k.unsqueeze(2).transpose(-2, -1)) * scale
            if causal or left is not None:
                sc = sc.masked_fill(~keep_mask(Nq, Nk, causal, left), float("-inf"))
            return torch.matmul(torch.softmax(sc, dim=-1), v.unsqueeze(2)).view(B, H, Nq, d)

        if group == 1:
            sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        elif native_gqa:
            sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        else:
            sdpa = lambda q, k, v: F.scaled_dot_product_attention(
                q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), is_causal=causal)

        # FlexAttention: the block mask once per shape (untimed; none on a dense shape, which
        # reaches flex only with a score modifier), the score_mod where the shape has modifiers,
        # a fresh compilation per shape (dynamo's cache is reset so that many shapes never exceed
        # its recompilation limit).
        flex, flex_error = None, flex_missing
        if "flex" in backends and flex_error is None:
            try:
                import torch._dynamo
                torch._dynamo.reset()
                block_mask = None
                if causal or left is not None:
                    block_mask = create_block_mask(flex_mask_mod(Nq, Nk, causal, left), B=None, H=None,
                                                   Q_LEN=Nq, KV_LEN=Nk, device=dev)
                compiled = torch.compile(flex_attention)
                flex_kw = {"enable_gqa": True} if group > 1 else {}
                if mods:
                    flex_kw["score_mod"] = flex_score_mod(Nq, Nk, cap, slopes)
                flex = lambda q, k, v: compiled(q, k, v, block_mask=block_mask, **flex_kw)
            except Exception as e:
                flex_error = f"flex block mask or torch.compile: {type(e).__name__}: {e}".split("\n")[0][:500]
        flex_warm = set()  # the passes whose compilation ran (outside the measurements)

        for ps, row in each_row(base, backends):
            b = row["method"][len("torch-"):]
            if b != "flex" and mods:
                what = "scaled_dot_product_attention cannot apply it" if b in SDPA else "not applied here"
                row.update(status="unsupported",
                           message=f"score modifier ({', '.join(mods)}): {what} (torch-flex runs it)")
                write(row)
                done += 1
                log(f"[{done}/{total} {time.time() - t0:.0f}s] {s['key']} {row['method']}: unsupported (score modifier)")
                continue
            if b in SDPA and left is not None:
                row.update(status="unsupported",
                           message="sliding window: scaled_dot_product_attention cannot apply it (torch-flex runs it)")
                write(row)
                done += 1
                log(f"[{done}/{total} {time.time() - t0:.0f}s] {s['key']} {row['method']}: unsupported (window)")
                continue
            if b == "flex" and flex is None:
                row.update(status="unsupported", message=flex_error or "flex_attention unavailable")
                write(row)
                done += 1
                why = row["message"][:120]
                log(f"[{done}/{total} {time.time() - t0:.0f}s] {s['key']} {row['method']}: unsupported ({why})")
                continue
            if b == "naive":
                attn, ctx = naive, contextlib.nullcontext()
                if group > 1:
                    row["gqa"] = "broadcast"
            elif b == "flex":
                attn, ctx = flex, contextlib.nullcontext()
                if group > 1:
                    row["gqa"] = "native"
            else:
                attn, ctx = sdpa, sdpa_kernel([sdpa_backends[b]])
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with ctx:
                        if b == "flex" and ps not in flex_warm:
                            # Compile (forward, and for the backward passes the backward) before
                            # any measurement: compilation and autotuning are not the call's.
                            try:
                                if ps == "fwd":
                                    attn(q, k, v)
                                else:
                                    leaves = tuple(t.detach().requires_grad_(True) for t in (q, k, v))
                                    torch.autograd.grad(attn(*leaves), leaves, d_o)
                                    del leaves
                                torch.cuda.synchronize()
                            except torch.cuda.OutOfMemoryError:
                                raise
                            except Exception as e:
                                why = f"flex_attention compilation failed: {type(e).__name__}: {e}"
                                raise FlexUnavailable(why) from e
                            flex_warm.add(ps)
                        if ps == "fwd":
                            fn = lambda: attn(q, k, v)
                            torch.cuda.synchronize()
                            torch.cuda.reset_peak_memory_stats(dev)
                            before = torch.cuda.memory_allocated(dev)
                            o = fn()
                            torch.cuda.synchronize()
                            peak = torch.cuda.max_memory_allocated(dev)
                            row["extra_bytes_measured"] = max(0, peak - before - out_bytes)
                            if ref is not None:
                                err = (o[:1, :1].float() - ref).abs()
                                row["error"] = {
                                    "f32_ref_max_abs": float(err.max()),
                                    "nonfinite": int((~torch.isfinite(o[:1, :1])).sum()),
                                    "note": "vs torch f32 math on the (0, 0) slice",
                                }
                            del o
                            med, p10, p90, n = bench(fn)
                        else:
                            med, p10, p90, n, extra = time_backward(ps, attn, (q, k, v), d_o, out_bytes)
                            row["extra_bytes_measured"] = extra
                    timing = {"median_ms": med, "p10_ms": p10, "p90_ms": p90, "timer": timer}
                    if n:
                        timing["samples"] = n
                    row["timing"] = timing
                    row["tflops"] = row["flops"] / (med * 1e-3) / 1e12 if med > 0 else None
                    if Nq == 1 and med > 0 and ps == "fwd":
                        row["kv_tb_s"] = kv_bytes / (med * 1e-3) / 1e12
                except torch.cuda.OutOfMemoryError as e:
                    row.update(status="oom", message=str(e).split("\n")[0][:500])
                except FlexUnavailable as e:
                    row.update(status="unsupported", message=str(e).split("\n")[0][:500])
                except RuntimeError as e:
                    why = "; ".join(str(w.message).split("\n")[0] for w in caught[:3])
                    msg = (str(e).split("\n")[0] + (f" ({why})" if why else ""))[:500]
                    refusals = ("No available kernel", "No viable backend")
                    unsupported = any(m in str(e) for m in refusals) or "not supported" in str(e).lower()
                    row.update(status="unsupported" if unsupported else "error", message=msg)
                except Exception as e:  # keep going whatever one backend does
                    row.update(status="error", message=f"{type(e).__name__}: {e}"[:500])
            try:
                torch.cuda.synchronize()
            except Exception as e:
                row.update(status="error", message=f"device error after the call: {e}"[:500])
                write(row)
                log(f"the device stopped working ({e}): peers stop")
                return 1
            write(row)
            done += 1
            tf = row.get("tflops")
            what = f"{tf:.1f} TFLOP/s" if isinstance(tf, float) else row["status"]
            if isinstance(row.get("kv_tb_s"), float):
                what += f", K/V {row['kv_tb_s']:.2f} TB/s"
            name = row["method"] + ("" if ps == "fwd" else f" [{ps}]")
            log(f"[{done}/{total} {time.time() - t0:.0f}s] {s['key']} {name}: {what}")
        del q, k, v, d_o, ref, flex, slopes
        torch.cuda.empty_cache()
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

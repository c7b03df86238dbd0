#!/usr/bin/env python3
"""One cuDNN (and FA2) SDPA forward inside an NVTX range "prof", for ncu --nvtx-include prof/.
Usage: cudnn_ncu.py BATCH HEADS N D CAUSAL(0/1) BACKEND(cudnn|flash)."""
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
b, h, n, d, causal = (int(x) for x in sys.argv[1:6])
be = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[sys.argv[6]]
q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(be):
    for _ in range(3):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("prof")
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()

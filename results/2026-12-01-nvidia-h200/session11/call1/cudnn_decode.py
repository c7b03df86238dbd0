import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
B, H, KV, N, d = 16, 32, 8, 65536, 128
q = torch.randn(B, H, 1, d, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, KV, N, d, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, KV, N, d, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
torch.cuda.synchronize()

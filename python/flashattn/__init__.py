"""flashattn: FlashAttention in pure Rust, with FlashAttention-2's Python API.

Switching from the ``flash_attn`` package is one import line::

    from flashattn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

PyTorch tensors run in place (any strides with a contiguous head dimension, no copies) on
PyTorch's current CUDA stream, with gradients through ``torch.autograd``; CPU tensors run the CPU
implementation. Any other DLPack array (NumPy, CuPy, JAX) runs the forward through the same
functions, or both passes through ``attention_forward`` / ``attention_backward`` with outputs the
caller allocates.
"""

from ._core import __version__
from ._core import backward as attention_backward
from ._core import forward as attention_forward
from .interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

__all__ = [
    "__version__",
    "attention_backward",
    "attention_forward",
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
]

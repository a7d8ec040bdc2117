"""Precision conversions of programs: half precision (fp16 / bf16) as generic IR passes."""

from .fp16 import DEFAULT_KEEP_FP32, quantize_bf16, quantize_fp16

__all__ = ["DEFAULT_KEEP_FP32", "quantize_bf16", "quantize_fp16"]

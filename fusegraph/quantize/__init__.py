"""Precision conversions of programs: half precision (fp16 / bf16) as generic IR passes, and int8 /
fp8 post-training quantization with calibration (int8.py), with a per-layer sensitivity report."""

from .fp16 import DEFAULT_KEEP_FP32, quantize_bf16, quantize_fp16
from .int8 import quantize_fp8, quantize_int8

__all__ = ["DEFAULT_KEEP_FP32", "quantize_bf16", "quantize_fp16", "quantize_fp8", "quantize_int8", "sensitivity"]


def sensitivity(program, calibration, held_out=None, **options):
    """Per-layer error when only that layer is quantized, worst first: see sensitivity.py."""
    from .sensitivity import sensitivity as run

    return run(program, calibration, held_out, **options)

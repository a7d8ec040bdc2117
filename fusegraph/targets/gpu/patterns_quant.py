"""Which quantized products the gpu target runs as int8 / fp8 GEMMs with a fused epilogue
(patterns.py's match_gemm_epilogue takes their pointwise reader, as for float matmuls).

* quant_dot of int8 x int8, or float8_dot of e4m3fn x e4m3fn, both 2-D, the weights constant:
  quant_gemm_epilogue;
* quant_convolution (rewrite_quantized.py) of int8 x int8 or e4m3fn x e4m3fn, 2-D, ungrouped, the
  weights constant: quant_conv_epilogue, a GEMM over the rows of the channels-last input (a 1x1
  convolution) or of its patches (im2col) otherwise.
e5m2 has no e5m2 x e5m2 GEMM in cuBLASLt: its products take the plain lowerings (float32 sums).
"""

from __future__ import annotations

from ...ir.dtypes import DType
from ...ir.module import Instruction
from ...ir.shape import Shape

KINDS = {"quant_dot": "quant_gemm_epilogue", "float8_dot": "quant_gemm_epilogue",
         "quant_convolution": "quant_conv_epilogue"}
GEMM_TYPES = (DType.int8, DType.float8_e4m3fn)  # operand types of the int8 / fp8 GEMMs


def quant_product(mm: Instruction) -> bool:
    """Whether `mm` is a product that lower_quant.py runs as an int8 or fp8 GEMM."""
    if mm.op.name not in KINDS or not isinstance(mm.shape, Shape):
        return False
    x, w = mm.inputs
    if x.shape.dtype not in GEMM_TYPES or w.shape.dtype != x.shape.dtype or not w.is_literal:
        return False
    if mm.op.name == "quant_convolution":
        return x.shape.ndim == 4 and mm.op.group == 1
    return x.shape.ndim == 2 and w.shape.ndim == 2


def quant_epilogue_source(mm: Instruction) -> str | None:
    """The step kind of a quantized product the epilogue template takes, else None."""
    return KINDS[mm.op.name] if quant_product(mm) else None

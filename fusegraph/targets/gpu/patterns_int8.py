"""Which int8 products the gpu target runs as int8 GEMMs with a fused epilogue (patterns.py's
match_gemm_epilogue takes their pointwise reader, as for float matmuls).

* quant_dot of int8 x int8, both 2-D, the weights constant: int8_gemm_epilogue;
* quant_convolution (rewrite_quantized.py) of int8 x int8, 2-D, ungrouped, the weights constant:
  int8_conv_epilogue, a GEMM over the rows of the channels-last input (a 1x1 convolution) or of
  its patches (im2col) otherwise.
"""

from __future__ import annotations

from ...ir.dtypes import DType
from ...ir.module import Instruction
from ...ir.shape import Shape

KINDS = {"quant_dot": "int8_gemm_epilogue", "quant_convolution": "int8_conv_epilogue"}


def int8_product(mm: Instruction) -> bool:
    """Whether `mm` is a quant_dot / quant_convolution that lower_int8.py runs as an int8 GEMM."""
    if mm.op.name not in KINDS or not isinstance(mm.shape, Shape):
        return False
    x, w = mm.inputs
    if x.shape.dtype != DType.int8 or w.shape.dtype != DType.int8 or not w.is_literal:
        return False
    if mm.op.name == "quant_dot":
        return x.shape.ndim == 2 and w.shape.ndim == 2
    return x.shape.ndim == 4 and mm.op.group == 1


def int8_epilogue_source(mm: Instruction) -> str | None:
    """The step kind of an int8 product the epilogue template takes, else None."""
    return KINDS[mm.op.name] if int8_product(mm) else None

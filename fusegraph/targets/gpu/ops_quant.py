"""IR ops of the gpu target's quantized products (rewrite_quantized.py makes them; lower_quant.py runs them).

`quant_convolution` is ConvInteger's product without zero points: int8 x int8 summed exactly in
int32, the input padded with `pad_value` (the activation's zero point, so padded taps dequantize to
0 and the zero point comes out as one per-channel constant: conv(x - z) = conv(x padded z) - z * sum(w)).
That keeps both operands int8 for the GEMM, which is what cuBLASLt and Triton's int8 dot take.
Over float8 operands it sums in float32 (the products are exact there), as `float8_dot` does for
matmuls: the unscaled products cuBLASLt's fp8 GEMM (torch._scaled_mm) and Triton's fp8 dot make.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from ...ir.op import Op, OpKind, register_op
from ...ir.shape import Shape
from ...ops.conv import Convolution, conv_reference, window_attrs
from ...ops.gemm import Dot

FLOAT8 = (DType.float8_e4m3fn, DType.float8_e5m2)


def _product_type(op, a: Shape, b: Shape) -> DType:
    """int32 for integer operands, float32 for float8 ones."""
    if a.dtype.is_int and b.dtype.is_int:
        return DType.int32
    if a.dtype in FLOAT8 and b.dtype in FLOAT8:
        return DType.float32
    raise ShapeError(f"{op}: needs integer or float8 inputs, got {a} and {b}")


@register_op
class QuantConvolution(Convolution):
    """Convolution of x padded with `pad_value`, integer (accumulated in int32, wrapping like the
    hardware) or float8 (in float32); x (N, C, *sp) and w (M, C/group, *k)."""

    name = "quant_convolution"
    kind = OpKind.CONV
    pad_value: int = 0

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, w = inputs
        return Convolution.compute_shape(self, inputs).with_dtype(_product_type(self, x, w))

    def compute(self, args):
        x, w = (np.asarray(a) for a in args)
        wide = np.int64 if x.dtype.kind in "iu" else np.float32
        out = np.int32 if x.dtype.kind in "iu" else np.float32
        x, w = x.astype(wide), w.astype(wide)
        nsp = x.ndim - 2
        pb, pe, strides, dils = window_attrs(self, nsp)
        xp = np.pad(x, [(0, 0), (0, 0), *zip(pb, pe)], constant_values=self.pad_value)
        y = conv_reference(xp, w, (0,) * nsp, (0,) * nsp, strides, dils, self.group)
        return y.astype(out)


@register_op
class Float8Dot(Op):
    """float8 a @ b, the products summed in float32; result float32 (scales applied after)."""

    name = "float8_dot"
    kind = OpKind.GEMM

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        a, b = inputs
        if a.dtype not in FLOAT8 or b.dtype not in FLOAT8:
            raise ShapeError(f"{self}: needs float8 inputs, got {a} and {b}")
        return Dot.compute_shape(self, [a.with_dtype(DType.float32), b.with_dtype(DType.float32)])

    def compute(self, args):
        a, b = (np.asarray(x).astype(np.float32) for x in args)
        return np.matmul(a, b)

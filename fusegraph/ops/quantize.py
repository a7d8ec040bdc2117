"""Linear quantization: `quantize_linear` and `dequantize_linear`.

Both are pointwise ops over (x, scale, zero_point) of equal lens: the frontend reshapes per-axis
and blocked scales and broadcasts them, so one definition covers per-tensor, per-axis and blocked
quantization. They are named ops rather than loose pointwise chains so quantization passes can find
dequantize -> dot -> quantize patterns; their bodies still fuse and generate code like any other
pointwise op.
"""

from __future__ import annotations

import ml_dtypes

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import register_op
from .pointwise import PointwiseOp
from .scalar import call, convert

# Integer types ONNX quantizes to, with the range results saturate into.
INT_RANGES = {
    DType.uint8: (0, 255), DType.int8: (-128, 127),
    DType.uint16: (0, 65535), DType.int16: (-32768, 32767),
    DType.uint4: (0, 15), DType.int4: (-8, 7),
    DType.uint2: (0, 3), DType.int2: (-2, 1),
}
# Float types ONNX quantizes to: no zero point (it must be 0), rounding in the conversion.
FLOAT_QUANT = (DType.float8_e4m3fn, DType.float8_e4m3fnuz, DType.float8_e5m2, DType.float8_e5m2fnuz,
               DType.float4_e2m1fn)


def _check_quantized(op, dtype: DType) -> None:
    if dtype not in INT_RANGES and dtype not in FLOAT_QUANT:
        raise ShapeError(f"{op}: {dtype} is not a quantized type")


@register_op
class QuantizeLinear(PointwiseOp):
    """y = saturate(round_half_even(x / scale) + zero_point), as `to`.

    Float results (float8, float4) take no zero point (ONNX requires it to be 0) and round in the
    conversion; with `saturate` out-of-range values clamp to the largest finite value instead of
    becoming inf/nan (float4 has neither, so it always saturates).
    The division happens in x's dtype (the frontend converts x and scale for `precision`)."""

    name = "quantize_linear"
    arity = 3
    to: DType = DType.uint8
    saturate: bool = True

    def compute_shape(self, inputs):
        _check_quantized(self, self.to)
        return super().compute_shape(inputs)

    def body(self, x, scale, zero_point):
        q = x / scale
        if self.to in INT_RANGES:
            lo, hi = INT_RANGES[self.to]
            return convert(call("min", call("max", call("round", q) + zero_point, lo), hi), self.to)
        if self.saturate:
            top = float(ml_dtypes.finfo(self.to.np).max)
            q = call("min", call("max", q, -top), top)  # nan stays nan
        return convert(q, self.to)

    def output_dtype(self, dtypes):
        return self.to


@register_op
class DequantizeLinear(PointwiseOp):
    """y = (x - zero_point) * scale computed in float32, as `to` (the scale's dtype by default)."""

    name = "dequantize_linear"
    arity = 3
    to: DType = DType.float32

    def compute_shape(self, inputs):
        if not self.to.is_float:
            raise ShapeError(f"{self}: result type {self.to} is not a float type")
        return super().compute_shape(inputs)

    def body(self, x, scale, zero_point):
        f32 = DType.float32
        return convert((convert(x, f32) - convert(zero_point, f32)) * convert(scale, f32), self.to)

    def output_dtype(self, dtypes):
        return self.to

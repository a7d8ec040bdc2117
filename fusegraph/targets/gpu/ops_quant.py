"""IR ops of the gpu target's integer products (rewrite_quantized.py makes them; lower_quant.py runs them).

`quant_convolution` is ConvInteger's product without zero points: int8 x int8 summed exactly in
int32, the input padded with `pad_value` (the activation's zero point, so padded taps dequantize to
0 and the zero point comes out as one per-channel constant: conv(x - z) = conv(x padded z) - z * sum(w)).
That keeps both operands int8 for the GEMM, which is what cuBLASLt and Triton's int8 dot take.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from ...ir.op import OpKind, register_op
from ...ir.shape import Shape
from ...ops.conv import Convolution, conv_reference, window_attrs


@register_op
class QuantConvolution(Convolution):
    """Integer convolution accumulated in int32 (wrapping like the hardware) of x padded with
    `pad_value`; x (N, C, *sp) and w (M, C/group, *k) of integer types."""

    name = "quant_convolution"
    kind = OpKind.CONV
    pad_value: int = 0

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, w = inputs
        if not (x.dtype.is_int and w.dtype.is_int):
            raise ShapeError(f"{self}: needs integer inputs, got {x} and {w}")
        return Convolution.compute_shape(self, inputs).with_dtype(DType.int32)

    def compute(self, args):
        x, w = (np.asarray(a).astype(np.int64) for a in args)
        nsp = x.ndim - 2
        pb, pe, strides, dils = window_attrs(self, nsp)
        xp = np.pad(x, [(0, 0), (0, 0), *zip(pb, pe)], constant_values=self.pad_value)
        y = conv_reference(xp, w, (0,) * nsp, (0,) * nsp, strides, dils, self.group)
        return y.astype(np.int32)

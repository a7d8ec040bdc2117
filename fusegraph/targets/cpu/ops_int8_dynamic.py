"""The cpu target's op for a dynamically quantized product (ORT's quantize_dynamic: DynamicQuantizeLinear
-> MatMulInteger -> Cast -> Mul -> Add; passes/fuse_dynamic_int8.py makes it): the zero point and the
scale are tensors computed at run time, not attributes as in ops_int8.py's int8_dot.

    int8_dynamic_dot(x, x_zero_point, w, scale[, bias])
        = float32(int32(sum_k (x[m, k] - x_zero_point) * w[k, n])) * scale[n] (+ bias[n])

x: uint8/int8 [M, K]; x_zero_point: x's type, one value; w: int8 constant [K, N]; scale: float32, one
value or one per output column (run time: ORT's a_scale * w_scale); bias: float32 [N], a constant.
The result is reshaped to `out_lens` (empty: [M, N]; the last dim stays N).

The reference is the model's own arithmetic, rounding for rounding: the exact integer sum, its
conversion to float32 (Cast: the one rounding, where |sum| >= 2**24), the product with the scale, the
bias added after (two float32 roundings, no fused multiply-add). oneDNN's u8 x s8 matmul with an f32
destination computes exactly this where its integer sums are exact (onednn/quant.py), so the fused
kernel and the unfused program agree bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from ...ir.op import Op, OpKind, register_op
from ...ir.shape import Shape
from ...ops.gemm import QuantDot
from .ops_int8 import ACT_TYPES


@register_op
@dataclasses.dataclass(frozen=True)
class Int8DynamicDot(QuantDot):  # a quant_dot with its epilogue (reports count its FLOPs as one)
    """float32((x - x_zero_point) @ w) * scale (+ bias), x's zero point and the scale given at run time."""

    name = "int8_dynamic_dot"
    kind = OpKind.GEMM
    has_bias: bool = False
    out_lens: tuple[int, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if len(inputs) != 4 + self.has_bias:
            raise ShapeError(f"{self}: expects {4 + self.has_bias} inputs (x, x_zero_point, w, scale[, bias]), "
                             f"got {len(inputs)}")
        x, zp, w, scale = inputs[:4]
        if x.dtype not in ACT_TYPES or zp.dtype != x.dtype or zp.elements != 1 or w.dtype != DType.int8:
            raise ShapeError(f"{self}: x must be uint8/int8 with one zero point of its type and w int8; "
                             f"got {x}, {zp}, {w}")
        if x.ndim != 2 or w.ndim != 2 or x.lens[1] != w.lens[0]:
            raise ShapeError(f"{self}: x must be [M, K] and w [K, N]; got {x} and {w}")
        n = w.lens[1]
        if scale.dtype != DType.float32 or scale.lens not in ((), (1,), (n,)):
            raise ShapeError(f"{self}: scale must be float32, one value or [{n}]; got {scale}")
        if self.has_bias and (inputs[4].dtype != DType.float32 or inputs[4].lens != (n,)):
            raise ShapeError(f"{self}: bias must be float32[{n}], got {inputs[4]}")
        prod = Shape.of(DType.float32, [x.lens[0], n])
        out = prod.with_lens(self.out_lens) if self.out_lens else prod
        if out.elements != prod.elements or out.lens[-1:] != prod.lens[-1:]:
            raise ShapeError(f"{self}: out_lens {list(self.out_lens)} must hold {prod} with its last dim")
        return out

    def compute(self, args):
        x, zp, w, scale = args[:4]
        centred = x.astype(np.int64) - np.int64(np.asarray(zp).reshape(()))
        acc = np.matmul(centred, w.astype(np.int64)).astype(np.int32)  # int32 wraps like the hardware
        y = acc.astype(np.float32) * np.asarray(scale, np.float32).reshape(-1)
        if self.has_bias:
            y = y + args[4]
        return y.reshape(self.out_lens) if self.out_lens else y


@register_op
@dataclasses.dataclass(frozen=True)
class MinMax(Op):
    """[min(x), max(x)] over every element of a float32 x, in one pass (DynamicQuantizeLinear's two
    reductions, passes/fuse_dynamic_int8.py); NaN anywhere makes both NaN, as numpy's do."""

    name = "min_max"
    kind = OpKind.OPAQUE  # one kernel reading x once; no pass may split it back into reductions

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        if x.dtype != DType.float32 or x.elements == 0:
            raise ShapeError(f"{self}: x must be a non-empty float32 tensor, got {x}")
        return Shape.of(DType.float32, [2])

    def compute(self, args):
        x = np.asarray(args[0])
        return np.array([x.min(), x.max()], np.float32)

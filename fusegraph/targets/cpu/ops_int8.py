"""IR ops for the cpu target's int8 kernels: a DequantizeLinear -> Conv / MatMul -> QuantizeLinear
region of a QDQ model as one instruction over the integer tensors (passes/fuse_int8.py makes them).

Each keeps the exact float semantics of the region it replaces as its numpy reference (dequantize
in float32, the float product, bias, activations, quantize with round-half-even and saturation), so
the rewritten program still runs on the reference target and means what the model says. oneDNN
computes the same values with an exact integer sum (onednn/quant.py: one quantization step apart
at most, where the float reference's own rounding decides an edge).

Inputs: x (uint8 or int8), w (int8, constant), w_scale (float32, one per output channel), then the
bias (float32, one per output channel) if `has_bias`. x's scale and zero point and the output's are
attributes; `out_type` float32 means the dequantized result (a float consumer follows); int32 means
the exact integer sum of (x - x_zero_point) * w (ConvInteger, QLinearConv before their requantization:
scales 1, no bias or activations), as the frontend's int32 convolution computes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from ...ir.op import Op, OpKind, register_op
from ...ir.shape import Shape
from ...ops.conv import Convolution
from ...ops.gemm import Dot
from ...ops.quantize import INT_RANGES
from .ops import Activation, _check_chain, _first, _last, apply_chain, to_channels_first, to_channels_last

ACT_TYPES = (DType.uint8, DType.int8)
OUT_TYPES = (DType.uint8, DType.int8, DType.float32, DType.int32)


@dataclasses.dataclass(frozen=True)
class _Int8(Op):
    """What the two int8 ops share: the quantization attributes, their checks and the float math."""

    x_scale: float = 1.0
    x_zero_point: int = 0
    out_type: DType = DType.float32
    y_scale: float = 1.0
    y_zero_point: int = 0
    has_bias: bool = False
    activations: tuple[Activation, ...] = ()

    def _check(self, inputs: Sequence[Shape], channels: int) -> None:
        x, w, s = inputs[:3]
        if x.dtype not in ACT_TYPES or w.dtype != DType.int8 or s.dtype != DType.float32:
            raise ShapeError(f"{self}: x must be uint8/int8, w int8 and w_scale float32; got {x}, {w}, {s}")
        if self.out_type not in OUT_TYPES:
            raise ShapeError(f"{self}: out_type {self.out_type} is not one of {[str(t) for t in OUT_TYPES]}")
        if len(inputs) != 3 + self.has_bias:
            raise ShapeError(f"{self}: expects {3 + self.has_bias} inputs, got {len(inputs)}")
        for extra in inputs[2:]:
            if extra.lens != (channels,):
                raise ShapeError(f"{self}: w_scale and bias must be [{channels}], got {extra}")
        _check_chain(self, self.activations, 0)

    def _dequantize_x(self, x: np.ndarray) -> np.ndarray:
        f32 = np.float32
        return (x.astype(f32) - f32(self.x_zero_point)) * f32(self.x_scale)

    def _finish(self, y: np.ndarray, bias: np.ndarray | None, channel_axis: int) -> np.ndarray:
        if bias is not None:
            shape = [1] * y.ndim
            shape[channel_axis] = -1
            y = y + bias.reshape(shape)
        return self.requantize(apply_chain(y, self.activations, (), np.float32))

    def requantize(self, y: np.ndarray) -> np.ndarray:
        """The float result as `out_type`: QuantizeLinear's round-half-even and saturation."""
        if self.out_type == DType.float32:
            return y
        lo, hi = INT_RANGES[self.out_type]
        q = np.round(y / np.float32(self.y_scale)) + np.float32(self.y_zero_point)
        return np.clip(q, lo, hi).astype(self.out_type.np)


@register_op
class Int8Conv(_Int8, Convolution):
    """Quantized convolution: w is M, C/group, *k; with `channels_last`, x and the result are N, *sp, C."""

    name = "int8_conv"
    kind = OpKind.CONV
    channels_last: bool = False

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, w = inputs[:2]
        first = _first(x) if self.channels_last else x
        out = Convolution.compute_shape(self, [first.with_dtype(DType.float32), w.with_dtype(DType.float32)])
        self._check(inputs, w.lens[0])
        out = out.with_dtype(self.out_type)
        return _last(out) if self.channels_last else out

    def compute(self, args):
        x, w, ws = args[:3]
        nd = x.ndim
        if self.channels_last:
            x = x.transpose(to_channels_first(nd))
        if self.out_type == DType.int32:  # the integer sum, exactly (the reference accumulates in int64)
            xi = x.astype(np.int32) - np.int32(self.x_zero_point)
            y = Convolution.compute(self, [xi, w.astype(np.int32)]).astype(np.int32)
            return np.ascontiguousarray(y.transpose(to_channels_last(nd))) if self.channels_last else y
        wf = w.astype(np.float32) * ws.reshape((-1,) + (1,) * (w.ndim - 1))
        y = Convolution.compute(self, [self._dequantize_x(x), wf])
        y = self._finish(y, args[3] if self.has_bias else None, 1)
        return np.ascontiguousarray(y.transpose(to_channels_last(nd))) if self.channels_last else y


@register_op
class Int8Dot(_Int8, Dot):
    """Quantized product x[..., K] @ w[K, N], reshaped to `out_lens` (empty: the product's lens; the
    last dim stays N), bias and scales per output column."""

    name = "int8_dot"
    kind = OpKind.GEMM
    out_lens: tuple[int, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, w = inputs[:2]
        if w.ndim != 2:
            raise ShapeError(f"{self}: w must be K, N; got {w}")
        prod = Dot.compute_shape(self, [x.with_dtype(DType.float32), w.with_dtype(DType.float32)])
        self._check(inputs, w.lens[1])
        out = prod.with_lens(self.out_lens) if self.out_lens else prod
        if out.elements != prod.elements or out.lens[-1:] != prod.lens[-1:]:
            raise ShapeError(f"{self}: out_lens {list(self.out_lens)} must hold {prod} with its last dim")
        return out.with_dtype(self.out_type)

    def compute(self, args):
        x, w, ws = args[:3]
        y = Dot.compute(self, [self._dequantize_x(x), w.astype(np.float32) * ws.reshape(1, -1)])
        if self.out_lens:
            y = y.reshape(self.out_lens)
        return self._finish(y, args[3] if self.has_bias else None, y.ndim - 1)


@register_op
class Int8Lookup(Op):
    """y = table[x - min(x's type)]: a pointwise function of one 8-bit tensor, tabulated over its 256
    values (passes/tabulate_int8.py). `table` is a constant of 256 entries of the result's type."""

    name = "int8_lookup"
    kind = OpKind.OPAQUE  # not pointwise: no pass may fuse it back into (or plan it as) an expression

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, table = inputs
        if x.dtype not in ACT_TYPES or table.lens != (256,):
            raise ShapeError(f"{self}: x must be uint8/int8 and table [256]; got {x}, {table}")
        return Shape(table.dtype, x.dims)

    def compute(self, args):
        x, table = args
        return table[table_index(x)]


def table_index(x: np.ndarray) -> np.ndarray:
    """The table position of each 8-bit value: uint8 as itself, int8 + 128 (its bits with the sign flipped)."""
    return x.view(np.uint8) ^ np.uint8(0x80) if x.dtype == np.int8 else x


INT8_OPS: tuple[type[Op], ...] = (Int8Conv, Int8Dot, Int8Lookup)

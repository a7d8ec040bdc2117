"""Ops without a family of their own: the bit-pattern reinterpretation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape

# Element widths in bits where numpy's itemsize is not the truth: ml_dtypes keeps each sub-byte
# element in a byte of its own, holding the value in the low bits.
_SUB_BYTE_BITS = {DType.int4: 4, DType.uint4: 4, DType.float4_e2m1fn: 4, DType.int2: 2, DType.uint2: 2}


def bit_width(dtype: DType) -> int:
    """The element width ONNX gives `dtype`, in bits."""
    return _SUB_BYTE_BITS.get(dtype, dtype.itemsize * 8)


class MiscOp(Op):
    kind = OpKind.OPAQUE

    def _fail(self, msg: str, inputs: Sequence[Shape]) -> ShapeError:
        return ShapeError(f"{self.name}: {msg} (inputs {', '.join(map(str, inputs))})")


@register_op
class BitCast(MiscOp):
    """The input's bits read as `to`, an element type of the same width (ONNX BitCast: little endian,
    same shape). Not a view op: it changes the element type that movement ops keep."""

    name = "bitcast"
    to: DType = DType.int32

    def compute_shape(self, inputs):
        (x,) = inputs
        if DType.string in (x.dtype, self.to) or bit_width(x.dtype) != bit_width(self.to):
            raise self._fail(f"cannot reinterpret {x.dtype} ({bit_width(x.dtype)} bits) as "
                             f"{self.to} ({bit_width(self.to)} bits)", inputs)
        return Shape.of(self.to, x.lens)

    def compute_dynamic_shape(self, inputs):
        self.compute_shape([Shape.of(inputs[0].dtype, inputs[0].min_lens)])
        return inputs[0].with_dtype(self.to)

    def compute(self, args):
        # Same width, so same numpy itemsize, sub-byte types included (one element per byte, the
        # value in the low bits: ml_dtypes reads only those); equal itemsizes view any strides.
        return np.asarray(args[0]).view(self.to.np)

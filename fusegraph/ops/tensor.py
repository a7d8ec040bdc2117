"""Ops that make tensors from shapes and scalars: shape_of, size_of, constant_of_shape, range.

The frontend folds each of these into a literal when its inputs are known while parsing; these ops
remain only for values computed at run time (typically from a dynamic input's shape).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.limits import check_tensor
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape
from .movement import unknown_dims


class TensorOp(Op):
    kind = OpKind.OPAQUE


@register_op
class ShapeOf(TensorOp):
    """The dims [start, end) of the input (0 <= start <= end <= rank) as int64: only its rank
    matters to the shape rule, so it also holds for dynamic inputs."""

    name = "shape_of"
    start: int = 0
    end: int = 0

    def compute_shape(self, inputs):
        (x,) = inputs
        if not 0 <= self.start <= self.end <= x.ndim:
            raise ShapeError(f"{self}: bad range for {x}")
        return Shape.of(DType.int64, [self.end - self.start])

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        return np.array(np.shape(args[0])[self.start: self.end], dtype=np.int64)


@register_op
class SizeOf(TensorOp):
    """The number of elements of the input, as an int64 scalar."""

    name = "size_of"

    def compute_shape(self, inputs):
        return Shape.of(DType.int64, [])

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        return np.array(math.prod(np.shape(args[0])), dtype=np.int64)


@register_op
class ConstantOfShape(TensorOp):
    """A tensor of `value` (as `dtype`) whose dims are the input's values (int64 1-D)."""

    name = "constant_of_shape"
    value: int | float | bool = 0
    dtype: DType = DType.float32

    def compute_shape(self, inputs):
        (shape,) = inputs
        if shape.ndim != 1 or not shape.dims[0].is_fixed:
            raise ShapeError(f"constant_of_shape: the shape must be a 1-D tensor of known length, got {shape}")
        return Shape.dynamic(self.dtype, unknown_dims(shape.dims[0].min))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        lens = [int(n) for n in np.asarray(args[0]).reshape(-1)]
        check_tensor(lens, self.dtype, self.name)
        return np.full(lens, self.value, dtype=self.dtype.np)


@register_op
class Range(TensorOp):
    """start + i*delta for i < max(ceil((limit - start) / delta), 0); three scalar inputs of one dtype."""

    name = "range"

    def compute_shape(self, inputs):
        if len(inputs) != 3 or any(s.ndim != 0 or s.dtype != inputs[0].dtype for s in inputs):
            raise ShapeError(f"range: start, limit and delta must be scalars of one dtype, got {list(inputs)}")
        return Shape.dynamic(inputs[0].dtype, [Dim(0, None)])

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        dtype = np.asarray(args[0]).dtype
        # numpy evaluates in int64/float64 and we cast after, as the ONNX reference does.
        cast = int if dtype.kind in "iu" else float
        start, limit, delta = (cast(np.asarray(a).item()) for a in args)
        if delta == 0:
            raise ShapeError("range: delta is 0")
        if not all(math.isfinite(v) for v in (start, limit, delta)):
            raise ShapeError(f"range: start {start}, limit {limit} and delta {delta} must be finite")
        check_tensor([max(math.ceil((limit - start) / delta), 0)], DType.from_numpy(dtype), self.name)
        return np.arange(start, limit, delta).astype(dtype)

"""Reduction ops: sums, means, extrema, products, arg-extrema and softmax.

Every reduction keeps the reduced axes (as size 1), MIGraphX style: dropping them is a reshape the
frontend adds, so a reduction's output always has its input's rank and code generators see one
index space. Axes are normalized (non-negative, sorted, unique) by the frontend.

References compute in the input dtype with numpy's rules, as the ONNX reference and the ONNX
function bodies (Softmax = ReduceMax, Sub, Exp, ReduceSum, Div) do; faster targets may accumulate
half-precision inputs in float32 and are compared against these with half-precision tolerances.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape


def check_axes(op: Op, x: Shape, axes: Sequence[int]) -> None:
    if any(not 0 <= a < x.ndim for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: axes {list(axes)} out of range (or repeated) for {x}")


@dataclasses.dataclass(frozen=True)
class ReduceOp(Op):
    """Reduce `axes` of one input, keeping them as size-1 dims."""

    kind: ClassVar[OpKind] = OpKind.REDUCE
    axes: tuple[int, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        check_axes(self, x, self.axes)
        return Shape.of(x.dtype, [1 if i in self.axes else n for i, n in enumerate(x.lens)])

    def compute(self, args):
        x = np.asarray(args[0])
        return np.asarray(self.reduce(x, self.axes)).astype(x.dtype, copy=False)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError


@register_op
class ReduceSum(ReduceOp):
    name = "reduce_sum"

    def reduce(self, x, axes):
        return np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)


@register_op
class ReduceMean(ReduceOp):
    name = "reduce_mean"

    def reduce(self, x, axes):
        if x.dtype.kind in "iub":
            # Integer means are the float mean truncated toward zero (ONNX reference semantics).
            return np.trunc(np.mean(x, axis=axes, keepdims=True, dtype=np.float64))
        with np.errstate(invalid="ignore", divide="ignore"):  # an empty reduction's mean is nan
            return np.mean(x, axis=axes, keepdims=True, dtype=x.dtype)


@register_op
class ReduceProd(ReduceOp):
    name = "reduce_prod"

    def reduce(self, x, axes):
        return np.prod(x, axis=axes, keepdims=True, dtype=x.dtype)


def _lowest(dt: np.dtype):
    if dt.kind == "b":
        return False
    return -np.inf if DType.from_numpy(dt).is_float else np.iinfo(dt).min


def _highest(dt: np.dtype):
    if dt.kind == "b":
        return True
    return np.inf if DType.from_numpy(dt).is_float else np.iinfo(dt).max


@register_op
class ReduceMax(ReduceOp):
    """Max; an empty reduction gives the lowest value of the dtype (-inf for floats), as ONNX says."""

    name = "reduce_max"

    def reduce(self, x, axes):
        return np.max(x, axis=axes, keepdims=True, initial=_lowest(x.dtype))


@register_op
class ReduceMin(ReduceOp):
    """Min; an empty reduction gives the highest value of the dtype (+inf for floats)."""

    name = "reduce_min"

    def reduce(self, x, axes):
        return np.min(x, axis=axes, keepdims=True, initial=_highest(x.dtype))


_REDUCTIONS: dict[str, type[ReduceOp]] = {
    "sum": ReduceSum, "mean": ReduceMean, "prod": ReduceProd, "max": ReduceMax, "min": ReduceMin}


@register_op
class ReduceDynamic(Op):
    """A Reduce* whose axes are known only at run time: the second input, an int64 vector, with
    ONNX semantics applied when it runs (negative axes count from the end; no axes means every
    axis, or none with `noop_with_empty_axes`; `keepdims` as ONNX's). The frontend uses the static
    `reduce_*` ops whenever the axes are constants; this shape rule knows ranks, not dims."""

    name = "reduce_dynamic"
    kind = OpKind.REDUCE
    reduction: str = "sum"
    keepdims: bool = True
    noop_with_empty_axes: bool = False

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, axes = inputs
        if self.reduction not in _REDUCTIONS:
            raise ShapeError(f"{self}: unknown reduction; one of {sorted(_REDUCTIONS)}")
        if axes.ndim != 1 or not axes.dims[0].is_fixed or axes.dtype != DType.int64:
            raise ShapeError(f"{self}: axes must be an int64 vector of known length, got {axes}")
        n = axes.dims[0].min
        if n == 0 and self.noop_with_empty_axes:
            return Shape(x.dtype, x.dims)
        if self.keepdims:  # each dim is kept, or reduced to 1
            return Shape.dynamic(x.dtype, [Dim(min(d.min, 1), None if d.max is None else max(d.max, 1))
                                           for d in x.dims])
        rank = 0 if n == 0 else x.ndim - n
        if rank < 0:
            raise ShapeError(f"{self}: {n} axes for {x}")
        return Shape.dynamic(x.dtype, [Dim(0, None)] * rank)

    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs)

    def compute(self, args):
        x = np.asarray(args[0])
        raw = [int(a) for a in np.asarray(args[1]).reshape(-1)]
        if any(not -x.ndim <= a < x.ndim for a in raw):
            raise ValueError(f"axes {raw} out of range for rank {x.ndim}")
        axes = tuple(sorted({a % x.ndim for a in raw}))
        if not axes and not self.noop_with_empty_axes:
            axes = tuple(range(x.ndim))
        out = _REDUCTIONS[self.reduction](axes=axes).compute([x]) if axes else x
        return out if self.keepdims else np.squeeze(out, axis=axes)


@dataclasses.dataclass(frozen=True)
class ArgReduceOp(Op):
    """Index of the extremum along `axis` (kept as size 1), as int64."""

    kind: ClassVar[OpKind] = OpKind.REDUCE
    axis: int = 0
    select_last_index: bool = False

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        check_axes(self, x, (self.axis,))
        if x.lens[self.axis] == 0:
            raise ShapeError(f"{self}: cannot take the arg-extremum of an empty axis of {x}")
        return Shape.of(DType.int64, [1 if i == self.axis else n for i, n in enumerate(x.lens)])

    def compute(self, args):
        x = np.asarray(args[0])
        if not self.select_last_index:
            return self.arg(x, self.axis).astype(np.int64)
        # The last extremum is the first one of the reversed axis.
        last = self.arg(np.flip(x, self.axis), self.axis)
        return (x.shape[self.axis] - 1 - last).astype(np.int64)

    def arg(self, x: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError


@register_op
class ArgMax(ArgReduceOp):
    name = "argmax"

    def arg(self, x, axis):
        return np.argmax(x, axis=axis, keepdims=True)


@register_op
class ArgMin(ArgReduceOp):
    name = "argmin"

    def arg(self, x, axis):
        return np.argmin(x, axis=axis, keepdims=True)


@dataclasses.dataclass(frozen=True)
class SoftmaxOp(Op):
    """Softmax-like normalization along one axis; same shape and dtype as the input."""

    kind: ClassVar[OpKind] = OpKind.REDUCE
    axis: int = 0

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        check_axes(self, x, (self.axis,))
        if not x.dtype.is_float:
            raise ShapeError(f"{self}: needs a floating-point input, got {x}")
        return Shape.of(x.dtype, x.lens)

    def compute(self, args):
        x = np.asarray(args[0])
        if x.size == 0:
            return x.copy()
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            shifted = x - np.max(x, axis=self.axis, keepdims=True)  # exp cannot overflow
            total = np.sum(np.exp(shifted), axis=self.axis, keepdims=True)
            return self.normalize(shifted, total).astype(x.dtype, copy=False)

    def normalize(self, shifted: np.ndarray, total: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register_op
class Softmax(SoftmaxOp):
    name = "softmax"

    def normalize(self, shifted, total):
        return np.exp(shifted) / total


@register_op
class LogSoftmax(SoftmaxOp):
    name = "log_softmax"

    def normalize(self, shifted, total):
        return shifted - np.log(total)

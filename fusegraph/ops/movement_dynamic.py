"""Run-time-shaped variants of the movement ops.

Each takes the values that decide its output shape (reshape dims, expand shape, slice bounds, axes,
repeats, pads, split sizes) as int64 tensor inputs, with ONNX semantics applied when it runs, for
models that compute those values at run time (e.g. from `shape_of` of a dynamic input). The
frontend uses them only when a value is not a constant. The shape rule says what it can (rank,
dims that cannot change, bounds) and leaves the rest `Dim(0, None)`.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.limits import check_tensor
from ..ir.op import register_op
from ..ir.shape import Dim, Shape, TupleShape
from .layout import PAD_MODES, pad_array
from .movement import (
    MovementOp,
    dim_product,
    normalize_axes,
    resolve_reshape_dims,
    slice_bounds,
    unknown_dims,
)


def _vector_len(s: Shape, what: str) -> int:
    if s.ndim != 1 or not s.dims[0].is_fixed:
        raise ShapeError(f"{what} must be a 1-D tensor of known length, got {s}")
    return s.dims[0].min


def _ints(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


class DynamicOp(MovementOp):
    # Rules see input ranks and dims only, never values: the same rule serves static and dynamic inputs.
    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs)


@register_op
class ReshapeDynamic(MovementOp):
    """ONNX Reshape where the frontend could not resolve 0 (copy the input dim, unless `allowzero`)
    and -1 (infer). Either the dims are the attribute `dims`, when they are constants but the input
    dims are dynamic (the output dims follow from the input's), or they are the second input."""

    name = "reshape_dynamic"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    dims: tuple[int, ...] = ()
    allowzero: bool = False

    def compute_shape(self, inputs):
        if len(inputs) == 1:
            return Shape.of(inputs[0].dtype, resolve_reshape_dims(inputs[0].lens, self.dims, self.allowzero))
        x, dims = inputs
        return Shape.dynamic(x.dtype, unknown_dims(_vector_len(dims, "reshape_dynamic dims")))

    def compute_dynamic_shape(self, inputs):
        if len(inputs) == 2:
            return self.compute_shape(inputs)
        (x,) = inputs
        if self.dims.count(-1) > 1 or min(self.dims, default=0) < -1:
            raise ShapeError(f"{self}: bad target dims for {x}")
        copied = {k for k, d in enumerate(self.dims) if d == 0 and not self.allowzero and k < x.ndim}
        dims = [x.dims[k] if k in copied else Dim.fixed(max(d, 0)) for k, d in enumerate(self.dims)]
        if -1 in self.dims:
            # prod(input dims) == prod(output dims): the copied dims cancel, what is left is fixed
            rest = math.prod(d for k, d in enumerate(self.dims) if k not in copied and d != -1)
            left = dim_product([d for k, d in enumerate(x.dims) if k not in copied])
            inferred = Dim(0, None)
            if rest > 0:
                inferred = Dim(left.min // rest, None if left.max is None else left.max // rest)
            dims[self.dims.index(-1)] = inferred
        return Shape.dynamic(x.dtype, dims)

    def compute(self, args):
        dims = self.dims if len(args) == 1 else _ints(args[1])
        return np.reshape(args[0], resolve_reshape_dims(args[0].shape, dims, self.allowzero))


@register_op
class ExpandDynamic(DynamicOp):
    """Expand(x, shape): x broadcast with `shape` both ways."""

    name = "expand_dynamic"

    def compute_shape(self, inputs):
        x, shape = inputs
        rank = max(x.ndim, _vector_len(shape, "expand_dynamic shape"))
        dims = list(unknown_dims(rank))
        for i, d in enumerate(x.dims):
            if d.is_fixed and d.min != 1:  # only dims of 1 broadcast: the others are kept
                dims[rank - x.ndim + i] = d
        return Shape.dynamic(x.dtype, dims)

    def compute(self, args):
        x, shape = args
        out = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
        check_tensor(out, DType.from_numpy(x.dtype), self.name)  # a view here; a buffer in every consumer
        return np.broadcast_to(x, out)


@register_op
class SliceDynamic(DynamicOp):
    """Slice(x, starts, ends, axes, steps), all four inputs of one length; no dim grows."""

    name = "slice_dynamic"

    def compute_shape(self, inputs):
        x, *bounds = inputs
        if len(bounds) != 4 or len({_vector_len(b, "slice_dynamic bounds") for b in bounds}) != 1:
            raise ShapeError(f"slice_dynamic takes starts, ends, axes, steps of one length, got {bounds}")
        return Shape.dynamic(x.dtype, [Dim(0, d.max) for d in x.dims])

    def compute(self, args):
        x, starts, ends, axes, steps = (args[0], *map(_ints, args[1:]))
        index = [slice(None)] * x.ndim
        for a, s, e, st in zip(normalize_axes(axes, x.ndim), starts, ends, steps, strict=True):
            s, e = slice_bounds(x.shape[a], s, e, st)
            index[a] = slice(s, None if e < 0 else e, st)
        return x[tuple(index)]


@register_op
class SqueezeDynamic(DynamicOp):
    """Squeeze(x, axes): drop the size-1 dims `axes`."""

    name = "squeeze_dynamic"

    def compute_shape(self, inputs):
        x, axes = inputs
        n = _vector_len(axes, "squeeze_dynamic axes")
        if n > x.ndim:
            raise ShapeError(f"squeeze_dynamic: {n} axes for {x}")
        return Shape.dynamic(x.dtype, unknown_dims(x.ndim - n))

    def compute(self, args):
        x, axes = args
        return np.squeeze(x, axis=tuple(normalize_axes(_ints(axes), x.ndim)))


@register_op
class UnsqueezeDynamic(DynamicOp):
    """Unsqueeze(x, axes): insert size-1 dims at `axes` of the output."""

    name = "unsqueeze_dynamic"

    def compute_shape(self, inputs):
        x, axes = inputs
        return Shape.dynamic(x.dtype, unknown_dims(x.ndim + _vector_len(axes, "unsqueeze_dynamic axes")))

    def compute(self, args):
        x, axes = args
        axes = _ints(axes)
        return np.expand_dims(x, tuple(normalize_axes(axes, x.ndim + len(axes))))


@register_op
class TileDynamic(DynamicOp):
    """Tile(x, repeats): x repeated `repeats[i]` times along axis i."""

    name = "tile_dynamic"

    def compute_shape(self, inputs):
        x, repeats = inputs
        if _vector_len(repeats, "tile_dynamic repeats") != x.ndim:
            raise ShapeError(f"tile_dynamic: repeats {repeats} do not fit {x}")
        return Shape.dynamic(x.dtype, unknown_dims(x.ndim))

    def compute(self, args):
        x, repeats = np.asarray(args[0]), _ints(args[1])
        if len(repeats) == x.ndim:  # np.tile's own rule for other lengths
            check_tensor([n * max(r, 0) for n, r in zip(x.shape, repeats)], DType.from_numpy(x.dtype), self.name)
        return np.tile(x, repeats)


@register_op
class PadDynamic(DynamicOp):
    """Pad(x, pads, value, axes): pads = begins then ends of `axes`, negative ones crop."""

    name = "pad_dynamic"
    mode: str = "constant"

    def compute_shape(self, inputs):
        x, pads, value, axes = inputs
        if self.mode not in PAD_MODES or value.ndim != 0 or value.dtype != x.dtype or (
                _vector_len(pads, "pad_dynamic pads") != 2 * _vector_len(axes, "pad_dynamic axes")):
            raise ShapeError(f"{self}: bad pads {pads}, value {value} or axes {axes} for {x}")
        return Shape.dynamic(x.dtype, unknown_dims(x.ndim))

    def compute(self, args):
        x, pads, value, axes = args
        pads, axes = _ints(pads), normalize_axes(_ints(axes), x.ndim)
        begins, ends = [0] * x.ndim, [0] * x.ndim
        for k, a in enumerate(axes):
            begins[a], ends[a] = pads[k], pads[k + len(axes)]
        check_tensor([max(n + b + e, 0) for n, b, e in zip(x.shape, begins, ends)], DType.from_numpy(x.dtype), self.name)
        return pad_array(x, begins, ends, self.mode, value)


@register_op
class SplitDynamic(DynamicOp):
    """Split(x, sizes) along `axis` into `num_outputs` parts; without sizes, into parts of
    ceil(dim / num_outputs), the last one smaller."""

    name = "split_dynamic"
    axis: int = 0
    num_outputs: int = 1

    def compute_shape(self, inputs):
        x, *sizes = inputs
        if not 0 <= self.axis < x.ndim or (sizes and _vector_len(sizes[0], "split sizes") != self.num_outputs):
            raise ShapeError(f"{self}: bad axis or sizes for {x}")
        dims = list(x.dims)
        dims[self.axis] = Dim(0, x.dims[self.axis].max)
        return TupleShape(tuple(Shape.dynamic(x.dtype, dims) for _ in range(self.num_outputs)))

    def compute(self, args):
        x = args[0]
        dim = x.shape[self.axis]
        if len(args) > 1:
            sizes = _ints(args[1])
        else:
            chunk = -(-dim // self.num_outputs)
            sizes = [min(chunk, max(dim - k * chunk, 0)) for k in range(self.num_outputs)]
        if sum(sizes) != dim or min(sizes) < 0:
            raise ShapeError(f"{self}: sizes {sizes} do not cut dim {dim}")
        return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=self.axis))

"""Movement ops: views and copies that rearrange elements without arithmetic.

Views (broadcast, transpose, squeeze, unsqueeze) report the strides they would have over their
input's memory, so later passes can tell a free view from a copy. The frontend resolves every ONNX
quirk (0/-1 reshape dims, negative axes, out-of-range slice bounds) before an op is made: attributes
here are always explicit and in range.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape


class MovementOp(Op):
    kind = OpKind.MOVEMENT


@register_op
class Broadcast(MovementOp):
    """numpy.broadcast_to(x, out_lens): a view with zero strides on broadcast axes."""

    name = "broadcast"
    out_lens: tuple[int, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        try:
            if tuple(np.broadcast_shapes(x.lens, self.out_lens)) != tuple(self.out_lens):
                raise ValueError
        except ValueError:
            raise ShapeError(f"cannot broadcast {x} to {list(self.out_lens)}") from None
        pad = len(self.out_lens) - x.ndim
        strides = [0] * pad + [0 if n == 1 and m != 1 else s
                               for n, m, s in zip(x.lens, self.out_lens[pad:], x.strides, strict=True)]
        return Shape.of(x.dtype, self.out_lens, strides)

    def compute(self, args):
        return np.broadcast_to(args[0], self.out_lens)


@register_op
class BroadcastLike(MovementOp):
    """Broadcast the first input against the others (for dynamic shapes, known only at run time)."""

    name = "broadcast_like"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)

    def compute_shape(self, inputs):
        lens = np.broadcast_shapes(*[s.lens for s in inputs])
        return Shape.of(inputs[0].dtype, lens)

    def compute_dynamic_shape(self, inputs):
        rank = max(s.ndim for s in inputs)
        dims = []
        for k in range(rank):
            ds = [s.dims[k - rank + s.ndim] for s in inputs if k - rank + s.ndim >= 0]
            fixed = {d.min for d in ds if d.is_fixed and d.min != 1}
            if len(fixed) > 1 or any(not (d.contains(1) or d.contains(n)) for d in ds for n in fixed):
                raise ShapeError(f"broadcast_like: cannot broadcast {', '.join(map(str, inputs))}")
            if fixed:  # every other input is 1 or this size
                dims.append(Dim.fixed(fixed.pop()))
            elif all(d == Dim.fixed(1) for d in ds):
                dims.append(Dim.fixed(1))
            else:  # the largest input dim, or 0 when a 0 meets 1s
                lo = 0 if any(d.min == 0 for d in ds) else max(d.min for d in ds)
                hi = None if any(d.max is None for d in ds) else max(d.max for d in ds)
                dims.append(Dim(lo, hi))
        return Shape.dynamic(inputs[0].dtype, dims)

    def compute(self, args):
        return np.broadcast_to(args[0], np.broadcast_shapes(*[np.shape(a) for a in args]))


@register_op
class Reshape(MovementOp):
    """Reshape to `dims` (no 0/-1 here: the frontend resolves them)."""

    name = "reshape"
    dims: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        if int(np.prod(self.dims)) != x.elements:
            raise ShapeError(f"cannot reshape {x} to {list(self.dims)}")
        return Shape.of(x.dtype, self.dims)

    def compute(self, args):
        return np.reshape(args[0], self.dims)


def resolve_reshape_dims(lens: Sequence[int], dims: Sequence[int], allowzero: bool) -> tuple[int, ...]:
    """ONNX Reshape's target dims made explicit: 0 copies the input dim (unless `allowzero`), one
    -1 takes what is left."""
    out = [lens[i] if d == 0 and not allowzero and i < len(lens) else d for i, d in enumerate(dims)]
    total = math.prod(lens)
    if out.count(-1) > 1 or any(d < -1 for d in out):
        raise ShapeError(f"reshape: bad target dims {list(dims)}")
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or total % rest:
            raise ShapeError(f"reshape: cannot infer -1 in {list(dims)} for input dims {list(lens)}")
        out[out.index(-1)] = total // rest
    if math.prod(out) != total:
        raise ShapeError(f"reshape: cannot reshape dims {list(lens)} to {list(dims)}")
    return tuple(out)


@register_op
class Transpose(MovementOp):
    name = "transpose"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    perm: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        if sorted(self.perm) != list(range(x.ndim)):
            raise ShapeError(f"bad permutation {list(self.perm)} for {x}")
        return Shape.of(x.dtype, [x.lens[p] for p in self.perm], [x.strides[p] for p in self.perm])

    def compute_dynamic_shape(self, inputs):
        (x,) = inputs
        if sorted(self.perm) != list(range(x.ndim)):
            raise ShapeError(f"bad permutation {list(self.perm)} for {x}")
        return Shape.dynamic(x.dtype, [x.dims[p] for p in self.perm])

    def compute(self, args):
        return np.transpose(args[0], self.perm)


@register_op
class Contiguous(MovementOp):
    """Copy a view into standard (row-major) layout."""

    name = "contiguous"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)

    def compute_shape(self, inputs):
        return Shape.of(inputs[0].dtype, inputs[0].lens)

    def compute(self, args):
        return np.ascontiguousarray(args[0])


@register_op
class Squeeze(MovementOp):
    """Drop the size-1 dimensions `axes` (sorted, non-negative): a view."""

    name = "squeeze"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    axes: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        keep = self._kept(x)
        return Shape.of(x.dtype, [x.lens[i] for i in keep], [x.strides[i] for i in keep])

    def compute_dynamic_shape(self, inputs):
        (x,) = inputs
        return Shape.dynamic(x.dtype, [x.dims[i] for i in self._kept(x)])

    def _kept(self, x: Shape) -> list[int]:
        if any(not 0 <= a < x.ndim or x.dims[a] != Dim.fixed(1) for a in self.axes):
            raise ShapeError(f"squeeze: axes {list(self.axes)} are not all size-1 dimensions of {x}")
        return [i for i in range(x.ndim) if i not in self.axes]

    def compute(self, args):
        return np.squeeze(args[0], axis=self.axes)


@register_op
class Unsqueeze(MovementOp):
    """Insert size-1 dimensions so that they sit at `axes` (sorted, of the output): a view."""

    name = "unsqueeze"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    axes: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        rank = x.ndim + len(self.axes)
        if len(set(self.axes)) != len(self.axes) or any(not 0 <= a < rank for a in self.axes):
            raise ShapeError(f"unsqueeze: bad axes {list(self.axes)} for {x}")
        lens, strides = list(x.lens), list(x.strides)
        for a in sorted(self.axes):
            # A size-1 dim's stride is never used; pick the standard one so standard stays standard.
            inner = strides[a] * max(lens[a], 1) if a < len(lens) else 1
            lens.insert(a, 1)
            strides.insert(a, inner)
        return Shape.of(x.dtype, lens, strides)

    def compute_dynamic_shape(self, inputs):
        (x,) = inputs
        dims = list(x.dims)
        for a in sorted(self.axes):
            dims.insert(a, Dim.fixed(1))
        return Shape.dynamic(x.dtype, dims)

    def compute(self, args):
        return np.expand_dims(args[0], self.axes)


@register_op
class Flatten(MovementOp):
    """Reshape to 2-D [prod(dims[:axis]), prod(dims[axis:])]. The frontend uses it for dynamic
    inputs, whose reshape dims are not known when parsing; static inputs become `reshape`."""

    name = "flatten"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    axis: int = 1

    def compute_shape(self, inputs):
        (x,) = inputs
        if not 0 <= self.axis <= x.ndim:
            raise ShapeError(f"flatten: axis {self.axis} out of range for {x}")
        return Shape.of(x.dtype, [math.prod(x.lens[: self.axis]), math.prod(x.lens[self.axis:])])

    def compute_dynamic_shape(self, inputs):
        (x,) = inputs
        self.compute_shape([Shape.of(x.dtype, x.min_lens)])  # checks the axis
        return Shape.dynamic(x.dtype, [dim_product(x.dims[: self.axis]), dim_product(x.dims[self.axis:])])

    def compute(self, args):
        x = args[0]
        return np.reshape(x, (math.prod(x.shape[: self.axis]), math.prod(x.shape[self.axis:])))


def dim_product(dims: Sequence[Dim]) -> Dim:
    """The range of a product of dims."""
    hi = None if any(d.max is None for d in dims) else math.prod(d.max for d in dims)
    return Dim(math.prod(d.min for d in dims), hi)


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice bounds resolved against a dimension: negative values count from the end, then
    clamped. Positive steps give 0 <= start <= end <= dim; negative steps give
    -1 <= end <= start <= dim-1, where end == -1 means "through index 0" (and start is -1 only
    when dim is 0)."""
    if step == 0:
        raise ShapeError("slice step cannot be 0")
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, start), dim)
    else:
        start = min(max(start, 0), dim - 1)  # -1 only for an empty dim
        end = min(max(end, -1), start)
    return start, end


def slice_len(start: int, end: int, step: int) -> int:
    return max(0, -(-(end - start) // step))


def _resolved(dim: int, start: int, end: int, step: int) -> bool:
    if step > 0:
        return 0 <= start <= end <= dim
    return step < 0 and -1 <= end <= start <= dim - 1 and (start >= 0 or dim == 0)


@register_op
class Slice(MovementOp):
    """x[start:end:step] on each of `axes`, with bounds already resolved by `slice_bounds`."""

    name = "slice"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    axes: tuple[int, ...] = ()
    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        if not len(self.axes) == len(self.starts) == len(self.ends) == len(self.steps):
            raise ShapeError(f"{self}: axes, starts, ends and steps differ in length")
        lens = list(x.lens)
        for a, s, e, st in zip(self.axes, self.starts, self.ends, self.steps, strict=True):
            if not 0 <= a < x.ndim or not _resolved(lens[a], s, e, st):
                raise ShapeError(f"{self}: bounds are not resolved for {x}")
            lens[a] = slice_len(s, e, st)
        return Shape.of(x.dtype, lens)

    def compute_dynamic_shape(self, inputs):
        # the sliced dims are static (the frontend uses slice_dynamic otherwise); the rest are kept
        (x,) = inputs
        if any(not 0 <= a < x.ndim or not x.dims[a].is_fixed for a in self.axes):
            raise ShapeError(f"{self}: sliced dims of {x} must be static")
        sliced = self.compute_shape([Shape.of(x.dtype, [d.min for d in x.dims])])
        return Shape.dynamic(x.dtype, [sliced.dims[i] if i in self.axes else d for i, d in enumerate(x.dims)])

    def compute(self, args):
        index = [slice(None)] * np.ndim(args[0])
        for a, s, e, st in zip(self.axes, self.starts, self.ends, self.steps, strict=True):
            index[a] = slice(s, None if e < 0 else e, st)
        return args[0][tuple(index)]


def normalize_axes(axes: Sequence[int], rank: int) -> list[int]:
    """ONNX axes (negative counts from the end) as distinct non-negative axes."""
    out = [int(a) + rank if a < 0 else int(a) for a in axes]
    if len(set(out)) != len(out) or any(not 0 <= a < rank for a in out):
        raise ShapeError(f"bad axes {list(axes)} for rank {rank}")
    return out


def unknown_dims(n: int) -> tuple[Dim, ...]:
    """`n` dims known only at run time."""
    return tuple(Dim(0, None) for _ in range(n))

"""Sequence ops. At run time a sequence is a Python list of arrays; its shape is a `SequenceShape`.

Ops that make a sequence are not `deterministic`: a sequence is no tensor, so constant folding
must not turn it into a literal.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import (
    Dim,
    SequenceShape,
    Shape,
    TupleShape,
    ValueShape,
    join_elem,
    shape_covers,
)
from .control import ControlOp

_INDEX_TYPES = (DType.int32, DType.int64)


class SequenceOp(Op):
    kind = OpKind.OPAQUE

    def infer_shape(self, inputs):
        # The rules below read dims (Dim ranges) directly, so they serve static and dynamic shapes alike.
        return self.compute_shape(inputs)

    def _seq(self, s: ValueShape) -> SequenceShape:
        if not isinstance(s, SequenceShape):
            raise ShapeError(f"{self.name}: expected a sequence, got {s}")
        return s

    def _elem(self, s: SequenceShape) -> Shape:
        if s.elem is None:
            raise ShapeError(f"{self.name}: the elements of {s} have an unknown rank")
        return s.elem

    def _index(self, s: ValueShape, what: str) -> None:
        if not isinstance(s, Shape) or s.dtype not in _INDEX_TYPES or s.ndim > 1 or s.dims and s.dims[0] != Dim.fixed(1):
            raise ShapeError(f"{self.name}: {what} must be an int32/int64 scalar, got {s}")


def _position(pos: np.ndarray, n: int, what: str, end_ok: bool) -> int:
    """A position in [-n, n) (or [-n, n] when `end_ok`) as a non-negative index."""
    p = int(np.asarray(pos).reshape(-1)[0])
    hi = n if end_ok else n - 1
    if not -n <= p <= hi:
        raise IndexError(f"{what} {p} is out of range for a sequence of {n}")
    return p + n if p < 0 else p


def _plus(d: Dim, k: int) -> Dim:
    return Dim(max(d.min + k, 0), None if d.max is None else max(d.max + k, 0))


@register_op
class SequenceConstruct(SequenceOp):
    name = "sequence_construct"
    deterministic = False

    def compute_shape(self, inputs):
        if not inputs or not all(isinstance(s, Shape) for s in inputs):
            raise ShapeError(f"sequence_construct: takes one or more tensors, got {list(map(str, inputs))}")
        elem: Shape | None = inputs[0]
        for s in inputs[1:]:
            if s.dtype != inputs[0].dtype:
                raise ShapeError(f"sequence_construct: tensors of different types {inputs[0]} and {s}")
            elem = join_elem(elem, s)
        return SequenceShape(inputs[0].dtype, elem, Dim.fixed(len(inputs)))

    def compute(self, args):
        return list(args)


@register_op
class SequenceEmpty(SequenceOp):
    name = "sequence_empty"
    deterministic = False
    dtype: DType = DType.float32

    def compute_shape(self, inputs):
        return SequenceShape(self.dtype, None, Dim.fixed(0))

    def compute(self, args):
        return []


@register_op
class SequenceAt(SequenceOp):
    """The element at a position (negative counts from the end)."""

    name = "sequence_at"

    def compute_shape(self, inputs):
        seq, pos = inputs
        self._index(pos, "the position")
        return self._elem(self._seq(seq))

    def compute(self, args):
        seq, pos = args
        return seq[_position(pos, len(seq), "position", end_ok=False)]


@register_op
class SequenceInsert(SequenceOp):
    """Insert a tensor at a position (negative counts from the end; no position: append)."""

    name = "sequence_insert"
    deterministic = False

    def compute_shape(self, inputs):
        seq, x, *pos = inputs
        seq = self._seq(seq)
        if pos:
            self._index(pos[0], "the position")
        if not isinstance(x, Shape) or x.dtype != seq.dtype:
            raise ShapeError(f"sequence_insert: cannot insert {x} into {seq}")
        elem = x if seq.known_empty else join_elem(seq.elem, x)
        return SequenceShape(seq.dtype, elem, _plus(seq.length, 1))

    def compute(self, args):
        seq, x, *pos = args
        out = list(seq)
        out.insert(_position(pos[0], len(seq), "position", end_ok=True) if pos else len(seq), x)
        return out


@register_op
class SequenceErase(SequenceOp):
    """Remove the element at a position (negative counts from the end)."""

    name = "sequence_erase"
    deterministic = False

    def compute_shape(self, inputs):
        seq, pos = inputs
        seq = self._seq(seq)
        self._index(pos, "the position")
        return SequenceShape(seq.dtype, seq.elem, _plus(seq.length, -1))

    def compute(self, args):
        seq, pos = args
        out = list(seq)
        del out[_position(pos, len(seq), "position", end_ok=False)]
        return out


@register_op
class SequenceLength(SequenceOp):
    name = "sequence_length"

    def compute_shape(self, inputs):
        self._seq(inputs[0])
        return Shape.of(DType.int64, ())

    def compute(self, args):
        return np.array(len(args[0]), np.int64)


@register_op
class SplitToSequence(SequenceOp):
    """Split a tensor along `axis` into pieces of `sizes`. With `sizes` None: by the run-time split
    given as a second input (a piece size, the last piece smaller, or a 1-D list of sizes), or with
    no second input into pieces of one, dropping the axis unless `keepdims`."""

    name = "split_to_sequence"
    deterministic = False
    axis: int = 0
    sizes: tuple[int, ...] | None = None
    keepdims: bool = True

    def compute_shape(self, inputs):
        x, *split = inputs
        if not isinstance(x, Shape) or not 0 <= self.axis < x.ndim:
            raise ShapeError(f"split_to_sequence: {x} has no axis {self.axis}")
        total = x.dims[self.axis]
        if split:
            if self.sizes is not None or not isinstance(split[0], Shape) or split[0].ndim > 1 \
                    or split[0].dtype not in _INDEX_TYPES:
                raise ShapeError(f"split_to_sequence: a run-time split must be int32/int64 of rank <= 1, got {split[0]}")
            piece, length = Dim(0, total.max), (split[0].dims[0] if split[0].ndim else Dim(0, None))
        elif self.sizes is None:
            piece, length = Dim.fixed(1), total
        else:
            if any(n < 0 for n in self.sizes) or (total.is_fixed and sum(self.sizes) != total.min):
                raise ShapeError(f"split_to_sequence: sizes {list(self.sizes)} do not split {x} along axis {self.axis}")
            piece = Dim(min(self.sizes), max(self.sizes)) if self.sizes else Dim(0, 0)
            length = Dim.fixed(len(self.sizes))
        kept = (piece,) if split or self.sizes is not None or self.keepdims else ()
        return SequenceShape(x.dtype, Shape.dynamic(x.dtype, x.dims[:self.axis] + kept + x.dims[self.axis + 1:]),
                             length)

    def compute(self, args):
        x, *split = args
        n = x.shape[self.axis]
        sizes = self.sizes if self.sizes is not None else split_sizes(split[0], n) if split else None
        if sizes is None:
            pieces = np.split(x, n, axis=self.axis) if n else []
            return [p if self.keepdims else np.squeeze(p, self.axis) for p in pieces]
        if sum(sizes) != n or any(k < 0 for k in sizes):
            raise ValueError(f"split sizes {list(sizes)} do not add up to {n}")
        return np.split(x, np.cumsum(sizes)[:-1], axis=self.axis)


def split_sizes(split: np.ndarray, n: int) -> list[int]:
    split = np.asarray(split)
    if split.ndim:
        return [int(k) for k in split]
    chunk = int(split)
    if chunk <= 0:
        raise ValueError(f"split must be positive, got {chunk}")
    return [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])


@register_op
class ConcatFromSequence(SequenceOp):
    """Concatenate a sequence's tensors along `axis` (a new axis when `new_axis`); axis is
    non-negative, counted in the result when `new_axis`."""

    name = "concat_from_sequence"
    axis: int = 0
    new_axis: bool = False

    def compute_shape(self, inputs):
        seq = self._seq(inputs[0])
        elem = self._elem(seq)
        n = seq.length
        if not 0 <= self.axis < elem.ndim + self.new_axis:
            raise ShapeError(f"concat_from_sequence: axis {self.axis} is out of range for {seq}")
        if self.new_axis:
            return Shape.dynamic(elem.dtype, elem.dims[:self.axis] + (n,) + elem.dims[self.axis:])
        d = elem.dims[self.axis]
        hi = None if n.max is None or d.max is None else n.max * d.max
        return Shape.dynamic(elem.dtype, elem.dims[:self.axis] + (Dim(n.min * d.min, hi),) + elem.dims[self.axis + 1:])

    def compute(self, args):
        (seq,) = args
        if not seq:
            raise ValueError("cannot concatenate an empty sequence")
        return np.stack(seq, self.axis) if self.new_axis else np.concatenate(seq, self.axis)


@register_op
class SequenceMap(ControlOp):
    """Run the body once per element of the first input (a sequence). Later inputs are sequences of
    the same length (the body gets their element at the same position) or tensors (passed whole).
    Each body result is collected into a sequence."""

    name = "sequence_map"
    deterministic = False

    def compute_shape_with_modules(self, inputs, modules):
        (body,) = modules
        if not inputs or not isinstance(inputs[0], SequenceShape):
            raise ShapeError(f"sequence_map: the first input must be a sequence, got {inputs[:1]}")
        params = [p.shape for p in body.parameters]
        if len(params) != len(inputs):
            raise ShapeError(f"sequence_map: {len(inputs)} inputs for a body of {len(params)} parameters")
        for k, (s, p) in enumerate(zip(inputs, params, strict=True)):
            value = s.elem if isinstance(s, SequenceShape) else s
            if value is None or not shape_covers(p, value):
                raise ShapeError(f"sequence_map: input {k} {s} does not fit the body parameter {p}")
        outs = []
        for o in body.outputs:
            if not isinstance(o.shape, Shape):
                raise ShapeError(f"sequence_map: the body must return tensors, got {o.shape}")
            outs.append(SequenceShape(o.shape.dtype, o.shape, inputs[0].length))
        return TupleShape(tuple(outs))

    def compute_control(self, args, modules, run):
        (body,) = modules
        n = len(args[0])
        if any(isinstance(a, list) and len(a) != n for a in args):
            raise ValueError(f"sequence_map: input sequences differ in length ({[len(a) for a in args if isinstance(a, list)]})")
        results: list[list[np.ndarray]] = [[] for _ in body.outputs]
        for i in range(n):
            outs = run(body, [a[i] if isinstance(a, list) else a for a in args])
            for acc, v in zip(results, outs, strict=True):
                acc.append(v)
        return tuple(results)

"""Selection and ordering ops: top-k, the running sum and product, and the ops whose output extent
depends on the input values (nonzero, compress, unique, non-max suppression).

A data-dependent extent is a dynamic dimension `Dim(0, bound)`, bound by the largest input (None when
an input dimension is unbounded); the rest of the shape is static where the inputs are.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import AnyShape, Dim, Shape, TupleShape


class SelectOp(Op):
    kind = OpKind.OPAQUE

    def _fail(self, msg: str, inputs: Sequence[AnyShape]) -> ShapeError:
        return ShapeError(f"{self.name}: {msg} (inputs {', '.join(map(str, inputs))})")


class DataDependentOp(SelectOp):
    """Its shape rule reads input dims (`Dim`s), so one rule serves static and dynamic inputs."""

    def compute_dynamic_shape(self, inputs):
        return self.compute_shape(inputs)


def _count(dims: Sequence[Dim]) -> int | None:
    """The largest element count of a tensor with these dims (None if unbounded)."""
    maxes = [d.max for d in dims]
    return None if None in maxes else math.prod(maxes)  # type: ignore[arg-type]


def _upto(n: int | None) -> Dim:
    return Dim(0, n)


def _first(a: np.ndarray, default):
    """The value of a one-element tensor input; an empty one counts as absent (as in ONNX)."""
    flat = np.asarray(a).reshape(-1)
    return flat[0] if flat.size else default


@register_op
class TopK(SelectOp):
    """The k largest (or smallest) values along `axis` and their int64 indices, sorted; equal values
    keep their input order (the lower index first). k None: the second input holds k (at run time)."""

    name = "top_k"
    k: int | None = 1
    axis: int = -1  # normalized by the frontend: in [0, rank)
    largest: bool = True

    def compute_shape(self, inputs):
        x = inputs[0]
        n = x.dims[self.axis] if 0 <= self.axis < x.ndim else None
        if n is None or len(inputs) != 1 + (self.k is None) or (self.k is not None and not 0 <= self.k <= n.min):
            raise self._fail(f"k={self.k} on axis {self.axis}", inputs)
        extent = Dim(0, n.max) if self.k is None else Dim.fixed(self.k)
        dims = x.dims[:self.axis] + (extent,) + x.dims[self.axis + 1:]
        return TupleShape((Shape.dynamic(x.dtype, dims), Shape.dynamic(DType.int64, dims)))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        x = args[0]
        k = self.k if self.k is not None else int(np.asarray(args[1]).reshape(-1)[0])
        n = x.shape[self.axis]
        if not 0 <= k <= n:
            raise ValueError(f"k={k} is out of range for {n} elements")
        if self.largest:
            # descending with ties by lower index == a stable ascending sort of the reversed axis, reversed
            order = np.argsort(np.flip(x, self.axis), axis=self.axis, kind="stable")
            order = (n - 1) - np.flip(order, self.axis)
        else:
            order = np.argsort(x, axis=self.axis, kind="stable")
        idx = np.take(order, np.arange(k), axis=self.axis)
        return np.take_along_axis(x, idx, axis=self.axis), idx.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class CumulativeOp(SelectOp):
    """A running `ufunc` along `axis`; `exclusive` leaves out the current element (the first result is
    the ufunc's identity), `reverse` runs backwards. axis None: the second input holds it (read at run
    time; negative counts from the end)."""

    ufunc: ClassVar[np.ufunc]
    axis: int | None = 0
    exclusive: bool = False
    reverse: bool = False

    def compute_shape(self, inputs):
        x = inputs[0]
        if len(inputs) != 1 + (self.axis is None) or (self.axis is not None and not 0 <= self.axis < x.ndim):
            raise self._fail(f"axis {self.axis} out of range", inputs)
        return Shape.of(x.dtype, x.lens)

    def compute_dynamic_shape(self, inputs):
        self.compute_shape([Shape.of(inputs[0].dtype, inputs[0].min_lens)] + list(inputs[1:]))
        return inputs[0]

    def compute(self, args):
        x = np.asarray(args[0])
        a = self.axis if self.axis is not None else int(np.asarray(args[1]).reshape(-1)[0])
        if not -x.ndim <= a < x.ndim:
            raise ValueError(f"axis {a} is out of range for rank {x.ndim}")
        a %= x.ndim
        if self.reverse:
            x = np.flip(x, a)
        out = self.ufunc.accumulate(x, axis=a, dtype=x.dtype)  # dtype: numpy would widen small ints
        if self.exclusive:  # shift by one: the identity first, the last result dropped
            first = np.full_like(np.take(out, [0], axis=a), self.ufunc.identity)
            out = np.concatenate([first, np.take(out, np.arange(x.shape[a] - 1), axis=a)], axis=a)
        return np.flip(out, a) if self.reverse else out


@register_op
class CumSum(CumulativeOp):
    name = "cumsum"
    ufunc = np.add


@register_op
class CumProd(CumulativeOp):
    name = "cumprod"
    ufunc = np.multiply


@register_op
class NonZero(DataDependentOp):
    """The int64 coordinates of the nonzero elements, one row per axis: [rank, count]."""

    name = "nonzero"

    def compute_shape(self, inputs):
        (x,) = inputs
        return Shape.dynamic(DType.int64, [Dim.fixed(x.ndim), _upto(_count(x.dims))])

    def compute(self, args):
        (x,) = args
        if x.ndim == 0:
            return np.zeros((0, int(np.count_nonzero(x))), np.int64)
        return np.stack(np.nonzero(x)).astype(np.int64).reshape(x.ndim, -1)


@register_op
class Compress(DataDependentOp):
    """numpy.compress: the slices along `axis` where the bool condition holds (axis None: flattened)."""

    name = "compress"
    axis: int | None = None

    def compute_shape(self, inputs):
        x, cond = inputs
        if cond.dtype != DType.bool or cond.ndim != 1:
            raise self._fail("condition must be a 1-D bool tensor", inputs)
        if self.axis is None:
            return Shape.dynamic(x.dtype, [_upto(_count(x.dims))])
        if not 0 <= self.axis < x.ndim:
            raise self._fail(f"axis {self.axis} out of range", inputs)
        dims = list(x.dims)
        dims[self.axis] = _upto(dims[self.axis].max)
        return Shape.dynamic(x.dtype, dims)

    def compute(self, args):
        x, cond = args
        return np.compress(cond, x, axis=self.axis)


@register_op
class Unique(DataDependentOp):
    """(unique values or slices along `axis`, first-occurrence indices, inverse indices, counts),
    sorted ascending or in order of first occurrence. Index outputs are int64."""

    name = "unique"
    axis: int | None = None
    sorted: bool = True

    def compute_shape(self, inputs):
        (x,) = inputs
        if self.axis is None:
            n_in = _count(x.dims)
            y = Shape.dynamic(x.dtype, [_upto(n_in)])
            inverse = [Dim(math.prod(d.min for d in x.dims), n_in)]
        else:
            if not 0 <= self.axis < x.ndim:
                raise self._fail(f"axis {self.axis} out of range", inputs)
            n_in = x.dims[self.axis].max
            y = Shape.dynamic(x.dtype, x.dims[:self.axis] + (_upto(n_in),) + x.dims[self.axis + 1:])
            inverse = [x.dims[self.axis]]
        n = Shape.dynamic(DType.int64, [_upto(n_in)])
        return TupleShape((y, n, Shape.dynamic(DType.int64, inverse), n))

    def compute(self, args):
        (x,) = args
        data = x.reshape(-1) if self.axis is None else x
        _, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True,
                                              return_counts=True, axis=self.axis)
        inverse = inverse.reshape(-1)
        if not self.sorted:
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            first, counts, inverse = first[order], counts[order], rank[inverse]
        y = np.take(data, first, axis=0 if self.axis is None else self.axis)  # in the order of `first`
        return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


@register_op
class NonMaxSuppression(DataDependentOp):
    """Greedy per-(batch, class) NMS. Inputs: boxes [B, N, 4], scores [B, C, N], max boxes per class
    (int64, 1 element), IoU threshold (1 element) and an optional score threshold (1 element).
    Output: the selected [batch, class, box] triples (int64), per class in descending score order.

    Boxes are [y1, x1, y2, x2] corners (either corner order) or, with center_point_box, [x, y, w, h].
    A box is dropped if its score is not above the score threshold, or if its IoU with a box already
    selected is above the IoU threshold; among equal scores the lower box index goes first."""

    name = "non_max_suppression"
    center_point_box: bool = False

    def compute_shape(self, inputs):
        boxes, scores = inputs[:2]
        if (len(inputs) not in (4, 5) or boxes.ndim != 3 or scores.ndim != 3 or boxes.dims[2] != Dim.fixed(4)
                or inputs[2].dtype != DType.int64):
            raise self._fail("expects boxes [B,N,4], scores [B,C,N], max_output (int64), iou[, score]", inputs)
        bound = _count([boxes.dims[0], scores.dims[1], boxes.dims[1]])
        return Shape.dynamic(DType.int64, [_upto(bound), Dim.fixed(3)])

    def compute(self, args):
        boxes, scores = args[:2]
        limit = max(int(_first(args[2], 0)), 0)
        iou_thr = np.asarray(_first(args[3], 0), boxes.dtype)
        score_thr = _first(args[4], None) if len(args) > 4 else None
        selected = []
        for b in range(boxes.shape[0] if limit else 0):
            coords = self._coords(boxes[b])
            # the candidates, (class, box) pairs above the score threshold, class by class, each
            # class's by descending score, ties by lower box index
            flat = np.arange(scores[b].size) if score_thr is None else np.flatnonzero(scores[b] > score_thr)
            cls, box = np.divmod(flat, scores.shape[2])  # (np.nonzero of the 2-d mask: 4x slower)
            neg = -scores[b][cls, box]
            if len(box) <= _SORT_AT_ONCE:
                box = box[np.lexsort((box, neg, cls))]  # (cls stays as it is: already in class order)
            else:  # many: numpy sorts the classes' short runs one by one faster than all at once
                bounds = np.searchsorted(cls, np.arange(scores.shape[1] + 1))
                box = np.concatenate([box[start:end][np.argsort(neg[start:end], kind="stable")]
                                      for start, end in zip(bounds[:-1], bounds[1:])])
            classes, picks = _greedy(cls, box, scores.shape[1], coords, limit, iou_thr)
            selected.append(np.stack([np.full(len(picks), b), classes, picks], 1))
        return np.concatenate(selected).astype(np.int64) if selected else np.zeros((0, 3), np.int64)

    def _coords(self, boxes: np.ndarray) -> Boxes:
        """The [N, 4] boxes ([y1, x1, y2, x2] corners, or [x, y, w, h]) as lower and upper corners
        along both axes and areas, each a contiguous [N] array (arithmetic on the [N, 2] column
        pairs iterates two elements at a time: 10x slower)."""
        a, b, c, d = np.ascontiguousarray(boxes.T)
        if self.center_point_box:
            half_c, half_d = c / 2, d / 2
            lo0, lo1, hi0, hi1 = a - half_c, b - half_d, a + half_c, b + half_d
        else:
            lo0, lo1, hi0, hi1 = np.minimum(a, c), np.minimum(b, d), np.maximum(a, c), np.maximum(b, d)
        return Boxes(lo0, lo1, hi0, hi1, (hi0 - lo0) * (hi1 - lo1))


_SORT_AT_ONCE = 4096  # candidates up to which one sort of all of them is the fastest
_BLOCK = 16  # candidates of a class whose IoUs with each other are computed at once


class Boxes(NamedTuple):
    """Boxes as parallel arrays of any one shape: lower and upper corners along both axes, areas."""

    lo0: np.ndarray
    lo1: np.ndarray
    hi0: np.ndarray
    hi1: np.ndarray
    area: np.ndarray

    def at(self, index) -> Boxes:
        """The boxes at `index` (any numpy index) of every array."""
        return Boxes(*(a[index] for a in self))


def _greedy(cls: np.ndarray, box: np.ndarray, classes: int, coords: Boxes, limit: int,
            iou_thr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy selection in every class at once, over the candidates (class, box) sorted by class,
    each class's in selection order: a candidate is kept unless it overlaps a box its class kept
    before it, until the class has `limit` boxes. Candidates are looked at in blocks of _BLOCK a
    class: the IoUs of a block's candidates with the boxes kept before it and with each other are
    computed at once, then step k of the block keeps each class's k-th candidate unless it overlaps
    one kept before it, a few operations over booleans. The work is candidates looked at x (boxes
    kept + the block), as in ONNX Runtime, and never the IoU of every pair of boxes (YOLOv8n: 80
    classes of 8400 boxes; that [N, N] matrix took 3 s). Returns the (class, box) of every kept box,
    by class, each class's in selection order."""
    lengths = np.bincount(cls, minlength=classes)
    width = int(lengths.max(initial=0))
    cap = min(limit, width)
    index = np.zeros((classes, width), np.int64)
    index[cls, np.arange(len(cls)) - (np.cumsum(lengths) - lengths)[cls]] = box
    kept = np.zeros((classes, cap), np.int64)
    kept_boxes = Boxes(*(np.zeros((classes, cap), a.dtype) for a in coords))
    count = np.zeros(classes, np.int64)
    for start in range(0, width if cap else 0, _BLOCK):
        rows = np.flatnonzero((lengths > start) & (count < cap))
        if not len(rows):
            break
        block = index[rows, start:start + _BLOCK]
        looked = coords.at(block)  # [rows, block]
        free = np.arange(start, start + block.shape[1]) < lengths[rows, None]
        before = count[rows]
        cols = int(before.max())
        if cols:  # not overlapping a box kept in an earlier block
            hits = _overlaps(looked.at(np.s_[:, :, None]), kept_boxes.at(np.s_[rows, None, :cols]), iou_thr)
            free &= ~(hits & (np.arange(cols) < before[:, None, None])).any(2)
        within = _overlaps(looked.at(np.s_[:, :, None]), looked.at(np.s_[:, None]), iou_thr)
        keep = np.zeros(block.shape, bool)
        total = before.copy()
        for k in range(block.shape[1]):
            keep[:, k] = free[:, k] & (total < cap) & ~(within[:, k, :k] & keep[:, :k]).any(1)
            total += keep[:, k]
        r, k = np.nonzero(keep)  # by row, each row's in block order
        dest, at, new = rows[r], before[r] + np.cumsum(keep, 1)[r, k] - 1, block[r, k]
        kept[dest, at] = new
        for dst, src in zip(kept_boxes, coords):
            dst[dest, at] = src[new]
        count[rows] = total
    return np.repeat(np.arange(classes), count), kept[np.arange(cap) < count[:, None]]


def _overlaps(a: Boxes, b: Boxes, iou_thr: np.ndarray) -> np.ndarray:
    """Whether the IoU of boxes a and b (broadcasting) is above `iou_thr`, as ONNX Runtime decides
    it: never where a box or the intersection is empty; computed in the boxes' dtype so threshold
    comparisons round as the reference does."""
    sides0 = np.minimum(a.hi0, b.hi0) - np.maximum(a.lo0, b.lo0)
    sides1 = np.minimum(a.hi1, b.hi1) - np.maximum(a.lo1, b.lo1)
    inter = np.maximum(sides0, 0, out=sides0) * np.maximum(sides1, 0, out=sides1)
    union = a.area + b.area - inter
    valid = (inter > 0) & (a.area > 0) & (b.area > 0) & (union > 0)
    return np.divide(inter, union, out=np.zeros_like(inter), where=valid) > iou_thr

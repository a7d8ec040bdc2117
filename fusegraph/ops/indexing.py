"""Indexing ops: gathers and scatters in their ONNX flavours, one-hot, sequence reversal, cache writes.

Index tensors are run-time inputs. Negative indices count from the end of their axis and are wrapped
here (the frontend can only do it for constants); an index outside [-n, n) is an ExecutionError naming
the op and the input (numpy would wrap -n-1 to the last position, or raise a bare IndexError).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ExecutionError, ShapeError
from ..ir.dtypes import DType
from ..ir.limits import check_tensor
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape

INDEX_TYPES = (DType.int32, DType.int64)

# ScatterND / ScatterElements reductions -> the numpy ufunc whose `.at` applies them (duplicates included)
_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


class IndexingOp(Op):
    kind = OpKind.OPAQUE

    def _fail(self, msg: str, inputs: Sequence[Shape]) -> ShapeError:
        return ShapeError(f"{self.name}: {msg} (inputs {', '.join(map(str, inputs))})")

    def _check_axis(self, axis: int, rank: int, inputs: Sequence[Shape]) -> None:
        if not 0 <= axis < rank:
            raise self._fail(f"axis {axis} out of range for rank {rank}", inputs)

    def _check_indices(self, idx: Shape, inputs: Sequence[Shape]) -> None:
        if idx.dtype not in INDEX_TYPES:
            raise self._fail(f"indices must be int32 or int64, got {idx.dtype}", inputs)


def wrap(indices: np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Indices as int64 with negative ones counted from the end (`n` broadcasts against them)."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    return np.where(idx < 0, idx + n, idx)


def check_range(op: Op, indices: np.ndarray, n: int | Sequence[int], what: str = "indices",
                low: int | None = None) -> None:
    """ExecutionError naming `op` and its input `what` unless every index is in [low, n), low being
    -n by default (ONNX's negative indices). `n` is one extent, or one per position of the last axis
    (GatherND's tuples). One vectorized min and max."""
    idx = np.asarray(indices)
    if idx.size == 0:
        return
    per_axis = np.ndim(n) > 0
    axes = tuple(range(idx.ndim - 1)) if per_axis else None
    ext = np.asarray(n, np.int64)
    floor = -ext if low is None else np.full_like(ext, low)
    mins, maxs = idx.min(axis=axes), idx.max(axis=axes)
    bad = np.reshape((mins < floor) | (maxs >= ext), -1)
    if not bad.any():
        return
    k = int(np.argmax(bad))
    e, lo, mn, mx = (int(np.reshape(a, -1)[k]) for a in (ext, floor, mins, maxs))
    where = f" at position {k} of its last axis" if per_axis else ""
    raise ExecutionError(f"{op}: input {what!r} holds {mn if mn < lo else mx}{where}, outside [{lo}, {e - 1}] "
                         f"for an axis of length {e}")


def checked(op: Op, indices: np.ndarray, n: int | Sequence[int]) -> np.ndarray:
    """`wrap(indices, n)` once `check_range` has passed them."""
    check_range(op, indices, n)
    return wrap(indices, np.asarray(n) if np.ndim(n) else n)


def _element_index(idx: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """The full index tuple of GatherElements/ScatterElements: position i of `idx` addresses
    (i_0, ..., idx[i], ..., i_r) -- open grids broadcast against `idx` on every other axis."""
    grids = list(np.ix_(*[np.arange(n) for n in idx.shape]))
    grids[axis] = idx
    return tuple(grids)


def _scatter(out: np.ndarray, where: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        out[where] = updates  # duplicate indices: the last update wins (ONNX leaves it undefined)
    else:
        _REDUCTIONS[reduction].at(out, where, updates)


@register_op
class Gather(IndexingOp):
    """numpy.take(data, indices, axis): out[a, i, b] = data[a, indices[i], b]."""

    name = "gather"
    axis: int = 0

    def compute_shape(self, inputs):
        data, idx = inputs
        self._check_axis(self.axis, data.ndim, inputs)
        self._check_indices(idx, inputs)
        return Shape.of(data.dtype, data.lens[:self.axis] + idx.lens + data.lens[self.axis + 1:])

    def compute(self, args):
        data, idx = args
        return np.take(data, checked(self, idx, data.shape[self.axis]), axis=self.axis)


@register_op
class GatherElements(IndexingOp):
    """out[i][j][k] = data[indices[i][j][k]][j][k] for axis 0 (numpy.take_along_axis, no broadcasting)."""

    name = "gather_elements"
    axis: int = 0

    def compute_shape(self, inputs):
        data, idx = inputs
        self._check_axis(self.axis, data.ndim, inputs)
        self._check_indices(idx, inputs)
        if idx.ndim != data.ndim:
            raise self._fail("indices and data must have the same rank", inputs)
        return Shape.of(data.dtype, idx.lens)

    def compute(self, args):
        data, idx = args
        return data[_element_index(checked(self, idx, data.shape[self.axis]), self.axis)]


@register_op
class GatherND(IndexingOp):
    """Gather slices addressed by the last axis of `indices` (length m), after `batch_dims` shared axes:
    out[b, i] = data[b, indices[b, i, 0], ..., indices[b, i, m-1], ...]."""

    name = "gather_nd"
    batch_dims: int = 0

    def compute_shape(self, inputs):
        data, idx = inputs
        b = self.batch_dims
        self._check_indices(idx, inputs)
        if idx.ndim < 1 or not 0 <= b < min(data.ndim, idx.ndim):
            raise self._fail(f"batch_dims {b} out of range", inputs)
        m = idx.lens[-1]
        if data.lens[:b] != idx.lens[:b] or not 1 <= m <= data.ndim - b:
            raise self._fail(f"indices address {m} axes after {b} batch axes", inputs)
        return Shape.of(data.dtype, idx.lens[:-1] + data.lens[b + m:])

    def compute(self, args):
        data, idx = args
        b, m = self.batch_dims, idx.shape[-1]
        n_batch = int(np.prod(data.shape[:b], dtype=np.int64))
        flat_data = data.reshape((n_batch,) + data.shape[b:])
        flat_idx = checked(self, idx.reshape(n_batch, -1, m), data.shape[b:b + m])
        picked = flat_data[(np.arange(n_batch)[:, None],) + tuple(np.moveaxis(flat_idx, -1, 0))]
        return picked.reshape(idx.shape[:-1] + data.shape[b + m:])


@register_op
class ScatterElements(IndexingOp):
    """A copy of data with updates written (or reduced) at the GatherElements positions of indices."""

    name = "scatter_elements"
    axis: int = 0
    reduction: str = "none"  # none | add | mul | max | min

    def compute_shape(self, inputs):
        data, idx, upd = inputs
        self._check_axis(self.axis, data.ndim, inputs)
        self._check_indices(idx, inputs)
        if self.reduction != "none" and self.reduction not in _REDUCTIONS:
            raise self._fail(f"unknown reduction {self.reduction!r}", inputs)
        if idx.lens != upd.lens or idx.ndim != data.ndim or upd.dtype != data.dtype:
            raise self._fail("indices and updates must match, with the rank of data", inputs)
        return Shape.of(data.dtype, data.lens)

    def compute(self, args):
        data, idx, upd = args
        out = np.array(data, copy=True)
        _scatter(out, _element_index(checked(self, idx, data.shape[self.axis]), self.axis), upd, self.reduction)
        return out


@register_op
class ScatterND(IndexingOp):
    """A copy of data with updates written (or reduced) at the slices GatherND would read."""

    name = "scatter_nd"
    reduction: str = "none"  # none | add | mul | max | min

    def compute_shape(self, inputs):
        data, idx, upd = inputs
        self._check_indices(idx, inputs)
        if self.reduction != "none" and self.reduction not in _REDUCTIONS:
            raise self._fail(f"unknown reduction {self.reduction!r}", inputs)
        m = idx.lens[-1] if idx.ndim else 0
        if not 1 <= m <= data.ndim or upd.lens != idx.lens[:-1] + data.lens[m:] or upd.dtype != data.dtype:
            raise self._fail("updates must have shape indices.shape[:-1] + data.shape[m:]", inputs)
        return Shape.of(data.dtype, data.lens)

    def compute(self, args):
        data, idx, upd = args
        m = idx.shape[-1]
        flat_idx = checked(self, idx.reshape(-1, m), data.shape[:m])
        out = np.array(data, copy=True)
        _scatter(out, tuple(flat_idx.T), upd.reshape((-1,) + data.shape[m:]), self.reduction)
        return out


@register_op
class OneHot(IndexingOp):
    """values[1] where an axis-`axis` position equals the index (negatives wrapped), values[0] elsewhere;
    indices outside [-depth, depth) give an all-off row. Inputs: indices[, depth], values -- depth
    None means the middle input holds it (the new axis's extent is then known at run time)."""

    name = "one_hot"
    depth: int | None = 1
    axis: int = 0  # where the new axis goes in the output, in [0, rank(indices)]

    def compute_shape(self, inputs):
        idx, values = inputs[0], inputs[-1]
        if (len(inputs) != 2 + (self.depth is None) or not 0 <= self.axis <= idx.ndim
                or (self.depth is not None and self.depth < 0) or values.dims != (Dim.fixed(2),)):
            raise self._fail(f"axis {self.axis}, depth {self.depth}: values must be [off, on]", inputs)
        extent = Dim(0, None) if self.depth is None else Dim.fixed(self.depth)
        return Shape.dynamic(values.dtype, idx.dims[:self.axis] + (extent,) + idx.dims[self.axis:])

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        idx, values = args[0], args[-1]
        depth = self.depth if self.depth is not None else int(np.asarray(args[1]).reshape(-1)[0])
        lens = [*np.shape(idx)[:self.axis], max(depth, 0), *np.shape(idx)[self.axis:]]
        check_tensor(lens, DType.from_numpy(np.asarray(values).dtype), self.name)
        off, on = np.asarray(values).reshape(2)
        # float indices are truncated toward zero (the int64 cast), as ONNX Runtime does
        hot = np.expand_dims(wrap(idx, depth), self.axis)
        positions = np.arange(depth).reshape((-1,) + (1,) * (idx.ndim - self.axis))
        return np.where(positions == hot, on, off).astype(values.dtype, copy=False)


@register_op
class ReverseSequence(IndexingOp):
    """Reverse the first sequence_lens[b] steps along time_axis of every batch_axis slice b."""

    name = "reverse_sequence"
    batch_axis: int = 1
    time_axis: int = 0

    def compute_shape(self, inputs):
        x, lens = inputs
        self._check_axis(self.batch_axis, x.ndim, inputs)
        self._check_axis(self.time_axis, x.ndim, inputs)
        if self.batch_axis == self.time_axis or lens.lens != (x.lens[self.batch_axis],):
            raise self._fail("sequence_lens must be [batch] with distinct batch and time axes", inputs)
        return Shape.of(x.dtype, x.lens)

    def compute(self, args):
        x, seq_lens = args
        shape = [1] * x.ndim
        shape[self.time_axis] = x.shape[self.time_axis]
        t = np.arange(x.shape[self.time_axis]).reshape(shape)
        shape = [1] * x.ndim
        shape[self.batch_axis] = -1
        n = np.asarray(seq_lens, np.int64).reshape(shape)
        src = np.broadcast_to(np.where(t < n, n - 1 - t, t), x.shape)
        return np.take_along_axis(x, src, axis=self.time_axis)


@register_op
class TensorScatter(IndexingOp):
    """KV-cache write: a copy of `cache` with `update` written along `axis` from write_indices[batch]
    (wrapping modulo the cache length when circular)."""

    name = "tensor_scatter"
    axis: int = 1
    circular: bool = False

    def compute_shape(self, inputs):
        cache, upd, at = inputs
        self._check_axis(self.axis, cache.ndim, inputs)
        same = all(a == b for k, (a, b) in enumerate(zip(cache.lens, upd.lens)) if k != self.axis)
        if (self.axis == 0 or upd.ndim != cache.ndim or not same or upd.lens[self.axis] > cache.lens[self.axis]
                or at.lens != (cache.lens[0],) or upd.dtype != cache.dtype):
            raise self._fail(f"update must match the cache except on axis {self.axis}", inputs)
        return Shape.of(cache.dtype, cache.lens)

    def compute(self, args):
        cache, upd, at = args
        shape = [1] * cache.ndim
        shape[0] = -1
        pos = np.asarray(at, np.int64).reshape(shape) + np.arange(upd.shape[self.axis]).reshape(
            [-1 if k == self.axis else 1 for k in range(cache.ndim)])
        if self.circular:
            pos = pos % cache.shape[self.axis]
        else:  # every written position inside the cache: no wrapping of negative ones
            check_range(self, pos, cache.shape[self.axis], "write_indices", low=0)
        out = np.array(cache, copy=True)
        np.put_along_axis(out, np.broadcast_to(pos, upd.shape), upd, axis=self.axis)
        return out

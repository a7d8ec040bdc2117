"""`migraphx.argument`: a tensor value, over a numpy array, and the functions that make one.

`argument(buffer)` wraps any buffer (numpy arrays included) without copying where numpy can view
it; `np.array(arg)` / `np.asarray(arg)` read it back (through `__array__`: Python 3.11 has no
buffer protocol for classes, so `memoryview(arg)` is not available). `generate_argument` makes
seeded random data: its values are fusegraph's own, not MIGraphX's (floats uniform in [-1, 1),
integers in [0, 32), booleans either value).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, NotSupportedError, ShapeError
from ..ir.dtypes import DType
from ..ir.shape import Shape
from .shape import shape

# integer data from generate_argument stays small: valid token ids, indices and counts for most models
_INT_RANGE = 32


def _as_array(data: Any) -> np.ndarray:
    if isinstance(data, argument):
        return data._a
    try:
        a = np.asarray(data)
    except (TypeError, ValueError) as e:
        raise ArgumentError(f"argument: cannot read {type(data).__name__} as a tensor: {e}") from None
    try:
        DType.from_numpy(a.dtype)
    except TypeError as e:
        raise ArgumentError(f"argument: {a.dtype} data has no fusegraph type ({e})") from None
    if any(st < 0 for st in a.strides):  # a MIGraphX shape has non-negative strides
        a = np.ascontiguousarray(a)
    return a


class argument:  # noqa: N801  (MIGraphX's name)
    """A tensor value: `argument(numpy_array)`; `np.array(arg)` reads it."""

    def __init__(self, data: Any):
        self._a = _as_array(data)

    def get_shape(self) -> shape:
        a = self._a
        dt = DType.from_numpy(a.dtype)
        strides = [st // a.itemsize for st in a.strides] if a.itemsize else None
        return shape.wrap(Shape.of(dt, a.shape, strides))

    def tolist(self) -> list:
        """The elements in row-major order, flat (as MIGraphX's tolist gives them)."""
        return self._a.reshape(-1).tolist()

    def data_ptr(self) -> int:
        return int(self._a.ctypes.data)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self._a if dtype is None else self._a.astype(dtype, copy=False)
        return a.copy() if copy else a

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, argument):
            return NotImplemented
        a, b = self._a, other._a
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    @staticmethod
    def save(arg: argument, filename: str) -> None:
        raise NotSupportedError("migraphx.argument.save (msgpack argument files) is not supported by "
                                "fusegraph.migraphx; nearest: numpy.save(filename, numpy.array(arg))")

    @staticmethod
    def load(filename: str) -> argument:
        raise NotSupportedError("migraphx.argument.load (msgpack argument files) is not supported by "
                                "fusegraph.migraphx; nearest: migraphx.argument(numpy.load(filename))")

    def __repr__(self) -> str:
        return ", ".join(str(x) for x in self._a.reshape(-1).tolist())


def _lens(s: shape) -> tuple[tuple[int, ...], DType]:
    if not isinstance(s, shape):
        raise ArgumentError(f"expected a migraphx.shape, got {type(s).__name__}")
    fg = s.fusegraph_shape
    if fg.is_dynamic:
        raise ShapeError(f"cannot make an argument of dynamic shape {s!r}: give a static shape")
    return fg.lens, fg.dtype


def generate_argument(s: shape, seed: int = 0) -> argument:
    """Seeded random data of shape `s` (values described in the module docstring)."""
    lens, dt = _lens(s)
    rng = np.random.default_rng(seed)
    if dt == DType.bool:
        data = rng.integers(0, 2, size=lens).astype(np.bool_)
    elif dt.is_int:
        data = rng.integers(0, _INT_RANGE, size=lens).astype(dt.np)
    else:
        data = rng.uniform(-1.0, 1.0, size=lens).astype(np.float32).astype(dt.np)
    return argument(data)


def fill_argument(s: shape, value: Any) -> argument:
    lens, dt = _lens(s)
    return argument(np.full(lens, value, dtype=dt.np))


def create_argument(s: shape, values: Sequence[Any]) -> argument:
    lens, dt = _lens(s)
    data = np.asarray(values, dtype=dt.np).reshape(-1)
    if data.size != int(np.prod(lens)):
        raise ArgumentError(f"create_argument: {data.size} values for shape {s!r} of {int(np.prod(lens))} elements")
    return argument(data.reshape(lens))

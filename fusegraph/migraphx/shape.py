"""`migraphx.shape` and `migraphx.shape.dynamic_dimension` over fusegraph's `Shape` and `Dim`.

MIGraphX names element types `float_type`, `half_type`, ... (an enum, `shape.type_t`); the table
below is the one place they meet fusegraph's DType. A scalar (a 0-d tensor) reads as MIGraphX shows
it: lens [1], strides [0]. The fusegraph shape is kept inside, so nothing is lost going back.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ArgumentError, NotSupportedError, ShapeError
from ..ir.dtypes import DType
from ..ir.shape import Dim, Shape

# MIGraphX reports an unbounded dynamic dim as the largest size_t
SIZE_MAX = 2**64 - 1


class type_t(enum.IntEnum):  # noqa: N801  (MIGraphX's name)
    """MIGraphX's element types, in its order (MIGRAPHX_SHAPE_VISIT_TYPES, then tuple_type)."""

    bool_type = 0
    half_type = 1
    float_type = 2
    double_type = 3
    uint8_type = 4
    int8_type = 5
    uint16_type = 6
    int16_type = 7
    int32_type = 8
    int64_type = 9
    uint32_type = 10
    uint64_type = 11
    fp8e4m3fnuz_type = 12
    fp8e4m3fn_type = 13
    fp8e5m2_type = 14
    bf16_type = 15
    fp8e5m2fnuz_type = 16
    tuple_type = 17

    def __str__(self) -> str:  # as pybind11 prints MIGraphX's enum
        return f"type_t.{self.name}"

    __repr__ = __str__


_TO_DTYPE = {
    type_t.bool_type: DType.bool, type_t.half_type: DType.float16, type_t.float_type: DType.float32,
    type_t.double_type: DType.float64, type_t.uint8_type: DType.uint8, type_t.int8_type: DType.int8,
    type_t.uint16_type: DType.uint16, type_t.int16_type: DType.int16, type_t.int32_type: DType.int32,
    type_t.int64_type: DType.int64, type_t.uint32_type: DType.uint32, type_t.uint64_type: DType.uint64,
    type_t.fp8e4m3fnuz_type: DType.float8_e4m3fnuz, type_t.fp8e4m3fn_type: DType.float8_e4m3fn,
    type_t.fp8e5m2_type: DType.float8_e5m2, type_t.bf16_type: DType.bfloat16,
    type_t.fp8e5m2fnuz_type: DType.float8_e5m2fnuz,
}  # fmt: skip
_FROM_DTYPE = {v: k for k, v in _TO_DTYPE.items()}


def to_dtype(t: Any) -> DType:
    """A MIGraphX type (`type_t`, its int, "float_type" or "float") as a fusegraph DType."""
    if isinstance(t, DType):
        return t
    if isinstance(t, str):
        name = t if t.endswith("_type") else f"{t}_type"
        if name not in type_t.__members__:
            raise ArgumentError(f"unknown MIGraphX type {t!r}; types are {sorted(type_t.__members__)}")
        t = type_t[name]
    try:
        t = type_t(t)
    except ValueError:
        raise ArgumentError(f"unknown MIGraphX type {t!r}") from None
    if t not in _TO_DTYPE:
        raise NotSupportedError(f"MIGraphX {t.name} has no fusegraph tensor type (tuples are multi-output "
                                "instructions' shapes, not tensors)")
    return _TO_DTYPE[t]


def from_dtype(dt: DType) -> type_t:
    try:
        return _FROM_DTYPE[dt]
    except KeyError:
        raise NotSupportedError(f"fusegraph type {dt} has no MIGraphX shape type") from None


class dynamic_dimension:  # noqa: N801
    """A dimension range [min, max] with optional optimal sizes (fusegraph's `Dim`)."""

    def __init__(self, min: int = 0, max: int = 0, optimals: Iterable[int] = ()):  # noqa: A002
        self.min, self.max, self.optimals = int(min), int(max), set(int(o) for o in optimals)
        if self.max < self.min:
            raise ArgumentError(f"dynamic_dimension max {self.max} < min {self.min}")

    def is_fixed(self) -> bool:
        return self.min == self.max

    def to_dim(self) -> Dim:
        return Dim(self.min, None if self.max >= SIZE_MAX else self.max, tuple(sorted(self.optimals)))

    @staticmethod
    def from_dim(d: Dim) -> dynamic_dimension:
        return dynamic_dimension(d.min, SIZE_MAX if d.max is None else d.max, d.optimals)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, dynamic_dimension) and (self.min, self.max, self.optimals) == (
            other.min, other.max, other.optimals)

    def __repr__(self) -> str:
        opt = f", {{{', '.join(map(str, sorted(self.optimals)))}}}" if self.optimals else ""
        return f"[{self.min}, {self.max}{opt}]"


def as_dim(d: Any) -> Dim:
    """A dimension given as a dynamic_dimension, an int, or a (min, max[, optimals]) sequence."""
    if isinstance(d, dynamic_dimension):
        return d.to_dim()
    if isinstance(d, Dim):
        return d
    if isinstance(d, int):
        return Dim.fixed(d)
    if isinstance(d, Sequence) and len(d) in (2, 3):
        return dynamic_dimension(*d).to_dim()
    raise ArgumentError(f"not a dimension: {d!r} (use migraphx.shape.dynamic_dimension(min, max, optimals))")


class shape:  # noqa: N801
    """A tensor's type, lens and strides, or its dynamic dims: shape(type="float_type", lens=[...],
    strides=[...]) or shape(type=..., dyn_dims=[dynamic_dimension, ...])."""

    type_t = type_t
    dynamic_dimension = dynamic_dimension

    def __init__(self, type: Any = "float", lens: Sequence[int] = (1,), strides: Sequence[int] | None = None,  # noqa: A002
                 dyn_dims: Sequence[Any] | None = None):
        dt = to_dtype(type)
        if dyn_dims is not None:
            self._s = Shape.dynamic(dt, [as_dim(d) for d in dyn_dims])
        else:
            if strides is not None and len(strides) != len(lens):
                raise ShapeError(f"shape lens {list(lens)} and strides {list(strides)} differ in rank")
            self._s = Shape.of(dt, lens, strides)

    @classmethod
    def wrap(cls, s: Any) -> shape:
        """The MIGraphX view of a fusegraph shape."""
        if getattr(s, "is_tuple", False) or not isinstance(s, Shape):
            raise NotSupportedError(f"fusegraph shape {s} (a tuple, sequence or optional) has no MIGraphX shape")
        out = cls.__new__(cls)
        out._s = s
        return out

    @property
    def fusegraph_shape(self) -> Shape:
        return self._s

    # -- type -------------------------------------------------------------------------------------
    def type(self) -> type_t:
        return from_dtype(self._s.dtype)

    def type_string(self) -> str:
        return self.type().name

    def type_size(self) -> int:
        return self._s.dtype.itemsize

    # -- sizes ------------------------------------------------------------------------------------
    def _static(self, what: str) -> Shape:
        if self._s.is_dynamic:
            raise ShapeError(f"{what}() of dynamic shape {self!r}: read dyn_dims(), min_lens() or max_lens()")
        return self._s

    def lens(self) -> list[int]:
        s = self._static("lens")
        return list(s.lens) if s.ndim else [1]

    def strides(self) -> list[int]:
        s = self._static("strides")
        return list(s.strides) if s.ndim else [0]

    def min_lens(self) -> list[int]:
        return list(self._s.min_lens)

    def max_lens(self) -> list[int]:
        return [SIZE_MAX if d.max is None else d.max for d in self._s.dims]

    def opt_lens(self) -> list[int]:
        return [min(d.optimals) if d.optimals else d.min for d in self._s.dims]

    def dyn_dims(self) -> list[dynamic_dimension]:
        return [dynamic_dimension.from_dim(d) for d in self._s.dims]

    def ndim(self) -> int:
        return max(self._s.ndim, 1)

    def elements(self) -> int:
        return self._static("elements").elements

    def bytes(self) -> int:
        return self.elements() * self.type_size()

    # -- layout -----------------------------------------------------------------------------------
    def dynamic(self) -> bool:
        return self._s.is_dynamic

    def scalar(self) -> bool:
        return all(st == 0 for st in self.strides())

    def broadcasted(self) -> bool:
        return any(st == 0 for st, n in zip(self.strides(), self.lens()) if n > 1)

    def transposed(self) -> bool:
        steps = [st for st, n in zip(self.strides(), self.lens()) if n > 1]
        return steps != sorted(steps, reverse=True)

    def packed(self) -> bool:
        lens, strides = self.lens(), self.strides()
        space = 1 + sum((n - 1) * st for n, st in zip(lens, strides)) if all(lens) else 0
        return not self.broadcasted() and space == self.elements()

    def standard(self) -> bool:
        return self._s.ndim > 0 and not self._s.is_dynamic and self._s.standard

    # -- comparison and text ----------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, shape) and self._s == other._s and (
            self._s.is_dynamic or self.strides() == other.strides())

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._s)

    def __repr__(self) -> str:
        if self._s.is_dynamic:
            return f"{self.type_string()}, {{{', '.join(map(repr, self.dyn_dims()))}}}"
        return (f"{self.type_string()}, {{{', '.join(map(str, self.lens()))}}}, "
                f"{{{', '.join(map(str, self.strides()))}}}")

    __str__ = __repr__

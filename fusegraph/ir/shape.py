"""Tensor shapes: a dtype, lens and strides, with optional dynamic dimensions.

A dimension is a `Dim` range [min, max] (max None = unbounded) with optional optimal values; a
static dimension has min == max. Static shapes (the common case) expose `lens` and `strides`;
dynamic shapes expose `dims` only. `TupleShape` is the shape of multi-output ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from ..errors import ShapeError
from .dtypes import DType


@dataclass(frozen=True)
class Dim:
    min: int
    max: int | None
    optimals: tuple[int, ...] = ()

    @staticmethod
    def fixed(n: int) -> Dim:
        return Dim(int(n), int(n))

    @property
    def is_fixed(self) -> bool:
        return self.min == self.max

    def contains(self, n: int) -> bool:
        return self.min <= n and (self.max is None or n <= self.max)

    def __str__(self) -> str:
        if self.is_fixed:
            return str(self.min)
        hi = "?" if self.max is None else str(self.max)
        opt = ":" + ",".join(map(str, self.optimals)) if self.optimals else ""
        return f"{{{self.min}..{hi}{opt}}}"


def standard_strides(lens: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(lens):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Shape:
    dtype: DType
    dims: tuple[Dim, ...]
    # Element strides; None means standard (row-major contiguous). Only static shapes carry strides.
    strides_: tuple[int, ...] | None = field(default=None, compare=False)

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def of(dtype: DType, lens: Sequence[int], strides: Sequence[int] | None = None) -> Shape:
        lens = tuple(int(n) for n in lens)
        if any(n < 0 for n in lens):
            raise ShapeError(f"negative dimension in {list(lens)}")
        st = tuple(int(s) for s in strides) if strides is not None else None
        if st is not None and (len(st) != len(lens) or st == standard_strides(lens)):
            st = None if st == standard_strides(lens) else st
        return Shape(dtype, tuple(Dim.fixed(n) for n in lens), st)

    @staticmethod
    def dynamic(dtype: DType, dims: Sequence[Dim | int]) -> Shape:
        return Shape(dtype, tuple(d if isinstance(d, Dim) else Dim.fixed(d) for d in dims))

    def with_dtype(self, dtype: DType) -> Shape:
        return Shape(dtype, self.dims, self.strides_)

    def with_lens(self, lens: Sequence[int]) -> Shape:
        return Shape.of(self.dtype, lens)

    # -- queries ------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def is_dynamic(self) -> bool:
        return not all(d.is_fixed for d in self.dims)

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def lens(self) -> tuple[int, ...]:
        if self.is_dynamic:
            raise ShapeError(f"shape {self} is dynamic: it has no fixed lens")
        return tuple(d.min for d in self.dims)

    @property
    def min_lens(self) -> tuple[int, ...]:
        return tuple(d.min for d in self.dims)

    @property
    def max_lens(self) -> tuple[int, ...]:
        if any(d.max is None for d in self.dims):
            raise ShapeError(f"shape {self} has an unbounded dimension")
        return tuple(d.max for d in self.dims)  # type: ignore[misc]

    @property
    def strides(self) -> tuple[int, ...]:
        return self.strides_ if self.strides_ is not None else standard_strides(self.lens)

    @property
    def standard(self) -> bool:
        return self.strides_ is None

    @property
    def broadcasted(self) -> bool:
        return self.strides_ is not None and 0 in self.strides_

    @property
    def elements(self) -> int:
        return math.prod(self.lens)

    @property
    def bytes(self) -> int:
        return self.elements * self.dtype.itemsize

    def matches(self, lens: Sequence[int]) -> bool:
        """Whether a concrete tensor of these lens fits this (possibly dynamic) shape."""
        return len(lens) == len(self.dims) and all(d.contains(n) for d, n in zip(self.dims, lens))

    def __str__(self) -> str:
        s = f"{self.dtype.value}[{','.join(str(d) for d in self.dims)}]"
        if self.strides_ is not None:
            s += "@[" + ",".join(map(str, self.strides_)) + "]"
        return s

    __repr__ = __str__


@dataclass(frozen=True)
class TupleShape:
    """The shape of an op with several outputs; `get_tuple_elem` picks one."""

    elements: tuple[Shape | TupleShape, ...]

    @property
    def is_tuple(self) -> bool:
        return True

    @property
    def is_dynamic(self) -> bool:
        return any(e.is_dynamic for e in self.elements)

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.elements) + ")"

    __repr__ = __str__


AnyShape = Shape | TupleShape

"""Tensor shapes: a dtype, lens and strides, with optional dynamic dimensions.

A dimension is a `Dim` range [min, max] (max None = unbounded) with optional optimal values; a
static dimension has min == max. Static shapes (the common case) expose `lens` and `strides`;
dynamic shapes expose `dims` only. `TupleShape` is the shape of multi-output ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import ShapeError
from .dtypes import DType
from .symbolic import Sym


@dataclass(frozen=True)
class Dim:
    min: int
    max: int | None
    optimals: tuple[int, ...] = ()
    # the dim's size in named input dims (ir/symbolic.py), when known; a fact about the value, not
    # part of the range: dims of one range compare equal whatever their symbols
    sym: Sym | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.sym, str):
            object.__setattr__(self, "sym", Sym.name(self.sym))
        if self.sym is not None and self.is_fixed:  # a fixed dim is its number
            object.__setattr__(self, "sym", None)

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
        sym = f"@{self.sym}" if self.sym is not None else ""
        return f"{{{self.min}..{hi}{opt}{sym}}}"


def same_steps(strides: Sequence[int], other: Sequence[int], lens: Sequence[int]) -> bool:
    """Whether two stride tuples address the same elements of a tensor of `lens`: the stride of a dim
    of size 1 (or 0) is never used (numpy gives such dims strides of its own after a reshape)."""
    return all(s == t for s, t, n in zip(strides, other, lens) if n > 1)


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

    def __post_init__(self) -> None:
        # lens are read everywhere (passes, lowering, loading): computed once, None when dynamic
        fixed = all(d.is_fixed for d in self.dims)
        object.__setattr__(self, "_lens", tuple(d.min for d in self.dims) if fixed else None)

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def of(dtype: DType, lens: Sequence[int], strides: Sequence[int] | None = None) -> Shape:
        lens = tuple(int(n) for n in lens)
        if any(n < 0 for n in lens):
            raise ShapeError(f"negative dimension in {list(lens)}")
        st = None
        if strides is not None:
            std = standard_strides(lens)
            # the stride of a size-1 dim is never used: normalize it so equal layouts compare equal
            st = tuple(int(s) if n != 1 else d for s, n, d in zip(strides, lens, std))
            if st == std:
                st = None
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
        return self._lens is None  # type: ignore[attr-defined]

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def lens(self) -> tuple[int, ...]:
        lens = self._lens  # type: ignore[attr-defined]
        if lens is None:
            raise ShapeError(f"shape {self} is dynamic: it has no fixed lens")
        return lens

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


# -- sequences and optionals ------------------------------------------------------------------------
@dataclass(frozen=True)
class SequenceShape:
    """The shape of an ONNX sequence (a list of tensors at run time).

    `elem` is a shape every element fits (its dims may be dynamic: elements may differ); None means
    the elements' rank is unknown. `length` is the number of elements."""

    dtype: DType
    elem: Shape | None = None
    length: Dim = Dim(0, None)

    def __post_init__(self) -> None:
        if self.elem is not None and self.elem.dtype != self.dtype:
            raise ShapeError(f"sequence of {self.dtype} with a {self.elem} element shape")

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def is_dynamic(self) -> bool:
        return not self.length.is_fixed or self.elem is None or self.elem.is_dynamic

    @property
    def known_empty(self) -> bool:
        return self.length.max == 0

    def __str__(self) -> str:
        elem = str(self.elem) if self.elem is not None else f"{self.dtype.value}[*]"
        length = "" if self.length == Dim(0, None) else f"[{self.length}]"
        return f"seq{length}<{elem}>"

    __repr__ = __str__


@dataclass(frozen=True)
class OptionalShape:
    """The shape of an ONNX optional: at run time None, or a value of shape `elem`."""

    elem: Shape | SequenceShape

    @property
    def dtype(self) -> DType:
        return self.elem.dtype

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def is_dynamic(self) -> bool:
        return self.elem.is_dynamic

    def __str__(self) -> str:
        return f"opt<{self.elem}>"

    __repr__ = __str__


ValueShape = Shape | SequenceShape | OptionalShape


def from_nothing(out: object, inputs: Sequence[object]) -> bool:
    """Whether a value of static shape `out` with elements is made out of an input of static shape
    with none (a reduction over an axis of length 0, a product over K = 0): a case the targets'
    kernels may not cover, which ONNX defines (a sum's 0, a max's lowest value)."""
    def count(s: object) -> int | None:
        return s.elements if isinstance(s, Shape) and not s.is_dynamic else None
    outs = out.elements if isinstance(out, TupleShape) else (out,)  # (an LSTM's Y_h beside its empty Y)
    return any((count(o) or 0) > 0 for o in outs) and any(count(x) == 0 for x in inputs)


# -- joining shapes (If branches, loop-carried values, sequence elements) ----------------------------
def _join_dim(a: Dim, b: Dim, widen: bool) -> Dim:
    if a.sym != b.sym:  # one of two values: no one symbol names it
        a, b = Dim(a.min, a.max, a.optimals), Dim(b.min, b.max, b.optimals)
    if dim_covers(a, b):
        return a
    if dim_covers(b, a):
        return b
    if widen:  # a value that changes between iterations: any size (0.. keeps the fixpoint short)
        return Dim(0, None)
    hi = None if a.max is None or b.max is None else max(a.max, b.max)
    return Dim(min(a.min, b.min), hi)


def dim_covers(a: Dim, b: Dim) -> bool:
    return a.min <= b.min and (a.max is None or (b.max is not None and b.max <= a.max))


def join_shapes(a: ValueShape, b: ValueShape, widen: bool = False) -> ValueShape:
    """The smallest shape that both `a` and `b` fit. Dims that differ become ranges (unbounded with
    `widen`, for values that may change on every loop iteration). Raises ShapeError when no shape
    can hold both (different dtypes, kinds or tensor ranks)."""
    if isinstance(a, OptionalShape) or isinstance(b, OptionalShape):
        ea = a.elem if isinstance(a, OptionalShape) else a
        eb = b.elem if isinstance(b, OptionalShape) else b
        return OptionalShape(join_shapes(ea, eb, widen))  # type: ignore[arg-type]
    if a.dtype != b.dtype:
        raise ShapeError(f"cannot join {a} and {b}: element types differ")
    if isinstance(a, SequenceShape) and isinstance(b, SequenceShape):
        return SequenceShape(a.dtype, _join_elems(a, b, widen), _join_dim(a.length, b.length, widen))
    if isinstance(a, Shape) and isinstance(b, Shape):
        if a.ndim != b.ndim:
            raise ShapeError(f"cannot join {a} and {b}: ranks differ")
        if a.dims == b.dims and all(x.sym == y.sym for x, y in zip(a.dims, b.dims)):
            return a if a.standard else Shape(a.dtype, a.dims)
        return Shape(a.dtype, tuple(_join_dim(x, y, widen) for x, y in zip(a.dims, b.dims, strict=True)))
    raise ShapeError(f"cannot join {a} and {b}: one is a sequence, the other a tensor")


def _join_elems(a: SequenceShape, b: SequenceShape, widen: bool) -> Shape | None:
    # An empty sequence has no elements to constrain the element shape; of two empty ones, an
    # element shape one of them knows is kept (so joining the result with either again changes nothing).
    if a.known_empty and b.known_empty and (a.elem is None or b.elem is None):
        return a.elem if b.elem is None else b.elem
    if a.known_empty:
        return b.elem
    if b.known_empty:
        return a.elem
    return join_elem(a.elem, b.elem, widen)


def join_elem(a: Shape | None, b: Shape | None, widen: bool = False) -> Shape | None:
    """Join two sequence element shapes; elements of different ranks leave the rank unknown (None)."""
    if a is None or b is None or a.ndim != b.ndim:
        return None
    return join_shapes(a, b, widen)  # type: ignore[return-value]


def shape_covers(a: ValueShape, b: ValueShape) -> bool:
    """Whether every value of shape `b` is also a value of shape `a`."""
    if isinstance(a, OptionalShape):
        return shape_covers(a.elem, b.elem if isinstance(b, OptionalShape) else b)
    if isinstance(b, OptionalShape) or a.dtype != b.dtype:
        return False
    if isinstance(a, SequenceShape):
        if not isinstance(b, SequenceShape) or not dim_covers(a.length, b.length):
            return False
        return b.known_empty or a.elem is None or (b.elem is not None and shape_covers(a.elem, b.elem))
    if not isinstance(b, Shape) or a.ndim != b.ndim:
        return False
    return all(dim_covers(x, y) for x, y in zip(a.dims, b.dims, strict=True))

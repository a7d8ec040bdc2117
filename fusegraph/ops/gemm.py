"""Matrix products (`dot`, `quant_dot`, `einsum`) and the determinant.

`dot` is MIGraphX's: a batched matmul of two inputs of equal rank (>= 2) whose batch dims are equal.
The frontend promotes 1-D operands, broadcasts batch dims and folds Gemm's alpha/beta/C into
pointwise ops around it, so fusion passes see a dot followed by pointwise epilogues.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape

_HALF = (DType.float16, DType.bfloat16)


def _matmul_lens(op: Op, a: Shape, b: Shape) -> list[int]:
    if a.ndim < 2 or a.ndim != b.ndim:
        raise ShapeError(f"{op}: needs inputs of equal rank >= 2, got {a} and {b}")
    if a.lens[:-2] != b.lens[:-2]:
        raise ShapeError(f"{op}: batch dims differ: {a} and {b}")
    if a.lens[-1] != b.lens[-2]:
        raise ShapeError(f"{op}: inner dims differ: {a} and {b}")
    return [*a.lens[:-1], b.lens[-1]]


@register_op
class Dot(Op):
    """a @ b over the last two dims, in the inputs' dtype (half precision accumulates in float32)."""

    name = "dot"
    kind = OpKind.GEMM

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        a, b = inputs
        if a.dtype != b.dtype:
            raise ShapeError(f"{self}: input dtypes differ: {a} and {b}")
        return Shape.of(a.dtype, _matmul_lens(self, a, b))

    def compute(self, args):
        a, b = (np.asarray(x) for x in args)
        if DType.from_numpy(a.dtype) in _HALF:
            return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
        return np.matmul(a, b)


@register_op
class BroadcastForDot(Op):
    """The first input with its batch dims (all but the last two) broadcast against the second's,
    numpy-matmul style; its last two dims are kept. A view. The frontend uses it where the batch
    dims are dynamic (static ones take `broadcast`), so `dot` always sees equal batch dims."""

    name = "broadcast_for_dot"
    kind = OpKind.MOVEMENT

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        x, other = inputs
        if x.ndim < 2 or other.ndim < 2:
            raise ShapeError(f"{self}: needs inputs of rank >= 2, got {x} and {other}")
        try:
            batch = tuple(np.broadcast_shapes(x.lens[:-2], other.lens[:-2]))
        except ValueError:
            raise ShapeError(f"{self}: batch dims of {x} and {other} do not broadcast") from None
        pad = len(batch) - (x.ndim - 2)
        strides = [0] * pad + [0 if n == 1 and m != 1 else st
                               for n, m, st in zip(x.lens[:-2], batch[pad:], x.strides[:-2], strict=True)]
        return Shape.of(x.dtype, [*batch, *x.lens[-2:]], [*strides, *x.strides[-2:]])

    def compute(self, args):
        x, other = (np.asarray(a) for a in args)
        return np.broadcast_to(x, np.broadcast_shapes(x.shape[:-2], other.shape[:-2]) + x.shape[-2:])


@register_op
class QuantDot(Op):
    """Integer a @ b accumulated exactly in int32 (wrapping like the hardware), result int32.

    The inputs may be any integer types (int8 x uint8 included); zero points are subtracted by
    the frontend before, scales applied after."""

    name = "quant_dot"
    kind = OpKind.GEMM

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        a, b = inputs
        if not (a.dtype.is_int and b.dtype.is_int):
            raise ShapeError(f"{self}: needs integer inputs, got {a} and {b}")
        return Shape.of(DType.int32, _matmul_lens(self, a, b))

    def compute(self, args):
        a, b = (np.asarray(x).astype(np.int32) for x in args)
        return np.matmul(a, b)


@register_op
class Einsum(Op):
    """np.einsum with an explicit equation: every operand's and the output's letters spelled out
    (no `...`, always `->`). The frontend lowers what it can to dot; what is left lands here."""

    name = "einsum"
    kind = OpKind.GEMM
    equation: str = ""

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        lhs, arrow, out = self.equation.partition("->")
        terms = lhs.split(",")
        if not arrow or "." in self.equation or len(terms) != len(inputs):
            raise ShapeError(f"{self}: needs an explicit equation for {len(inputs)} inputs")
        sizes: dict[str, int] = {}
        for term, s in zip(terms, inputs, strict=True):
            if len(term) != s.ndim:
                raise ShapeError(f"{self}: term {term!r} does not match {s}")
            for c, n in zip(term, s.lens, strict=True):
                m = sizes.setdefault(c, n)
                if m != n and 1 not in (m, n):
                    raise ShapeError(f"{self}: index {c!r} has sizes {m} and {n}")
                sizes[c] = max(m, n) if 1 in (m, n) else n  # size-1 dims broadcast
        if any(c not in sizes for c in out):
            raise ShapeError(f"{self}: an output index is in no input")
        return Shape.of(inputs[0].dtype, [sizes[c] for c in out])

    def compute(self, args):
        arrays = [np.asarray(x) for x in args]
        dt = arrays[0].dtype
        if DType.from_numpy(dt) in _HALF:
            arrays = [x.astype(np.float32) for x in arrays]
        return np.asarray(np.einsum(self.equation, *arrays)).astype(dt, copy=False)


@register_op
class Det(Op):
    """Determinant of the square matrices in the last two dims (the batch dims remain)."""

    name = "det"
    kind = OpKind.OPAQUE

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        (x,) = inputs
        if x.ndim < 2 or x.lens[-1] != x.lens[-2] or not x.dtype.is_float:
            raise ShapeError(f"{self}: needs float square matrices [..., M, M], got {x}")
        return Shape.of(x.dtype, x.lens[:-2])

    def compute(self, args):
        x = np.asarray(args[0])
        wide = x.astype(np.float64) if DType.from_numpy(x.dtype) in _HALF else x
        return np.asarray(np.linalg.det(wide)).astype(x.dtype)

"""Layout ops that copy: concat and pad."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.op import register_op
from ..ir.shape import Dim, Shape
from .movement import MovementOp

PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register_op
class Concat(MovementOp):
    """Join the inputs along `axis` (non-negative); every other dim must match."""

    name = "concat"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    axis: int = 0

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        first = inputs[0]
        if not 0 <= self.axis < first.ndim:
            raise ShapeError(f"concat: axis {self.axis} out of range for {first}")
        for s in inputs[1:]:
            others = [n for i, n in enumerate(s.lens) if i != self.axis]
            if s.dtype != first.dtype or s.ndim != first.ndim or others != [
                    n for i, n in enumerate(first.lens) if i != self.axis]:
                raise ShapeError(f"concat[axis={self.axis}]: {s} does not match {first}")
        lens = list(first.lens)
        lens[self.axis] = sum(s.lens[self.axis] for s in inputs)
        return Shape.of(first.dtype, lens)

    def compute_dynamic_shape(self, inputs):
        # Dims off the axis are equal at run time, so the narrowest range of each holds for all;
        # the axis dim is the sum of the inputs' ranges.
        first = inputs[0]
        if not 0 <= self.axis < first.ndim or any(s.ndim != first.ndim or s.dtype != first.dtype for s in inputs):
            raise ShapeError(f"concat[axis={self.axis}]: inputs {list(inputs)} differ in rank or dtype")
        dims = []
        for i in range(first.ndim):
            ranges = [s.dims[i] for s in inputs]
            if i == self.axis:
                hi = None if any(d.max is None for d in ranges) else sum(d.max for d in ranges)
                dims.append(Dim(sum(d.min for d in ranges), hi))
                continue
            lo = max(d.min for d in ranges)
            his = [d.max for d in ranges if d.max is not None]
            if his and min(his) < lo:
                raise ShapeError(f"concat[axis={self.axis}]: dim {i} of {list(inputs)} cannot match")
            dims.append(Dim(lo, min(his) if his else None))
        return Shape.dynamic(first.dtype, dims)

    def compute(self, args):
        return np.concatenate(args, axis=self.axis)


@register_op
class Pad(MovementOp):
    """Pad with `pads` = (begin of each axis..., end of each axis...), all non-negative (the
    frontend turns negative ONNX pads into a slice). Modes are numpy's (and ONNX's)."""

    name = "pad"
    symbolic_probe = True  # its static rule holds at every probe (ir/symbolic.py)
    pads: tuple[int, ...] = ()
    mode: str = "constant"
    value: int | float | bool = 0

    def compute_shape(self, inputs):
        (x,) = inputs
        r = x.ndim
        if len(self.pads) != 2 * r or min(self.pads, default=0) < 0 or self.mode not in PAD_MODES:
            raise ShapeError(f"{self}: bad pads or mode for {x}")
        if self.mode != "constant" and any(n == 0 and (self.pads[i] or self.pads[i + r])
                                           for i, n in enumerate(x.lens)):
            raise ShapeError(f"{self}: cannot {self.mode}-pad an empty dimension of {x}")
        return Shape.of(x.dtype, [n + self.pads[i] + self.pads[i + r] for i, n in enumerate(x.lens)])

    def compute_dynamic_shape(self, inputs):
        (x,) = inputs
        r = x.ndim
        self.compute_shape([Shape.of(x.dtype, [max(d.min, 1) for d in x.dims])])  # checks pads and mode
        return Shape.dynamic(x.dtype, [Dim(d.min + self.pads[i] + self.pads[i + r],
                                           None if d.max is None else d.max + self.pads[i] + self.pads[i + r])
                                       for i, d in enumerate(x.dims)])

    def compute(self, args):
        r = np.ndim(args[0])
        return pad_array(args[0], self.pads[:r], self.pads[r:], self.mode, self.value)


def cuts_past_the_data(lens: Sequence[int], begins: Sequence[int], ends: Sequence[int], mode: str) -> bool:
    """Whether a pad's negative widths remove more of an axis than its data holds (then only a
    constant pad is defined: it adds first and the removal takes padding too, as ONNX Runtime
    computes it); a ShapeError where the result would have a negative size or a reflect, edge or wrap
    pad would repeat what is not there."""
    past = False
    for a, (n, b, e) in enumerate(zip(lens, begins, ends, strict=True)):
        if n + b + e < 0:
            raise ShapeError(f"pad widths ({b}, {e}) leave axis {a} (of {n}) a negative size, {n + b + e}")
        if n + min(b, 0) + min(e, 0) < 0:
            if mode != "constant":
                raise ShapeError(f"pad widths ({b}, {e}) remove more than the {n} elements of axis {a}, "
                                 f"which {mode} padding would repeat")
            past = True
    return past


def pad_array(x: np.ndarray, begins: Sequence[int], ends: Sequence[int], mode: str, value) -> np.ndarray:
    """ONNX Pad on an array, as ONNX Runtime computes it: negative widths remove elements, then
    non-negative ones add them; where the removal passes an axis's data, a constant pad adds first
    ([0, 1, 2, 3] by (-5, 3) is [0, 0]: cuts_past_the_data)."""
    pairs = list(zip(begins, ends, strict=True))
    widths = [(max(b, 0), max(e, 0)) for b, e in pairs]
    past = cuts_past_the_data(x.shape, begins, ends, mode)
    if not past:
        x = x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(x.shape, pairs))]
    if mode == "constant":
        x = np.pad(x, widths, mode="constant", constant_values=np.asarray(value, x.dtype))
    else:
        x = np.pad(x, widths, mode=mode)
    return x[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, (b, e) in zip(x.shape, pairs))] if past else x

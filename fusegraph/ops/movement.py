"""Movement ops: views and copies that rearrange elements without arithmetic."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape


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
                               for n, m, s in zip(x.lens, self.out_lens[pad:], x.strides)]
        return Shape.of(x.dtype, self.out_lens, strides)

    def compute(self, args):
        return np.broadcast_to(args[0], self.out_lens)


@register_op
class BroadcastLike(MovementOp):
    """Broadcast the first input against the others (for dynamic shapes, known only at run time)."""

    name = "broadcast_like"

    def compute_shape(self, inputs):
        lens = np.broadcast_shapes(*[s.lens for s in inputs])
        return Shape.of(inputs[0].dtype, lens)

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


@register_op
class Transpose(MovementOp):
    name = "transpose"
    perm: tuple[int, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        if sorted(self.perm) != list(range(x.ndim)):
            raise ShapeError(f"bad permutation {list(self.perm)} for {x}")
        return Shape.of(x.dtype, [x.lens[p] for p in self.perm], [x.strides[p] for p in self.perm])

    def compute(self, args):
        return np.transpose(args[0], self.perm)


@register_op
class Contiguous(MovementOp):
    """Copy a view into standard (row-major) layout."""

    name = "contiguous"

    def compute_shape(self, inputs):
        return Shape.of(inputs[0].dtype, inputs[0].lens)

    def compute(self, args):
        return np.ascontiguousarray(args[0])

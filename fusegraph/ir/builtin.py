"""Ops every module needs: parameters, literals, the return, and tuple element access."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from .dtypes import DType
from .op import Op, OpKind, register_op
from .shape import AnyShape, Shape, TupleShape


@register_op
class Param(Op):
    name = "@param"
    kind = OpKind.BUILTIN
    deterministic = False
    param_name: str = ""
    param_shape: AnyShape | None = None

    def compute_shape(self, inputs):
        return self.param_shape

    def infer_shape(self, inputs):
        return self.param_shape


@dataclasses.dataclass(frozen=True, eq=False)
class Literal(Op):
    """A constant tensor. Compared by identity: two literals are equal only if they are the same."""

    name = "@literal"
    kind = OpKind.BUILTIN
    value: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(()))

    def __post_init__(self):
        # always an array: numpy answers a 0-d computation with a scalar (np.clip, a reduction),
        # and kernels take arrays
        if not isinstance(self.value, np.ndarray):
            object.__setattr__(self, "value", np.asarray(self.value))

    def compute_shape(self, inputs):
        return Shape.of(DType.from_numpy(self.value.dtype), self.value.shape)

    def infer_shape(self, inputs):
        return self.compute_shape(inputs)

    def compute(self, args):
        return self.value

    def attributes(self):
        return {}


register_op(Literal)


@register_op
class Return(Op):
    name = "@return"
    kind = OpKind.BUILTIN

    def compute_shape(self, inputs):
        return TupleShape(tuple(inputs))

    def infer_shape(self, inputs):
        return TupleShape(tuple(inputs))


@register_op
class GetTupleElem(Op):
    name = "get_tuple_elem"
    kind = OpKind.MOVEMENT
    index: int = 0

    def compute_shape(self, inputs: Sequence[AnyShape]):
        (t,) = inputs
        if not isinstance(t, TupleShape) or not 0 <= self.index < len(t.elements):
            raise ShapeError(f"get_tuple_elem[{self.index}] of {t}")
        return t.elements[self.index]

    def infer_shape(self, inputs):
        return self.compute_shape(inputs)

    def compute(self, args):
        return args[0][self.index]

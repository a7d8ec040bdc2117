"""Optional ops. At run time an optional is None or its value; its shape is an `OptionalShape`.

Ops that make an optional are not `deterministic`: an optional is no tensor, so constant folding
must not turn it into a literal.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import register_op
from ..ir.shape import OptionalShape, SequenceShape, Shape
from .sequence import SequenceOp


@register_op
class MakeOptional(SequenceOp):
    """Wrap a value as an optional; with no input, an empty optional of type `elem`."""

    name = "optional"
    deterministic = False
    elem: Shape | SequenceShape | None = None

    def compute_shape(self, inputs):
        if inputs:
            if isinstance(inputs[0], OptionalShape):
                raise ShapeError(f"optional: cannot wrap an optional {inputs[0]}")
            return OptionalShape(inputs[0])
        if not isinstance(self.elem, (Shape, SequenceShape)):
            raise ShapeError(f"optional: an empty optional needs a tensor or sequence element type, got {self.elem}")
        return OptionalShape(self.elem)

    def compute(self, args):
        return args[0] if args else None


@register_op
class OptionalHasElement(SequenceOp):
    name = "optional_has_element"

    def compute_shape(self, inputs):
        if not isinstance(inputs[0], OptionalShape):
            raise ShapeError(f"optional_has_element: expected an optional, got {inputs[0]}")
        return Shape.of(DType.bool, ())

    def compute(self, args):
        return np.array(args[0] is not None)


@register_op
class OptionalGetElement(SequenceOp):
    name = "optional_get_element"

    def compute_shape(self, inputs):
        if not isinstance(inputs[0], OptionalShape):
            raise ShapeError(f"optional_get_element: expected an optional, got {inputs[0]}")
        return inputs[0].elem

    def compute(self, args):
        if args[0] is None:
            raise ValueError("optional_get_element: the optional is empty")
        return args[0]

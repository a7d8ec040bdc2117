"""Ops with no reusable structure for fusion; each is computed by its own kernel."""

from __future__ import annotations

from ..errors import CompileError
from ..ir.op import Op, OpKind, register_op


@register_op
class Unknown(Op):
    """Stands for an ONNX op fusegraph cannot convert (parse_onnx(skip_unknown_operators=True))."""

    name = "unknown"
    kind = OpKind.OPAQUE
    deterministic = False
    op_type: str = ""
    domain: str = ""

    def compute_shape(self, inputs):
        if not inputs:
            raise CompileError(f"unknown operator {self.op_type} has no inputs to take a shape from")
        return inputs[0]

    def compute(self, args):
        raise CompileError(f"cannot run unknown operator {self.domain + '.' if self.domain else ''}{self.op_type}")

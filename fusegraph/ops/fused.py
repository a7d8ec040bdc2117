"""Fused ops whose body is a submodule: the reduction regions built by passes.fuse_reduce."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ShapeError
from ..ir.op import Op, OpKind, register_op


@register_op
class FusedReduce(Op):
    """A reduction over `axes` together with its pointwise prologue and epilogue, as one kernel.

    The body (the instruction's one submodule) takes the inputs as parameters, in order, and
    returns the result. Every reduction inside reduces the same `axes` of the same lens."""

    name = "fused_reduce"
    kind = OpKind.REDUCE
    axes: tuple[int, ...] = ()

    def compute_shape_with_modules(self, inputs: Sequence, modules: Sequence) -> object:
        (body,) = modules
        params = body.parameters
        if len(params) != len(inputs):
            raise ShapeError(f"{self}: body takes {len(params)} inputs, given {len(inputs)}")
        for p, s in zip(params, inputs):
            if str(p.shape) != str(s):
                raise ShapeError(f"{self}: body parameter {p.op.param_name} is {p.shape}, given {s}")
        (out,) = body.outputs
        return out.shape

    def compute_shape(self, inputs):
        raise ShapeError(f"{self}: needs its body submodule")

    def compute_control(self, args, modules, run):
        return run(modules[0], list(args))[0]

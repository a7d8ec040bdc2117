"""Pointwise and reduction kernels: numpy evaluation of the scalar bodies into the arena buffers."""

from __future__ import annotations

from ....ir.module import Instruction
from ....ir.op import OpKind, registered_ops
from ..lowering import Kernel, LowerContext, lowering, reference_kernel


def numpy_pointwise(ins: Instruction, ctx: LowerContext) -> Kernel:
    compute = ins.op.compute

    def run(args, out):
        r = compute(args)
        if out is None:
            return r
        out[...] = r
        return out

    return run


def _pointwise_names() -> list[str]:
    return [n for n, c in registered_ops().items() if c.kind is OpKind.POINTWISE]


lowering(*_pointwise_names())(numpy_pointwise)


@lowering("softmax", "log_softmax", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "fused_reduce")
def reduction(ins: Instruction, ctx: LowerContext) -> Kernel:
    return reference_kernel(ins, ctx)

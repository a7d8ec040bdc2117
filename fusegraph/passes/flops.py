"""Floating-point operation estimates per instruction (a multiply-add counts 2), for reports.

Rules are looked up by op name, then by op kind; an op with no rule counts 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ir.module import Instruction
from ..ir.op import OpKind
from ..ir.shape import Shape
from ..ops.scalar import Call, Expr


def _calls(e: Expr) -> int:
    return 1 + sum(_calls(a) for a in e.args) if isinstance(e, Call) else 0


def _elements(s) -> int:
    return math.prod(s.lens) if isinstance(s, Shape) and not s.is_dynamic else 0


def _dot(ins: Instruction) -> int:
    return 2 * _elements(ins.shape) * ins.inputs[0].shape.lens[-1]


def _conv(ins: Instruction) -> int:
    w = ins.inputs[1].shape.lens
    return 2 * _elements(ins.shape) * math.prod(w[1:])


def _deconv(ins: Instruction) -> int:
    w = ins.inputs[1].shape.lens
    return 2 * _elements(ins.inputs[0].shape) * math.prod(w[1:])


def _pool(ins: Instruction) -> int:
    if getattr(ins.op, "global_pool", False):
        return _elements(ins.inputs[0].shape)
    return _elements(ins.shape) * math.prod(ins.op.lengths or (1,))


def _softmax(ins: Instruction) -> int:
    return 5 * _elements(ins.shape)  # max, sub, exp, sum, div


def _fused_body(ins: Instruction) -> int:
    return sum(instruction_flops(i) for m in ins.module_args for i in m.instructions)


BY_NAME: dict[str, Callable[[Instruction], int]] = {
    "dot": _dot, "quant_dot": _dot, "matmul_nbits": _dot, "convolution": _conv, "deconvolution": _deconv, "pooling": _pool,
    "softmax": _softmax, "log_softmax": _softmax, "fused_reduce": _fused_body,
}


def instruction_flops(ins: Instruction) -> int:
    if not isinstance(ins.shape, Shape) or ins.shape.is_dynamic:
        return 0
    # a target's fused op counts as the op it extends (conv_epilogue: a convolution)
    rule = next((BY_NAME[c.name] for c in type(ins.op).__mro__ if getattr(c, "name", None) in BY_NAME), None)
    if rule is not None:
        return int(rule(ins))
    if ins.op.kind is OpKind.POINTWISE:
        return _elements(ins.shape) * max(1, _calls(ins.op.expr))
    if ins.op.kind is OpKind.REDUCE and ins.inputs:
        return _elements(ins.inputs[0].shape)
    return 0

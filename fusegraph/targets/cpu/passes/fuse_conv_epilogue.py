"""Folds the pointwise epilogue of a float32 convolution into a `conv_epilogue`: per-channel bias,
residual tensors added, then at most one activation — what oneDNN runs as bias + post-ops, so the
convolution's output is written once, already finished.

The epilogue must be act(sum of terms) where one term is the convolution (used nowhere else), the
others per-output-channel constants (summed into the bias) or tensors of the output's shape."""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.op import OpKind
from ....ops.scalar import Call, Const, Expr, Var, parse_expr
from ....passes.constants import small_constant
from ..ops import ACTIVATIONS, ConvEpilogue

ALPHA, BETA = 101, 102  # template placeholders for an activation's constants
_TEMPLATES = {name: parse_expr(body.format(alpha=f"x{ALPHA}", beta=f"x{BETA}")) for name, body in ACTIVATIONS.items()
              if name}


def _match(t: Expr, e: Expr, binding: dict[int, Expr]) -> bool:
    if isinstance(t, Var):
        if t.index in (ALPHA, BETA) and not isinstance(e, Const):
            return False
        if t.index in binding:
            return binding[t.index] == e
        binding[t.index] = e
        return True
    if isinstance(t, Const):
        return isinstance(e, Const) and float(e.value) == float(t.value)
    return (isinstance(e, Call) and e.fn == t.fn and len(e.args) == len(t.args)
            and all(_match(a, b, binding) for a, b in zip(t.args, e.args)))


def split_activation(e: Expr) -> tuple[str, float, float, Expr]:
    """(activation, alpha, beta, its argument); ("", 0, 0, e) when e has no recognized activation."""
    for name, t in _TEMPLATES.items():
        b: dict[int, Expr] = {}
        if _match(t, e, b):
            return name, float(getattr(b.get(ALPHA), "value", 0.0)), float(getattr(b.get(BETA), "value", 0.0)), b[0]
    return "", 0.0, 0.0, e


def add_terms(e: Expr) -> list[Expr]:
    if isinstance(e, Call) and e.fn == "add":
        return add_terms(e.args[0]) + add_terms(e.args[1])
    return [e]


def _channel_constant(ins: Instruction, channels: int) -> np.ndarray | None:
    v = small_constant(ins)
    if v is None or v.ndim < 2 or v.shape[1] not in (1, channels) or any(n != 1 for k, n in enumerate(v.shape) if k != 1):
        return None
    return np.broadcast_to(v.reshape(-1), (channels,)).astype(np.float32)


def _rewrite(module: Module, ins: Instruction) -> bool:
    if ins.op.kind is not OpKind.POINTWISE or ins.shape.dtype != DType.float32:
        return False
    act, alpha, beta, body = split_activation(ins.op.expr)
    terms = add_terms(body)
    if not all(isinstance(t, Var) for t in terms) or len({t.index for t in terms}) != len(terms):
        return False
    conv_term = next((t for t in terms if ins.inputs[t.index].op.name == "convolution"
                      and len(ins.inputs[t.index].users) == 1 and ins.inputs[t.index].shape.dtype == DType.float32), None)
    if conv_term is None:
        return False
    conv = ins.inputs[conv_term.index]
    channels = conv.shape.lens[1]
    bias = np.zeros(channels, np.float32)
    has_bias, residuals = False, []
    for t in terms:
        if t is conv_term:
            continue
        x = ins.inputs[t.index]
        c = _channel_constant(x, channels)
        if c is not None:
            bias, has_bias = bias + c, True
        elif x.shape.lens == conv.shape.lens:
            residuals.append(x)
        else:
            return False
    op = ConvEpilogue(padding=conv.op.padding, stride=conv.op.stride, dilation=conv.op.dilation, group=conv.op.group,
                      has_bias=has_bias, n_residual=len(residuals), activation=act, alpha=alpha, beta=beta)
    extra = [module.add_literal(bias)] if has_bias else []
    new = module.insert(ins, op, *conv.inputs, *extra, *residuals)
    module.replace(ins, new)
    return True


def fuse_conv_epilogue(module: Module) -> bool:
    changed = False
    for ins in module:
        if ins.users and _rewrite(module, ins):
            changed = True
    return changed

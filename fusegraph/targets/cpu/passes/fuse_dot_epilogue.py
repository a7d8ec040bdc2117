"""Folds the pointwise epilogue of a float32 product with constant weights into a `dot_epilogue`:
bias per output column, then a chain of activations with at most one residual tensor added before
or within it — oneDNN's matmul with bias and post-ops, so a transformer's dense layers (bias,
bias + GELU) write their output once.

The frontend flattens a 3-D MatMul to a 2-D dot and reshapes the product back before the bias add:
the product term may be that reshape (keeping the last dim), which the op then carries as `out_lens`.
The epilogue must read as act_k(...act_1(sum of terms)) (see epilogue.py): the product (used nowhere
else), constants per output column (summed into the bias) or a tensor of the output's shape."""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.op import OpKind
from ....ops.scalar import Const, Expr, Var
from ....passes.constants import small_constant
from ..ops import RESIDUAL, DotEpilogue
from .epilogue import constant_inputs, read_epilogue


def _product(ins: Instruction, t: Expr) -> tuple[Instruction, Instruction | None] | None:
    """(the dot, the reshape after it or None) when term `t` is a product with constant weights
    read only by this epilogue."""
    if not isinstance(t, Var):
        return None
    x = ins.inputs[t.index]
    reshape = None
    if x.op.name == "reshape" and len(x.users) == 1:
        reshape, x = x, x.inputs[0]
    ok = (x.op.name == "dot" and len(x.users) == 1 and x.shape.dtype == DType.float32 and x.inputs[1].is_literal
          and x.inputs[1].shape.ndim == 2 and x.inputs[0].shape.ndim >= 2)
    if not ok or (reshape is not None and reshape.shape.lens[-1:] != x.shape.lens[-1:]):
        return None
    return x, reshape


def _column_constant(ins: Instruction, columns: int) -> np.ndarray | None:
    v = small_constant(ins)
    if v is None or v.ndim < 1 or v.shape[-1] not in (1, columns) or any(n != 1 for n in v.shape[:-1]):
        return None
    return np.broadcast_to(v.reshape(-1), (columns,)).astype(np.float32)


def _rewrite(module: Module, ins: Instruction) -> bool:
    if ins.op.kind is not OpKind.POINTWISE or ins.shape.dtype != DType.float32:
        return False
    ep = read_epilogue(constant_inputs(ins.op.expr, ins.inputs), lambda t: isinstance(t, (Var, Const)))
    if ep is None:
        return False
    products = [(t, p) for t in ep.terms if (p := _product(ins, t)) is not None]
    if len(products) != 1:
        return False
    term, (dot, reshape) = products[0]
    columns = dot.shape.lens[-1]
    bias = np.zeros(columns, np.float32)
    has_bias, residuals = False, []
    for t in ep.terms:
        if t is term:
            continue
        if isinstance(t, Const):
            bias, has_bias = bias + np.float32(t.value), True
            continue
        x = ins.inputs[t.index]
        c = _column_constant(x, columns)
        if c is not None:
            bias, has_bias = bias + c, True
        elif x.shape.lens == ins.shape.lens and not residuals and x not in (dot, reshape):
            residuals.append(x)
        else:
            return False
    chain = [(RESIDUAL, 0.0, 0.0)] * len(residuals) + ep.activations
    for t in ep.residuals:  # added after some activations: their RESIDUAL steps are in the chain
        x = ins.inputs[t.index] if isinstance(t, Var) else None
        if x is None or x.shape.lens != ins.shape.lens or residuals or x in (dot, reshape):
            return False
        residuals.append(x)
    op = DotEpilogue(out_lens=reshape.shape.lens if reshape is not None else (), has_bias=has_bias,
                     n_residual=len(residuals), activations=tuple(chain))
    extra = [module.add_literal(bias)] if has_bias else []
    module.replace(ins, module.insert(ins, op, *dot.inputs, *extra, *residuals))
    return True


def fuse_dot_epilogue(module: Module) -> bool:
    changed = False
    for ins in module:
        if ins.users and _rewrite(module, ins):
            changed = True
    return changed

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
from ....passes.manager import rewrite_each
from ..ops import DotEpilogue
from .epilogue import constant_inputs, read_epilogue, split_terms


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
    ops = split_terms(ins, ep, term, columns, _column_constant, ins.shape.lens, (dot, reshape))
    if ops is None:
        return False
    op = DotEpilogue(out_lens=reshape.shape.lens if reshape is not None else (), has_bias=ops.has_bias,
                     n_residual=len(ops.residuals), activations=tuple(ops.chain))
    extra = [module.add_literal(ops.bias)] if ops.has_bias else []
    module.replace(ins, module.insert(ins, op, *dot.inputs, *extra, *ops.residuals))
    return True


def fuse_dot_epilogue(module: Module) -> bool:
    return rewrite_each(module, _rewrite)

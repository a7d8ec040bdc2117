"""Folds the pointwise epilogue of a float32 convolution (deconvolution) into a `conv_epilogue`
(`deconv_epilogue`): per-channel scale (into the weights) and bias, then a chain of activations with
at most one residual tensor added before or within it — what oneDNN runs as bias + post-ops, so the
convolution's output is written once, already finished.

The epilogue must read as a chain over a sum of terms (see epilogue.py) where one term is the
convolution (used nowhere else), possibly times a per-output-channel constant, and the others are
per-output-channel constants (summed into the bias) or a tensor of the output's shape."""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.op import OpKind
from ....ops.scalar import Call, Const, Expr, Var
from ....passes.constants import small_constant
from ....passes.manager import rewrite_each
from ..ops import ConvEpilogue, DeconvEpilogue
from .epilogue import constant_inputs, read_epilogue, split_terms

# the window op -> its epilogue form
_FUSED = {"convolution": ConvEpilogue, "deconvolution": DeconvEpilogue}


def _is_term(t: Expr) -> bool:
    if isinstance(t, (Var, Const)):
        return True
    return isinstance(t, Call) and t.fn == "mul" and all(isinstance(a, (Var, Const)) for a in t.args)


def _channel_constant(ins: Instruction, channels: int) -> np.ndarray | None:
    v = small_constant(ins)
    if v is None or v.ndim < 2 or v.shape[1] not in (1, channels) or any(n != 1 for k, n in enumerate(v.shape) if k != 1):
        return None
    return np.broadcast_to(v.reshape(-1), (channels,)).astype(np.float32)


def _conv(ins: Instruction, e: Expr) -> Instruction | None:
    if not isinstance(e, Var):
        return None
    x = ins.inputs[e.index]
    ok = x.op.name in _FUSED and len(x.users) == 1 and x.shape.dtype == DType.float32
    return x if ok else None


def _scaled_conv(ins: Instruction, t: Expr) -> tuple[Instruction, np.ndarray | float] | None:
    """(the convolution, its per-channel or scalar factor) of a term conv * k."""
    if _conv(ins, t) is not None:
        return _conv(ins, t), 1.0
    if not (isinstance(t, Call) and t.fn == "mul"):
        return None
    for c, k in (t.args, t.args[::-1]):
        conv = _conv(ins, c)
        # a deconvolution's output channels are its weights' axis 1, per group: scaled when ungrouped
        if conv is None or not conv.inputs[1].is_literal or (conv.op.name == "deconvolution" and conv.op.group != 1):
            continue
        if isinstance(k, Const):
            return conv, float(k.value)
        factor = _channel_constant(ins.inputs[k.index], conv.shape.lens[1]) if isinstance(k, Var) else None
        if factor is not None:
            return conv, factor
    return None


def _rewrite(module: Module, ins: Instruction) -> bool:
    if ins.op.kind is not OpKind.POINTWISE or ins.shape.dtype != DType.float32:
        return False
    ep = read_epilogue(constant_inputs(ins.op.expr, ins.inputs), _is_term)
    if ep is None:
        return False
    scaled = [(t, s) for t in ep.terms if (s := _scaled_conv(ins, t)) is not None]
    if not scaled:
        return False
    # of two convolutions summed (ResNet's projection shortcut), the later one runs last and adds
    # the other, computed already, as its residual
    order = {x.uid: k for k, x in enumerate(module.instructions)}
    conv_term, (conv, factor) = max(scaled, key=lambda ts: order[ts[1][0].uid])
    channels = conv.shape.lens[1]
    if sum(1 for t in ep.terms + ep.residuals if conv in _inputs_of(ins, t)) != 1:
        return False  # the convolution is read twice: it is not a plain term
    ops = split_terms(ins, ep, conv_term, channels, _channel_constant, conv.shape.lens, (conv,))
    if ops is None:
        return False
    weights = conv.inputs[1]
    if not (isinstance(factor, float) and factor == 1.0):
        w = weights.literal
        axis = 1 if conv.op.name == "deconvolution" else 0
        scale = np.broadcast_to(np.asarray(factor, np.float32), (channels,))
        weights = module.add_literal((w * scale.reshape([-1 if k == axis else 1 for k in range(w.ndim)])).astype(w.dtype))
    op = _FUSED[conv.op.name](**conv.op.attributes(), has_bias=ops.has_bias, n_residual=len(ops.residuals),
                              activations=tuple(ops.chain))
    extra = [module.add_literal(ops.bias)] if ops.has_bias else []
    new = module.insert(ins, op, conv.inputs[0], weights, *extra, *ops.residuals)
    module.replace(ins, new)
    return True


def _inputs_of(ins: Instruction, t: Expr) -> list[Instruction]:
    if isinstance(t, Var):
        return [ins.inputs[t.index]]
    return [x for a in getattr(t, "args", ()) for x in _inputs_of(ins, a)]


def fuse_conv_epilogue(module: Module) -> bool:
    return rewrite_each(module, _rewrite)

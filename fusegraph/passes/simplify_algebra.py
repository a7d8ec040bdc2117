"""Algebraic rewrites over constants, written as a table of rules.

After it: no multiplication or addition by an identity constant; chains of constant adds and
multiplies are merged; constant subtractions are additions, divisions by a power of two are
multiplications (any other reciprocal rounds); a constant per-output-channel scale after a
convolution or a dot is folded into its weights; a softmax over an axis of length 1 is the
pointwise arithmetic it comes to. Together with
constant propagation this removes inference batch-norm arithmetic: (x - mean) * s + b after a conv
becomes conv with scaled weights, then one bias add.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir.module import Instruction, Module
from ..ir.op import make_op
from .constants import is_splat, materialize, small_constant

Rule = Callable[[Module, Instruction], Instruction | None]


def _const_operand(ins: Instruction) -> tuple[Instruction, np.ndarray] | None:
    """For a binary op with exactly one constant operand on the right (or left, if commutative)."""
    a, b = ins.inputs
    vb = small_constant(b)
    if vb is not None and small_constant(a) is None:
        return a, vb
    if ins.op.name in ("add", "mul"):
        va = small_constant(a)
        if va is not None and vb is None:
            return b, va
    return None


def _float(ins: Instruction) -> bool:
    return ins.shape.dtype.is_float


def x_times_one(m: Module, ins: Instruction):  # x*1 -> x, x/1 -> x
    if ins.op.name in ("mul", "div"):
        pair = _const_operand(ins)
        if pair and np.all(pair[1] == 1):
            return pair[0]
    return None


def x_plus_zero(m: Module, ins: Instruction):  # x+0 -> x, x-0 -> x
    if ins.op.name in ("add", "sub"):
        a, b = ins.inputs
        if is_splat(b, 0) and small_constant(a) is None:
            return a
        if ins.op.name == "add" and is_splat(a, 0) and small_constant(b) is None:
            return b
    return None


def sub_const_to_add(m: Module, ins: Instruction):  # x-c -> x+(-c)
    if ins.op.name == "sub" and _float(ins):
        c = small_constant(ins.inputs[1])
        if c is not None and small_constant(ins.inputs[0]) is None:
            return m.insert(ins, make_op("add"), ins.inputs[0], materialize(m, ins, -c, ins.shape))
    return None


def _exact_reciprocal(c: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """1/c when x * (1/c) rounds exactly as x / c for every x: c is a power of two whose reciprocal
    `dtype` holds. Any other reciprocal is itself rounded, and the product is then off by an ulp
    now and then: enough to move a quantized value (DynamicQuantizeLinear's span / 255) by one step."""
    c64 = c.astype(np.float64)
    if not np.all(np.abs(np.frexp(c64)[0]) == 0.5):
        return None
    r = 1 / c64
    return r if np.all(r.astype(dtype).astype(np.float64) == r) else None


def div_const_to_mul(m: Module, ins: Instruction):  # x/c -> x*(1/c), c a power of two
    if ins.op.name == "div" and _float(ins):
        c = small_constant(ins.inputs[1])
        r = _exact_reciprocal(c, ins.shape.dtype.np) if c is not None else None
        if r is not None and small_constant(ins.inputs[0]) is None:
            return m.insert(ins, make_op("mul"), ins.inputs[0], materialize(m, ins, r, ins.shape))
    return None


def merge_const_chain(m: Module, ins: Instruction):  # (x+c1)+c2 -> x+(c1+c2); (x*c1)*c2 -> x*(c1*c2)
    name = ins.op.name
    if name not in ("add", "mul") or not _float(ins):
        return None
    outer = _const_operand(ins)
    if outer is None or outer[0].op.name != name or len(outer[0].users) != 1:
        return None
    inner = _const_operand(outer[0])
    if inner is None:
        return None
    c = inner[1] + outer[1] if name == "add" else inner[1] * outer[1]
    return m.insert(ins, make_op(name), inner[0], materialize(m, ins, c, ins.shape))


def distribute_mul_over_add(m: Module, ins: Instruction):  # (x+c1)*c2 -> x*c2 + c1*c2
    if ins.op.name != "mul" or not _float(ins):
        return None
    outer = _const_operand(ins)
    if outer is None or outer[0].op.name != "add" or len(outer[0].users) != 1:
        return None
    inner = _const_operand(outer[0])
    if inner is None:
        return None
    scaled = m.insert(ins, make_op("mul"), inner[0], materialize(m, ins, outer[1], ins.shape))
    return m.insert(ins, make_op("add"), scaled, materialize(m, ins, inner[1] * outer[1], ins.shape))


def fold_scale_into_weights(m: Module, ins: Instruction):  # conv(x, w)*c -> conv(x, w*c) per out channel
    if ins.op.name != "mul" or not _float(ins):
        return None
    pair = _const_operand(ins)
    if pair is None or len(pair[0].users) != 1:
        return None
    prod, c = pair
    if prod.op.name == "convolution":
        w = prod.inputs[1]
        # the scale must vary along the output-channel axis (1) only
        if not w.is_literal or any(n != 1 for k, n in enumerate(c.shape) if k != 1):
            return None
        scale = c.reshape((-1,) + (1,) * (w.literal.ndim - 1))
        weights = m.add_literal((w.literal * scale).astype(w.literal.dtype))
    elif prod.op.name == "dot":
        w = prod.inputs[1]
        wv = small_constant(w)
        if wv is None or any(n != 1 for n in c.shape[:-1]):
            return None
        weights = materialize(m, ins, (wv * c.reshape(-1)).astype(wv.dtype), w.shape)
    else:
        return None
    return m.insert(ins, prod.op, prod.inputs[0], weights)


def softmax_of_one(m: Module, ins: Instruction):  # softmax over a length-1 axis -> e/e, e = exp(x-x)
    """The reference's own arithmetic with max(x) = x and sum(e) = e: 1 for a finite x, NaN else; a
    log-softmax s - log(exp(s)), s = x - x (MobileViT's attention over one patch position: a
    reduction kernel over nothing)."""
    if ins.op.name not in ("softmax", "log_softmax") or not _float(ins) or ins.shape.is_dynamic:
        return None
    x = ins.inputs[0]
    if x.shape.lens[ins.op.axis % x.shape.ndim] != 1:
        return None
    shifted = m.insert(ins, make_op("sub"), x, x)
    e = m.insert(ins, make_op("exp"), shifted)
    if ins.op.name == "softmax":
        return m.insert(ins, make_op("div"), e, e)
    return m.insert(ins, make_op("sub"), shifted, m.insert(ins, make_op("log"), e))


RULES: list[Rule] = [x_times_one, x_plus_zero, sub_const_to_add, div_const_to_mul, merge_const_chain,
                     distribute_mul_over_add, fold_scale_into_weights]
UNARY_RULES: list[Rule] = [softmax_of_one]


def simplify_algebra(module: Module) -> bool:
    changed = False
    for ins in module:
        if not ins.users or len(ins.inputs) not in (1, 2) or ins.module is None:
            continue
        for rule in RULES if len(ins.inputs) == 2 else UNARY_RULES:
            new = rule(module, ins)
            if new is not None:
                module.replace(ins, new)
                changed = True
                break
    return changed

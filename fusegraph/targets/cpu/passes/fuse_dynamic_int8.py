"""Turns a dynamically quantized product (ORT's quantize_dynamic, as the frontend writes it) into one
int8_dynamic_dot (ops_int8_dynamic.py), which oneDNN runs as a u8 x s8 matmul with the zero point and
the scale given at run time and the float epilogue fused:

    quant_dot([reshape](convert_int32(xq) - [broadcast](convert_int32(zx))), w)
        [-> reshape] -> convert_float32 [-> mul([broadcast](scale))] [-> add(bias)]
        ->  int8_dynamic_dot([reshape](xq), zx, w, scale[, bias])

zx: DynamicQuantizeLinear's zero point (a run-time tensor) or a constant (also none at all: 0); scale:
one value or one per output column, any tensor (ORT's a_scale * w_scale); bias: a constant per output
column. The result means what the chain means, rounding for rounding (the op's docstring).

Legality (anything else keeps quant_dot and its pointwise chain, which is right):
- xq: uint8/int8, read as [M, K]; one zero point of its type;
- w: a constant [K, N] whose values (its zero point already subtracted by the frontend) fit int8, for
  which oneDNN's integer sums are exact on this machine (onednn.quant.exact_here);
- each link reads the one before it alone (the int32 product is nobody else's).

DynamicQuantizeLinear's two reductions of one tensor (reduce_max and reduce_min over all its axes)
become one min_max: one pass over the tensor instead of two.

Runs first in the cpu pipeline, with fuse_int8: the chain is still unfused then.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ops.movement import Broadcast, Reshape, Slice
from ....quantize.qdq_match import constant_value, per_axis
from ....quantize.qdq_match import uniform as _uniform
from ..ops_int8 import ACT_TYPES
from ..ops_int8_dynamic import Int8DynamicDot, MinMax
from .fuse_int8 import _sole_user


def _unbroadcast(ins: Instruction) -> Instruction:
    while isinstance(ins.op, Broadcast):
        ins = ins.inputs[0]
    return ins


def _is_convert(ins: Instruction, to: DType) -> bool:
    return ins.op.name == "convert" and ins.op.to == to


def _zero_point(zp: Instruction, xq: Instruction, memo) -> Instruction | int | None:
    """x's zero point as one value of x's type: a constant (an int), or the 8-bit tensor that was
    converted to int32."""
    z = _uniform(constant_value(zp, memo))
    if z is not None:
        info = np.iinfo(xq.shape.dtype.np)
        return int(z) if z == int(z) and info.min <= z <= info.max else None
    zp = _unbroadcast(zp)
    if _is_convert(zp, DType.int32) and zp.inputs[0].shape.dtype == xq.shape.dtype and zp.shape.elements == 1:
        return zp.inputs[0]
    return None


def _source(a: Instruction, memo) -> tuple[Instruction, Instruction | int, Reshape | None] | None:
    """(the 8-bit tensor, its zero point, the reshape between them and the product) of quant_dot's `a`."""
    reshape = a.op if isinstance(a.op, Reshape) else None
    if reshape is not None:
        a = a.inputs[0]
    if a.shape.dtype in ACT_TYPES:  # no zero point (or one of 0, which the frontend drops)
        return a, 0, reshape
    if a.op.name != "sub" or not _is_convert(a.inputs[0], DType.int32):
        return None
    xq = a.inputs[0].inputs[0]
    if xq.shape.dtype not in ACT_TYPES:
        return None
    zp = _zero_point(a.inputs[1], xq, memo)
    return None if zp is None else (xq, zp, reshape)


def _scale(mul: Instruction, y: Instruction, n: int) -> tuple[Instruction, tuple[int, ...]] | None:
    """The other factor of `mul` as (tensor, the lens it is read in): one float32 value, or [n] per
    output column."""
    (other,) = [i for i in mul.inputs if i is not y] or [None]
    if other is None:
        return None
    s = _unbroadcast(other)
    lens = s.shape.lens
    if s.shape.dtype != DType.float32 or s.shape.is_dynamic or len(lens) > y.shape.ndim:
        return None
    if s.shape.elements == 1:
        return s, lens if lens in ((), (1,)) else ()
    if lens[-1] == n and all(d == 1 for d in lens[:-1]):
        return s, (n,)
    return None


def _epilogue(module: Module, prod: Instruction, n: int, memo):
    """(last instruction absorbed, out_lens, scale, bias) of the float chain after the product."""
    last, out_lens = prod, ()
    nxt = _sole_user(prod, module)
    if nxt is not None and isinstance(nxt.op, Reshape) and nxt.shape.lens[-1:] == (n,):
        last, out_lens, nxt = nxt, nxt.shape.lens, _sole_user(nxt, module)
    if nxt is None or not _is_convert(nxt, DType.float32):
        return None
    last, nxt = nxt, _sole_user(nxt, module)
    scale = bias = None
    if nxt is not None and nxt.op.name == "mul":
        scale = _scale(nxt, last, n)
        if scale is not None:
            last, nxt = nxt, _sole_user(nxt, module)
    if nxt is not None and nxt.op.name == "add":
        (other,) = [i for i in nxt.inputs if i is not last] or [None]
        c = constant_value(other, memo) if other is not None else None
        if c is not None and c.dtype == np.float32 and c.ndim <= last.shape.ndim:
            per = per_axis(c, last.shape.ndim - 1, last.shape.lens)
            if per is not None:
                last, bias = nxt, per
    return last, out_lens, scale, bias


def _fuse(module: Module, ins: Instruction, memo) -> bool:
    if ins.op.name != "quant_dot" or ins.shape.is_dynamic or ins.inputs[0].shape.ndim != 2:
        return False
    w = constant_value(ins.inputs[1], memo)
    if w is None or w.ndim != 2 or w.size == 0 or w.min() < -128 or w.max() > 127:
        return False
    from ..onednn.quant import exact_here

    w8 = np.ascontiguousarray(w, np.int8)
    if not exact_here(w8):
        return False
    got = _epilogue(module, ins, w8.shape[1], memo)
    src = _source(ins.inputs[0], memo) if got is not None else None
    if src is None:
        return False
    last, out_lens, scale, bias = got
    xq, zp, reshape = src
    if reshape is not None:
        xq = module.insert(ins, reshape, xq)
    if isinstance(zp, int):
        zp = module.add_literal(np.array(zp, xq.shape.dtype.np))
    if scale is None:
        scale = module.add_literal(np.ones((), np.float32))
    elif scale[0].shape.lens != scale[1]:
        scale = module.insert(last, Reshape(dims=scale[1]), scale[0])
    else:
        scale = scale[0]
    inputs = [xq, zp, module.add_literal(w8), scale]
    if bias is not None:
        inputs.append(module.add_literal(np.ascontiguousarray(bias, np.float32)))
    op = Int8DynamicDot(has_bias=bias is not None, out_lens=out_lens if out_lens != ins.shape.lens else ())
    module.replace(last, module.insert(last, op, *inputs))
    return True


def _whole(ins: Instruction, name: str) -> bool:
    """Whether `ins` is reduction `name` over every axis of a static float32 tensor."""
    x = ins.inputs[0].shape if ins.inputs else None
    return (ins.op.name == name and x is not None and x.dtype == DType.float32 and not x.is_dynamic
            and x.elements > 0 and tuple(sorted(ins.op.axes)) == tuple(range(x.ndim)))


def _fuse_min_max(module: Module, ins: Instruction) -> bool:
    """reduce_max(x) with a reduce_min(x) beside it -> both read off one min_max(x)."""
    if not _whole(ins, "reduce_max"):
        return False
    x = ins.inputs[0]
    low = next((u for u in x.users if u.users and _whole(u, "reduce_min")), None)
    if low is None:
        return False
    first = min((ins, low), key=module.index)
    both = module.insert(first, MinMax(), x)
    for k, red in enumerate((low, ins)):  # [min, max]
        one = module.insert(first, Slice(axes=(0,), starts=(k,), ends=(k + 1,), steps=(1,)), both)
        module.replace(red, module.insert(first, Reshape(dims=red.shape.lens), one))
    return True


def fuse_dynamic_int8(module: Module) -> bool:
    memo: dict[int, np.ndarray | None] = {}
    changed = False
    for ins in list(module):
        if ins.users:
            changed |= _fuse(module, ins, memo) or _fuse_min_max(module, ins)
    return changed

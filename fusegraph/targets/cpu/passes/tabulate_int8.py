"""Tabulates pointwise functions of one 8-bit tensor: a fused pointwise kernel whose only varying
input is uint8/int8 (every other input one constant value) becomes a 256-entry table lookup.

    fused_pointwise(xq, c0, c1, ...)  ->  int8_lookup(xq, table),  table = fused_pointwise(0..255, c0, c1, ...)

Why: between the int8 convolutions of a QDQ model the activations run dequantize -> hardswish /
SiLU / sigmoid (each op with its own Q/DQ pair, ONNX Runtime quantizes Mul, Add and Clip too) ->
quantize: tens of float operations and a division or exp per element. The function has 256
possible inputs, so the table is exact by construction: each entry is the fused body's own numpy
reference at that value, and the lookup reads one byte per element. (PP-OCRv4 det: those chains
took two thirds of its int8 time.)

Legality: the instruction is a static `fused_pointwise`; exactly one distinct input is not a
constant, it is 8-bit; every other input is a constant (a literal through movement ops) holding
one value. Per-channel constants (a batch norm's scale) keep the pointwise kernel.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.op import OpKind
from ..ops_int8 import ACT_TYPES, Int8Lookup

_VALUES = {DType.uint8: np.arange(256, dtype=np.uint8), DType.int8: np.arange(-128, 128, dtype=np.int8)}


def uniform_constant(ins: Instruction) -> np.ndarray | None:
    """The one value of `ins` (a 0-d array of its dtype) when it is a literal holding one value, read
    through single-input movement ops (broadcasts, transposes, reshapes); else None."""
    while not ins.is_literal:
        if ins.op.kind is not OpKind.MOVEMENT or len(ins.inputs) != 1 or ins.module_args:
            return None
        ins = ins.inputs[0]
    v = np.asarray(ins.literal)
    if v.size == 0 or not np.all(v == v.flat[0]):  # NaN != NaN: a NaN constant is left alone
        return None
    return np.asarray(v.flat[0])


def _table(ins: Instruction, x: Instruction) -> np.ndarray | None:
    values = _VALUES[x.shape.dtype]
    args = []
    for i in ins.inputs:
        if i is x:
            args.append(values)
            continue
        c = uniform_constant(i)
        if c is None:
            return None
        args.append(np.full(256, c, dtype=i.shape.dtype.np))
    table = np.asarray(ins.op.compute(args))
    return table.astype(ins.shape.dtype.np, copy=False) if table.shape == (256,) else None


def _tabulate(module: Module, ins: Instruction) -> bool:
    if ins.op.name != "fused_pointwise" or ins.shape.is_dynamic or ins.module_args:
        return False
    varying = {i.uid: i for i in ins.inputs if uniform_constant(i) is None}
    if len(varying) != 1:
        return False
    (x,) = varying.values()
    if x.shape.dtype not in ACT_TYPES or x.shape.lens != ins.shape.lens or x.shape.broadcasted:
        return False
    table = _table(ins, x)
    if table is None:
        return False
    module.replace(ins, module.insert(ins, Int8Lookup(), x, module.add_literal(table)))
    return True


def tabulate_int8(module: Module) -> bool:
    changed = False
    for ins in list(module):
        if ins.users:
            changed |= _tabulate(module, ins)
    return changed

"""Target-neutral recognition of the QDQ form around a quantized product (what ORT's quantize_static
and quantize_int8 / quantize_fp8 make): the targets' integer lowerings read their operands here.

    dequantize_linear(xq, s, z)        a per-tensor activation: (xq, s, z)
    [movement](dequantize_linear(wq, s, 0))   constant weights with one scale per output channel:
                                       (wq seen through the movement ops, the scales)

Scales and zero points are read from constants (literals through pointwise and movement ops: the
frontend's reshape + broadcast of a per-axis scale); anything not constant does not match.
"""

from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.module import Instruction
from ..ir.op import OpKind
from ..ir.shape import Shape
from ..ops.movement import Broadcast
from ..ops.quantize import DequantizeLinear

_CONST_KINDS = (OpKind.POINTWISE, OpKind.MOVEMENT)


def constant_value(ins: Instruction, memo: dict[int, np.ndarray | None]) -> np.ndarray | None:
    """The value of `ins` when it is computed from literals by pointwise and movement ops alone
    (the scale and zero point broadcasts, broadcast_like's too, a transposed weight), else None. Kept small: of `ins`'s
    rank, broadcasting to its lens (a broadcast scale stays one value)."""
    if ins.uid in memo:
        return memo[ins.uid]
    value = None
    if ins.is_literal:
        value = ins.literal
    elif ins.op.name == "broadcast_like" and isinstance(ins.shape, Shape):  # a dynamic program's scale
        v = constant_value(ins.inputs[0], memo)
        value = None if v is None or v.ndim > ins.shape.ndim else ranked(v, ins.shape.ndim)
    elif ins.op.kind in _CONST_KINDS and ins.inputs and not ins.module_args and isinstance(ins.shape, Shape):
        args = [constant_value(i, memo) for i in ins.inputs]
        if all(a is not None for a in args):
            if isinstance(ins.op, Broadcast):
                value = ranked(args[0], ins.shape.ndim)
            elif ins.op.kind is OpKind.POINTWISE:
                value = np.asarray(ins.op.compute([ranked(a, ins.shape.ndim) for a in args]))
            else:  # other movement: over the full values (weight-sized at most)
                value = np.asarray(ins.op.compute([np.broadcast_to(a, i.shape.lens) for a, i in zip(args, ins.inputs)]))
    memo[ins.uid] = value
    return value


def ranked(v: np.ndarray, ndim: int) -> np.ndarray:
    return v.reshape((1,) * (ndim - v.ndim) + v.shape)


def uniform(v: np.ndarray | None) -> float | None:
    """The one value all elements of `v` hold, else None."""
    if v is None or v.size == 0 or not np.all(v == v.flat[0]):
        return None
    return v.flat[0].item()


def per_axis(v: np.ndarray, axis: int, lens: tuple[int, ...]) -> np.ndarray | None:
    """The values along `axis` (broadcast to lens[axis]) when `v`, which broadcasts to `lens`, is
    constant along every other axis."""
    v = ranked(np.asarray(v), len(lens))
    m = np.moveaxis(v, axis, 0).reshape(v.shape[axis], -1)
    if not np.all(m == m[:, :1]):
        return None
    return np.broadcast_to(m[:, 0], (lens[axis],)).copy()


def dequantized_activation(ins: Instruction, memo, types: tuple[DType, ...]) -> tuple[Instruction, float, int] | None:
    """(the quantized tensor, scale, zero point) of a per-tensor dequantize to float32 of a `types`
    tensor, else None."""
    if not isinstance(ins.op, DequantizeLinear) or ins.op.to != DType.float32:
        return None
    xq = ins.inputs[0]
    s, z = uniform(constant_value(ins.inputs[1], memo)), uniform(constant_value(ins.inputs[2], memo))
    if xq.shape.dtype not in types or s is None or z is None or s <= 0:
        return None
    return xq, float(s), int(z)


def dequantized_weights(ins: Instruction, axis: int, memo, dtype: DType = DType.int8) -> tuple[np.ndarray, np.ndarray] | None:
    """(`dtype` values, float32 scale per output channel `axis`) of constant weights dequantized
    symmetrically, read through the movement ops between the dequantize and `ins` (Gemm's transB)."""
    path = []
    while ins.op.kind is OpKind.MOVEMENT and len(ins.inputs) == 1:
        path.append(ins)
        ins = ins.inputs[0]
    if not isinstance(ins.op, DequantizeLinear) or ins.inputs[0].shape.dtype != dtype:
        return None
    q, s, z = (constant_value(i, memo) for i in ins.inputs)
    if q is None or s is None or z is None:
        return None
    s, z = np.broadcast_to(s, q.shape), np.broadcast_to(z, q.shape)
    for mv in reversed(path):  # the same movement over values, scales and zero points
        q, s, z = (np.asarray(mv.op.compute([a])) for a in (q, s, z))
    scales = per_axis(np.asarray(s, np.float32), axis, q.shape)
    if scales is None or np.any(np.asarray(z, np.float32) != 0) or np.any(scales <= 0):
        return None  # blocked scales, or asymmetric weights
    return np.ascontiguousarray(q), scales

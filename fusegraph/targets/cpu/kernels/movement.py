"""Copies that rearrange elements: `contiguous` through oneDNN's reorder (3x numpy's strided copy: a
network input read channels-last, attention heads merged back), `concat` written straight into its
planned buffer. Other movement ops keep their numpy reference (see lowering.REFERENCE_KINDS)."""

from __future__ import annotations

import numpy as np

from ....errors import CompileError, InputError
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..lowering import Kernel, LowerContext, lowering, reference_kernel


@lowering("contiguous")
def contiguous(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    x = ins.inputs[0].shape
    if not isinstance(x, Shape) or x.is_dynamic or x.standard or x.broadcasted or x.elements == 0:
        return reference_kernel(ins, ctx)
    try:
        dtype = onednn.memory.dnnl_dtype(x.dtype.np)
        src = onednn.MemDesc.plain(x.lens, dtype, x.strides)
        # a copy is memory-bound: one thread moves it as fast as two on this machine's cores
        prim = onednn.Reorder(src, onednn.MemDesc.plain(x.lens, dtype), threads=1)
    except (CompileError, InputError):  # a dtype oneDNN does not have
        return reference_kernel(ins, ctx)
    lens, np_dtype, strides = x.lens, x.dtype.np, tuple(s * x.dtype.itemsize for s in x.strides)

    def run(args, out):
        a = args[0]
        if a.strides != strides and any(s != t for s, t, n in zip(a.strides, strides, lens) if n > 1):
            return np.ascontiguousarray(a) if out is None else _copy(out, a)  # not the layout planned
        return prim(a, out=np.empty(lens, np_dtype) if out is None else out)

    return run


def _copy(out: np.ndarray, a: np.ndarray) -> np.ndarray:
    np.copyto(out, a)
    return out


@lowering("concat")
def concat(ins: Instruction, ctx: LowerContext) -> Kernel:
    if not isinstance(ins.shape, Shape) or ins.shape.is_dynamic:
        return reference_kernel(ins, ctx)
    axis = ins.op.axis

    def run(args, out):
        if out is None:
            return np.concatenate(args, axis=axis)
        return np.concatenate(args, axis=axis, out=out)

    return run

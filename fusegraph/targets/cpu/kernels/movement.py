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


@lowering("pad")
def pad(ins: Instruction, ctx: LowerContext) -> Kernel:
    """Constant padding as a fill and a copy; reflect/edge/wrap as one gather per padded axis, the
    indices worked out here once (np.pad re-derives them, 50 us for silero-vad's 576 values)."""
    x, op = ins.inputs[0].shape, ins.op
    if not isinstance(x, Shape) or x.is_dynamic or x.elements == 0:
        return reference_kernel(ins, ctx)
    r, lens = x.ndim, x.lens
    begins, ends = op.pads[:r], op.pads[r:]
    if op.mode == "constant":
        inner = tuple(slice(b, b + n) for b, n in zip(begins, lens))
        fill = np.asarray(op.value).astype(x.dtype.np)

        def run_constant(args, out):
            if out is None:
                out = np.empty(ins.shape.lens, x.dtype.np)
            out.fill(fill)
            out[inner] = args[0]
            return out

        return run_constant
    # source index of each output position along every padded axis (numpy's own rule, on a ramp)
    gathers = [(axis, np.pad(np.arange(n), (b, e), mode=op.mode).astype(np.intp))
               for axis, (n, b, e) in enumerate(zip(lens, begins, ends)) if b or e]
    if not gathers:
        return reference_kernel(ins, ctx)
    *first, (last_axis, last_index) = gathers

    def run_gather(args, out):
        y = args[0]
        for axis, index in first:
            y = np.take(y, index, axis=axis)
        return np.take(y, last_index, axis=last_axis, out=out)

    return run_gather

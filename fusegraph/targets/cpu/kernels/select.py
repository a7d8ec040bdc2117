"""ArgMax/ArgMin and TopK with a static k on the cpu target: generated C (codegen/select.py) that
reads its input in place and joins native programs; the ops' numpy references for dynamic shapes, a
run-time k, dtypes the generator lacks, or an input laid out other than the IR promised."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from ....ir.module import Instruction
from ....ir.shape import Shape, TupleShape
from ..codegen import CodegenUnsupported
from ..codegen.select import arg_kernel, topk_kernel
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from ..native_program import kernel_call

_PTR = ctypes.c_void_p
_NO_DIMS = (ctypes.c_int64 * 1)(0)


def _static(ins: Instruction) -> bool:
    x = ins.inputs[0].shape
    outs = ins.shape.elements if isinstance(ins.shape, TupleShape) else (ins.shape,)
    return isinstance(x, Shape) and not x.is_dynamic and all(isinstance(s, Shape) and not s.is_dynamic for s in outs)


def _kernel(ins: Instruction, ctx: LowerContext, source) -> tuple[Callable[[], object], Callable[[np.ndarray], bool]]:
    """(the built kernel, once built; whether an input array is laid out as the kernel reads it)."""
    ctx.kernel_sources.append(source)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[source.name]))
    x = ins.inputs[0].shape
    lens, dtype = tuple(x.lens), x.dtype.np
    used = tuple((k, s * x.dtype.itemsize) for k, (n, s) in enumerate(zip(x.lens, x.strides)) if n != 1)

    def laid_out(a: np.ndarray) -> bool:
        return a.shape == lens and a.dtype == dtype and all(a.strides[k] == st for k, st in used)

    return (lambda: cell["kernel"]), laid_out


@lowering("argmax", "argmin")
def arg_reduce(ins: Instruction, ctx: LowerContext) -> Kernel:
    if not _static(ins):
        return reference_kernel(ins, ctx)
    x, op = ins.inputs[0].shape, ins.op
    try:
        source = arg_kernel(x.dtype, x.lens, x.strides, op.axis, op.name == "argmax", op.select_last_index)
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)
    kernel, laid_out = _kernel(ins, ctx, source)
    fallback = reference_kernel(ins, ctx)
    lens = ins.shape.lens

    def run(args, out):
        if not laid_out(args[0]):
            return fallback(args, out)
        if out is None:
            out = np.empty(lens, np.int64)
        k = kernel()
        k._fn((_PTR * 2)(out.ctypes.data, args[0].ctypes.data), _NO_DIMS, 1)
        return out

    def native(args, out):
        return [kernel_call(kernel()._fn, out.ctypes.data, [args[0].ctypes.data], (), 1)] if laid_out(args[0]) else None

    run.native = native  # type: ignore[attr-defined]
    return run


@lowering("top_k")
def top_k(ins: Instruction, ctx: LowerContext) -> Kernel:
    """Values and indices written into their planned buffers (plan_memory.TUPLE_WRITERS); an element
    nobody reads goes to an array of its own."""
    op = ins.op
    if op.k is None or op.k == 0 or len(ins.inputs) != 1 or not _static(ins):
        return reference_kernel(ins, ctx)
    x = ins.inputs[0].shape
    try:
        source = topk_kernel(x.dtype, x.lens, x.strides, op.axis, op.k, op.largest)
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)
    kernel, laid_out = _kernel(ins, ctx, source)
    fallback = reference_kernel(ins, ctx)
    values_shape, indices_shape = ins.shape.elements

    def buffers(out) -> tuple[np.ndarray, np.ndarray]:
        given = out if isinstance(out, tuple) else (None, None)
        return (given[0] if given[0] is not None else np.empty(values_shape.lens, values_shape.dtype.np),
                given[1] if given[1] is not None else np.empty(indices_shape.lens, np.int64))

    def run(args, out):
        if not laid_out(args[0]):
            return fallback(args, out)
        values, indices = buffers(out)
        kernel()._fn((_PTR * 3)(values.ctypes.data, args[0].ctypes.data, indices.ctypes.data), _NO_DIMS, 1)
        return values, indices

    def native(args, out):
        if not laid_out(args[0]):
            return None
        values, indices = buffers(out)  # (an unread element's array: scratch, kept alive by the call)
        record, keep = kernel_call(kernel()._fn, values.ctypes.data, [args[0].ctypes.data, indices.ctypes.data], (), 1)
        return [(record, (*keep, values, indices))]

    run.native = native  # type: ignore[attr-defined]
    return run

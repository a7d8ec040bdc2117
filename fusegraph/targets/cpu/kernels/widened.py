"""float16/bfloat16 products, convolutions and average poolings as ONNX Runtime's CPU provider runs
them: the half inputs widened to float32 (exact), oneDNN's float32 primitive, each result rounded to
the op's type, as the references (float32 accumulation, then a cast) round it. The conversions are
generated C (codegen/convert.py), the same in a step and in a native program."""

from __future__ import annotations

import threading

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..lowering import Kernel, LowerContext


def widened_convolution(ins: Instruction, w: np.ndarray, ctx: LowerContext) -> Kernel | None:
    """A float16/bfloat16 convolution as ONNX Runtime's CPU provider runs one (see `widened`)."""
    from ....errors import CompileError
    from .. import onednn

    x, y, op = ins.inputs[0].shape, ins.shape, ins.op
    if not isinstance(x, Shape) or x.is_dynamic:
        return None
    try:
        prim = onednn.Convolution(x.lens, np.asarray(w, np.float32), None, stride=op.stride, padding=op.padding,
                                  dilation=op.dilation, groups=op.group,
                                  threads=ctx.threads_for(2.0 * y.elements * w.size / w.shape[0]))
    except CompileError:  # (a geometry oneDNN has no fast kernel for)
        return None
    return widened(ins, prim, [0], ctx)


def widened_pooling(ins: Instruction, ctx: LowerContext) -> Kernel | None:
    """A float16/bfloat16 average pooling (float32 sums, ops/pool.py) as oneDNN's float32 one
    between conversions (see `widened`; a max pooling would need its NaN guard: the reference's)."""
    from ....errors import CompileError
    from .. import onednn
    from .dense import pooling_work

    x, op = ins.inputs[0].shape, ins.op
    if not isinstance(x, Shape) or x.is_dynamic or x.ndim not in (3, 4, 5):
        return None
    kernel, stride, padding = ((x.lens[2:], (1,) * (x.ndim - 2), (0,) * (2 * (x.ndim - 2))) if op.global_pool
                               else (op.lengths, op.stride, op.padding))
    try:
        prim = onednn.Pooling(x.lens, "average", kernel, stride=stride, padding=padding,
                              dilation=() if op.global_pool else op.dilation,
                              ceil_mode=op.ceil_mode and not op.global_pool, count_include_pad=op.count_include_pad,
                              threads=ctx.threads_for(pooling_work(ins.shape.elements, x.lens[2:], kernel, padding)))
    except CompileError:
        return None
    return widened(ins, prim, [0], ctx)


def widened_dot(ins: Instruction, ctx: LowerContext) -> Kernel | None:
    """A float16/bfloat16 product (float32 accumulation, ops/gemm.py) as a float32 oneDNN MatMul
    between conversions (see `widened`): its constant weights widened once."""
    from ....errors import CompileError
    from .. import onednn

    a, b = (i.shape for i in ins.inputs)
    if any(s.is_dynamic for s in (a, b, ins.shape)) or a.ndim < 2:
        return None
    w = ctx.const(ins.inputs[1])
    threads = ctx.threads_for(2.0 * ins.shape.elements * a.lens[-1])
    try:
        if w is not None:
            prim = onednn.MatMul(onednn.MemDesc.plain(a.lens, "f32"), np.asarray(w, np.float32), threads=threads)
            return widened(ins, prim, [0], ctx)
        if a.ndim != b.ndim:
            return None
        prim = onednn.MatMul(onednn.MemDesc.plain(a.lens, "f32"), onednn.MemDesc.plain(b.lens, "f32"), threads=threads)
    except CompileError:
        return None
    return widened(ins, prim, [0, 1], ctx)


def widened(ins: Instruction, prim, runtime: list[int], ctx: LowerContext) -> Kernel | None:
    """A float16/bfloat16 op as ONNX Runtime's CPU provider runs one: its inputs `runtime` (indices)
    widened to float32 (exact), `prim` (oneDNN, float32, standard layouts), the result rounded to the
    op's type, as the reference (float32 accumulation, then a cast) rounds it: generated conversions
    (codegen/convert.py) in a step and in a native program alike. Each thread has its float32
    scratch: a primitive's memory objects stay bound to the buffers it last ran on."""
    import ctypes

    from ..codegen.convert import convert_kernel

    shapes, y = [ins.inputs[k].shape for k in runtime], ins.shape
    if not all(isinstance(s, Shape) and s.dtype == y.dtype for s in shapes) or not y.standard:
        return None
    sources = [convert_kernel(y.dtype, DType.float32), convert_kernel(DType.float32, y.dtype)]
    ctx.kernel_sources.extend(sources)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(widen=ctx.library[sources[0].name], narrow=ctx.library[sources[1].name]))
    local = threading.local()
    ptrs = ctypes.c_void_p * 2
    sizes = [(ctypes.c_int64 * 1)(s.elements) for s in shapes]
    n_out = (ctypes.c_int64 * 1)(y.elements)

    def scratch() -> tuple[list[np.ndarray], np.ndarray]:
        if not hasattr(local, "buffers"):
            local.buffers = ([np.empty(s.lens, np.float32) for s in shapes], np.empty(y.lens, np.float32))
        return local.buffers

    def run(args, out):
        xs, ys = scratch()
        for k, x, n in zip(runtime, xs, sizes):
            a = np.ascontiguousarray(args[k])
            cell["widen"]._fn(ptrs(x.ctypes.data, a.ctypes.data), n, 1)
        prim(*xs, out=ys)
        out = np.empty(y.lens, y.dtype.np) if out is None else out
        cell["narrow"]._fn(ptrs(out.ctypes.data, ys.ctypes.data), n_out, 1)
        return out

    def native(args, out):
        from ..native_program import dense, kernel_call, primitive_call

        if not out.flags.c_contiguous:
            return None
        xs, ys = scratch()
        calls = []
        for k, x in zip(runtime, xs):
            d = dense(args[k])  # (a transposed key: a dense half copy first)
            if d is None:
                return None
            calls += d[1]
            record, objs = kernel_call(cell["widen"]._fn, x.ctypes.data, [d[0].ctypes.data], [x.size], 1)
            calls.append((record, (*objs, d[0])))
        return [*calls, primitive_call(prim, *xs, out=ys),
                kernel_call(cell["narrow"]._fn, out.ctypes.data, [ys.ctypes.data], [y.elements], 1)]

    run.native = native  # type: ignore[attr-defined]
    return run

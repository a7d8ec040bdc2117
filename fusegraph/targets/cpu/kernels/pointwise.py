"""Pointwise and reduction kernels: C generated from the ops' scalar bodies, compiled once per
program (one library), called on the arena buffers. Layouts the kernel was not generated for
(a producer that returned another layout) go through the kernel's general binding, or are copied
into the promised layout when theirs needs more dims than the kernel was generated for."""

from __future__ import annotations

import ctypes

import numpy as np

from ....ir.module import Instruction
from ....ir.op import OpKind, registered_ops
from ....ir.shape import Shape
from ....ops.scalar import Call, Const, Expr, Var
from ..codegen import CodegenUnsupported, pointwise_kernel_for, reduce_kernel, softmax_kernel
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from ..native_program import kernel_call
from .movement import folded_constant

_PTR = ctypes.c_void_p
_DIM = ctypes.c_int64


def _byte_strides(s: Shape) -> tuple[int, ...]:
    return tuple(x * s.dtype.itemsize for x in s.strides)


def compiled_kernel(ins: Instruction, ctx: LowerContext, source, dims, kept: list[int] | None = None) -> Kernel:
    """A step calling generated kernel `source` with the argument layout the IR promises; `kept`:
    the inputs it takes (the others' constant values are in its code), else all."""
    ctx.kernel_sources.append(source)
    lens, dtype = ins.shape.lens, ins.shape.dtype.np
    kept = list(range(len(ins.inputs))) if kept is None else kept
    expected = [(i.shape.lens, _byte_strides(i.shape), i.shape.dtype.np) for i in (ins.inputs[k] for k in kept)]
    # the fast path's check: shape, dtype and the strides of the dims longer than 1 (a size-1 dim's
    # stride is never used, and numpy gives such dims strides of its own)
    checks = [(lens_, dt, tuple((k, st) for k, (m, st) in enumerate(zip(lens_, strides)) if m != 1))
              for lens_, strides, dt in expected]
    n = 1 + len(kept)
    dims_arr = (_DIM * max(len(dims), 1))(*dims)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[source.name]))
    every = len(kept) == len(ins.inputs)

    def run(args, out):
        args = args if every else [args[k] for k in kept]
        if out is None:
            out = np.empty(lens, dtype)
        kernel = cell["kernel"]
        if all(a.shape == lens_ and a.dtype == dt and all(a.strides[k] == st for k, st in used)
               for a, (lens_, dt, used) in zip(args, checks)):
            kernel._fn((_PTR * n)(out.ctypes.data, *[a.ctypes.data for a in args]), dims_arr, kernel.threads)
        else:
            args = [np.asarray(a) for a in args]
            try:
                kernel(out, *args)
            except CodegenUnsupported:  # e.g. a broadcast_like of a dynamic value: strides known only now
                kernel(out, *[_in_layout(a, *e) for a, e in zip(args, expected)])
        return out

    def native(args, out):
        args = args if every else [args[k] for k in kept]
        if not all(a.shape == lens_ and a.dtype == dt and all(a.strides[k] == st for k, st in used)
                   for a, (lens_, dt, used) in zip(args, checks)):
            return None
        kernel = cell["kernel"]
        return [kernel_call(kernel._fn, out.ctypes.data, [a.ctypes.data for a in args], dims, kernel.threads)]

    run.native = native  # type: ignore[attr-defined]
    return run


def _in_layout(a: np.ndarray, lens, byte_strides, dtype) -> np.ndarray:
    """`a` as an array with exactly the `lens` and byte strides the IR promised (copied if needed)."""
    if a.shape == lens and a.strides == byte_strides and a.dtype == dtype:
        return a
    steps = [(n - 1) * s // dtype.itemsize for n, s in zip(lens, byte_strides) if n > 0]
    start = -sum(x for x in steps if x < 0)  # negative strides walk back from the start
    buf = np.empty(start + sum(abs(x) for x in steps) + 1, dtype)[start:]
    view = np.lib.stride_tricks.as_strided(buf, lens, byte_strides, writeable=True)
    view[...] = a
    return view


def pointwise(ins: Instruction, ctx: LowerContext) -> Kernel:
    if ins.shape.is_dynamic or any(not isinstance(i.shape, Shape) or i.shape.is_dynamic for i in ins.inputs):
        return reference_kernel(ins, ctx)
    expr, kept = constant_exponents(ins)
    try:
        src, layout = pointwise_kernel_for(expr, [ins.inputs[k].shape for k in kept], ins.shape,
                                           half_in_float32=ins.op.half_in_float32)
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)  # e.g. string or sub-byte dtypes: numpy is the kernel
    return compiled_kernel(ins, ctx, src, layout.dims(), kept)


def constant_exponents(ins: Instruction) -> tuple[Expr, list[int]]:
    """The body with each float input that is only ever a pow's exponent, and one constant value
    (a literal seen through broadcasts), written in as that value; and the inputs left. A literal
    exponent lets the C compiler fold fg_powf's branches (x^3: x * x * x) and vectorize the loop:
    GPT-2's tanh GELU read its 3 from memory and called powf's branch per element (12 -> 2 us)."""
    expr = ins.op.expr
    exponents: dict[int, float] = {}
    other: set[int] = set()

    def walk(e: Expr, exponent: bool) -> None:
        if isinstance(e, Var):
            (exponents.setdefault(e.index, 0.0) if exponent else other.add(e.index))
        elif isinstance(e, Call):
            for k, a in enumerate(e.args):
                walk(a, e.fn == "pow" and k == 1)

    walk(expr, False)
    fixed = {}
    for k in set(exponents) - other:
        x = ins.inputs[k]
        value = folded_constant(x) if x.shape.dtype.is_float else None
        if value is not None and value.size and np.all(value == value.flat[0]) and np.isfinite(value.flat[0]):
            fixed[k] = float(value.flat[0])
    if not fixed:
        return expr, list(range(len(ins.inputs)))
    kept = [k for k in range(len(ins.inputs)) if k not in fixed]
    index = {k: j for j, k in enumerate(kept)}

    def sub(e: Expr) -> Expr:
        if isinstance(e, Var):
            return Const(fixed[e.index]) if e.index in fixed else Var(index[e.index])
        return Call(e.fn, tuple(sub(a) for a in e.args)) if isinstance(e, Call) else e

    return sub(expr), kept


lowering(*[n for n, c in registered_ops().items() if c.kind is OpKind.POINTWISE])(pointwise)


@lowering("fused_reduce", "softmax", "log_softmax")
def reduction(ins: Instruction, ctx: LowerContext) -> Kernel:
    if ins.shape.is_dynamic or not isinstance(ins.shape, Shape):
        return reference_kernel(ins, ctx)
    try:
        if ins.op.name == "fused_reduce":
            src = reduce_kernel(ins.module_args[0], ins.op.axes)
        else:
            x = ins.inputs[0].shape  # maybe a view (a transpose): the kernel reads it in place
            src = softmax_kernel(x.dtype, x.lens, axis=ins.op.axis, log=ins.op.name == "log_softmax",
                                 strides=x.strides)
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)  # reductions over leading axes: numpy's
    return compiled_kernel(ins, ctx, src, ())


@lowering("reduce_sum", "reduce_mean", "reduce_max", "reduce_min")
def plain_reduce(ins: Instruction, ctx: LowerContext) -> Kernel:
    """A reduction fuse_reduce left alone (nothing to fuse with, or in a control-flow body, which
    the fusion passes do not visit): the generator of fused ones on a one-op body, as softmax's."""
    from ....ir.module import Module

    x = ins.inputs[0].shape
    if not isinstance(x, Shape) or x.is_dynamic or not isinstance(ins.shape, Shape):
        return reference_kernel(ins, ctx)
    body = Module(ins.op.name)
    body.add_return(body.add(ins.op, body.add_parameter("x0", x)))
    try:
        src = reduce_kernel(body, tuple(sorted(ins.op.axes)))
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)  # (e.g. reductions over leading axes: numpy's)
    return compiled_kernel(ins, ctx, src, ())


@lowering("moments")
def moments(ins: Instruction, ctx: LowerContext) -> Kernel:
    """float32 moments as two generated reductions, the mean and then the mean of (x - mean)^2 (or
    of x^2, uncentered), as the reference computes them, each written into its planned buffer
    (plan_memory.TUPLE_WRITERS): a LayerNorm whose statistics are read apart stays in C."""
    from types import SimpleNamespace

    from ....ir.dtypes import DType
    from ....ir.module import Module
    from ....ir.op import make_op

    x, op = ins.inputs[0].shape, ins.op
    if not isinstance(x, Shape) or x.is_dynamic or x.dtype != DType.float32:
        return reference_kernel(ins, ctx)
    axes = tuple(op.axes)
    red = Shape.of(x.dtype, [1 if k in axes else n for k, n in enumerate(x.lens)])
    first, second = Module("moments_mean"), Module("moments_second")
    first.add_return(first.add(make_op("reduce_mean", axes=axes), first.add_parameter("x0", x)))
    v = second.add_parameter("x0", x)
    if op.centered:
        mean = second.add(make_op("broadcast", out_lens=x.lens), second.add_parameter("x1", red))
        v = second.add(make_op("sub"), v, mean)
    second.add_return(second.add(make_op("reduce_mean", axes=axes), second.add(make_op("mul"), v, v)))
    try:
        sources = [reduce_kernel(first, axes), reduce_kernel(second, axes)]
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)
    steps = [compiled_kernel(SimpleNamespace(shape=red, inputs=[SimpleNamespace(shape=p.shape) for p in m.parameters]),
                             ctx, src, ()) for m, src in zip((first, second), sources)]
    centered = op.centered

    def run(args, out):
        mean, var = (np.empty(red.lens, np.float32) if out is None or o is None else o for o in (out or (None, None)))
        steps[0]([args[0]], mean)
        steps[1]([args[0], mean] if centered else [args[0]], var)
        return mean, var

    def native(args, out):
        mean, var = (np.empty(red.lens, np.float32) if o is None else o for o in out)  # (unread: scratch)
        a, b = steps[0].native([args[0]], mean), steps[1].native([args[0], mean] if centered else [args[0]], var)
        return None if a is None or b is None else [*a, (b[0][0], (*b[0][1], mean, var))]

    run.native = native  # type: ignore[attr-defined]
    return run

"""Copies that rearrange elements: `contiguous` through oneDNN's reorder (3x numpy's strided copy: a
network input read channels-last, attention heads merged back), `concat` written straight into its
planned buffer. Other movement ops keep their numpy reference (see lowering.REFERENCE_KINDS)."""

from __future__ import annotations

import numpy as np

from ....errors import CompileError, ExecutionError, FusegraphError, InputError
from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.op import OpKind
from ....ir.shape import Shape, same_steps
from ....ops.indexing import check_range
from ..lowering import Kernel, LowerContext, lowering, reference_kernel


@lowering("contiguous")
def contiguous(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    x = ins.inputs[0].shape
    if not isinstance(x, Shape) or x.is_dynamic or x.standard or x.broadcasted or x.elements == 0:
        run = reference_kernel(ins, ctx)  # in a native program: a table of offsets (a small broadcast)
        run.native = lambda args, out: _copy_any(out, args[0])  # type: ignore[attr-defined]
        return run
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
        if not same_steps(a.strides, strides, lens):
            return np.ascontiguousarray(a) if out is None else _copy(out, a)  # not the layout planned
        return prim(a, out=np.empty(lens, np_dtype) if out is None else out)

    def native(args, out):
        from ..native_program import primitive_call

        if same_steps(args[0].strides, strides, lens):
            return [primitive_call(prim, args[0], out=out)]
        return _copy_any(out, args[0])  # (a layout other than the one planned)

    run.native = native  # type: ignore[attr-defined]
    return run


def _copy_any(out: np.ndarray, a: np.ndarray):
    from ..native_program import copy_any

    return copy_any(out, a)


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

    def native(args, out):
        from ..native_program import copy_any

        calls, start = [], 0
        for a in args:  # each part into its slice of the output (YOLO's 18 concats between convs)
            part = out[(slice(None),) * axis + (slice(start, start + a.shape[axis]),)]
            start += a.shape[axis]
            if a.size and (c := copy_any(part, a)) is None:
                return None
            calls += c if a.size else []
        return calls

    run.native = native  # type: ignore[attr-defined]
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
                out = np.empty(ins.shape.lens, args[0].dtype)
            out.fill(fill)
            out[inner] = args[0]
            return out

        return with_take(run_constant, ins)
    # source index of each output position along every padded axis (numpy's own rule, on a ramp)
    gathers = [(axis, np.pad(np.arange(n), (b, e), mode=op.mode).astype(np.intp))
               for axis, (n, b, e) in enumerate(zip(lens, begins, ends)) if b or e]
    if not gathers:
        return reference_kernel(ins, ctx)
    return with_take(_gather_axes(gathers), ins)


@lowering("resize")
def resize(ins: Instruction, ctx: LowerContext) -> Kernel:
    """Nearest-neighbour resizes as one gather per resized axis, the source indices found once by
    running the op's own reference on an index ramp (YOLO's and PP-OCR's upsampling); integer
    upsampling as one broadcasting copy."""
    x, op = ins.inputs[0].shape, ins.op
    if (op.coordinate_transformation_mode == "tf_crop_and_resize"
            or not isinstance(x, Shape) or x.is_dynamic or x.elements == 0 or ins.shape.elements == 0):
        return reference_kernel(ins, ctx)
    if op.mode != "nearest":
        return _interpolating(ins, ctx)
    ramp = np.arange(x.elements, dtype=np.int64).reshape(x.lens)
    sources = np.unravel_index(op.compute([ramp]), x.lens)  # per output element, its source coordinates
    gathers = []
    for axis, (n_in, n_out) in enumerate(zip(x.lens, ins.shape.lens)):
        index = sources[axis][(0,) * axis + (slice(None),) + (0,) * (x.ndim - axis - 1)]
        if n_in != n_out or not np.array_equal(index, np.arange(n_in)):
            gathers.append((axis, np.ascontiguousarray(index, dtype=np.intp)))
    if not gathers:
        return reference_kernel(ins, ctx)
    if all(len(i) % x.lens[a] == 0 and np.array_equal(i, np.repeat(np.arange(x.lens[a]), len(i) // x.lens[a]))
           for a, i in gathers):
        return with_take(_repeat(x.lens, ins.shape.lens, [a for a, _ in gathers]), ins)
    return with_take(_gather_axes(gathers), ins)


def _interpolating(ins: Instruction, ctx: LowerContext) -> Kernel:
    """A float32 linear or cubic resize: generated C with the op's own per-axis taps (codegen/resize.py)."""
    from ..codegen import CodegenUnsupported
    from ..codegen.resize import resize_kernel
    from .pointwise import compiled_kernel

    x = ins.inputs[0].shape
    stages = ins.op.interpolated_axes(x.lens)
    if x.dtype != DType.float32 or not x.standard or not stages:  # (the kernel reads x contiguous)
        return reference_kernel(ins, ctx)
    try:
        source = resize_kernel(x.lens, stages)
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)
    return compiled_kernel(ins, ctx, source, ())


def with_take(run: Kernel, ins: Instruction, constants: list | None = None) -> Kernel:
    """`run` (a kernel whose every output element is one element of its first input, or a constant)
    with a C form for native programs: each output element's source, found once by running `run` on
    two index ramps (where they differ by one: that element's; else a constant, which a run on zeros
    gives), gathered through a table (native_program.take). `constants`: the other inputs' values,
    when they are fixed (else `run` must take the first input alone)."""
    from ..native_program import TAKE_LIMIT

    x = ins.inputs[0].shape
    if (not isinstance(x, Shape) or not isinstance(ins.shape, Shape) or x.is_dynamic or ins.shape.is_dynamic
            or not 0 < ins.shape.elements <= TAKE_LIMIT or x.elements >= 1 << 62):
        return run
    rest = constants or []
    ramp = np.arange(1, x.elements + 1, dtype=np.int64).reshape(x.lens)
    try:
        first, second = (np.asarray(run([r, *rest], None)) for r in (ramp, ramp + 1))
        fill = np.asarray(run([np.zeros(x.lens, x.dtype.np), *rest], None))
    except (ValueError, TypeError, FusegraphError):  # (a kernel that takes no integer ramp)
        return run
    if first.shape != ins.shape.lens or fill.shape != ins.shape.lens or first.dtype != np.int64:
        return run
    index = np.where(second - first == 1, first - 1, -1)

    def native(args, out):
        from ..native_program import take

        return take(out, args[0], index, fill)

    run.native = native  # type: ignore[attr-defined]
    return run


def _gather_axes(gathers: list[tuple[int, np.ndarray]]) -> Kernel:
    """One np.take per (axis, source indices) pair, the last into the planned output buffer."""
    *first, (last_axis, last_index) = gathers

    def run(args, out):
        y = args[0]
        for axis, index in first:
            y = np.take(y, index, axis=axis)
        return np.take(y, last_index, axis=last_axis, out=out)

    return run


def _repeat(in_lens, out_lens, axes) -> Kernel:
    """Every source element repeated k times along each resized axis (integer upsampling): one
    broadcasting copy, the output seen with a (n, k) pair of axes for each resized one."""
    out_view, in_view = [], []
    for a, (n_in, n_out) in enumerate(zip(in_lens, out_lens)):
        out_view += [n_in, n_out // n_in] if a in axes else [n_out]
        in_view += [n_in, 1] if a in axes else [n_in]

    def run(args, out):
        if out is None:
            out = np.empty(out_lens, args[0].dtype)
        np.copyto(out.reshape(out_view), args[0].reshape(in_view))
        return out

    return run


@lowering("gather")
def gather(ins: Instruction, ctx: LowerContext) -> Kernel:
    """numpy's take straight into the planned buffer: its negative indices count from the end, as
    ONNX's do (the reference first normalizes them: a copy more); the op's range check first, so an
    index out of range is its ExecutionError, not numpy's IndexError."""
    data = ins.inputs[0].shape
    if not isinstance(ins.shape, Shape) or ins.shape.is_dynamic or not isinstance(data, Shape) or data.is_dynamic:
        return reference_kernel(ins, ctx)  # (a static row of a dynamic tensor too: the best of the kept boxes)
    op = ins.op
    axis, n = op.axis, data.lens[op.axis]
    index = ctx.const(ins.inputs[1])
    if index is not None and _in_range(op, index, n):  # checked once (silero-vad's state[0]: 13 -> 3 us)
        def constant_index(args, out):
            if out is None:
                return np.take(args[0], index, axis=axis)
            return np.take(args[0], index, axis=axis, out=out)

        return with_take(constant_index, ins)

    def run(args, out):
        check_range(op, args[1], n)
        if out is None:
            return np.take(args[0], args[1], axis=axis)
        return np.take(args[0], args[1], axis=axis, out=out)

    def native(args, out):  # (the range check in C: an index out of range hands the step back to run)
        from ..native_indexing import gather as gather_call

        c = gather_call(out, args[0], args[1], axis)
        return None if c is None else [c]

    run.native = native  # type: ignore[attr-defined]
    return run


@lowering("gather_nd")
def gather_nd(ins: Instruction, ctx: LowerContext) -> Kernel:
    """The reference's gather (its range check raising the op's error); in a native program a C call
    that checks the indices first and copies a block a tuple (a graph network's edge lookup)."""
    run = reference_kernel(ins, ctx)
    if ins.op.batch_dims == 0 and isinstance(ins.shape, Shape) and not ins.shape.is_dynamic:
        def native(args, out):
            from ..native_indexing import gather_nd as gather_nd_call

            c = gather_nd_call(out, args[0], args[1])
            return None if c is None else [c]

        run.native = native  # type: ignore[attr-defined]
    return run


@lowering("gather_elements")
def gather_elements(ins: Instruction, ctx: LowerContext) -> Kernel:
    """The reference's gather; by constant indices (DeBERTa's relative positions: a literal seen
    through broadcasts) in a native program a table of offsets, checked once here; by run-time ones
    (an SSD head's boxes of its top scores) a C loop checking them first (indices laid out otherwise,
    a broadcast, copied dense)."""
    run = reference_kernel(ins, ctx)
    if ins.inputs[0].shape.is_dynamic or not isinstance(ins.shape, Shape) or ins.shape.is_dynamic:
        return run
    index = folded_constant(ins.inputs[1])
    if index is not None:
        return with_take(run, ins, [index]) if _in_range(ins.op, index, ins.inputs[0].shape.lens[ins.op.axis]) else run

    def native(args, out):
        from .. import native_indexing, native_program

        d = native_program.dense(args[1])
        c = None if d is None else native_indexing.gather_elements(out, args[0], d[0], ins.op.axis)
        return None if c is None else [*d[1], c]

    run.native = native  # type: ignore[attr-defined]
    return run


def folded_constant(ins: Instruction, depth: int = 8) -> np.ndarray | None:
    """The value of a literal, or of movement ops (reshapes, broadcasts) over one; else None."""
    if ins.is_literal:
        return np.asarray(ins.literal)
    if depth == 0 or ins.op.kind is not OpKind.MOVEMENT or not ins.op.deterministic or not ins.inputs:
        return None
    values = [folded_constant(x, depth - 1) for x in ins.inputs]
    return None if any(v is None for v in values) else np.asarray(ins.op.compute(values))


@lowering("scatter_nd", "scatter_elements")
def scatter(ins: Instruction, ctx: LowerContext) -> Kernel:
    """The reference's scatter; in a native program (float32) a copy of the data and a C loop over
    the indices, checked first, applied in order as numpy's ufunc.at applies them. Operands laid
    out otherwise (indices broadcast along the row: torch's scatter_add of a message matrix) are
    copied into dense scratch arrays first."""
    run = reference_kernel(ins, ctx)
    if isinstance(ins.shape, Shape) and not ins.shape.is_dynamic:
        def native(args, out):
            from .. import native_indexing, native_program

            copies, operands = [], []
            for a in args:
                d = native_program.dense(a)
                if d is None:
                    return None
                operands.append(d[0])
                copies += d[1]
            if ins.op.name == "scatter_nd":
                calls = native_indexing.scatter_nd(out, *operands, ins.op.reduction)
            else:
                calls = native_indexing.scatter_elements(out, *operands, ins.op.axis, ins.op.reduction)
            return None if calls is None else [*copies, *calls]

        run.native = native  # type: ignore[attr-defined]
    return run


def _in_range(op, index: np.ndarray, n: int) -> bool:
    """Whether constant indices are all in range (else the run-time check raises, naming the op)."""
    try:
        check_range(op, index, n)
    except ExecutionError:
        return False
    return True


@lowering("slice")
def slice_copy(ins: Instruction, ctx: LowerContext) -> Kernel:
    """numpy's slice copied into the planned buffer; in a native program the copy is C's (memcpy per
    row: the query, key and value columns of BERT's merged projection, between its oneDNN products)."""
    run = reference_kernel(ins, ctx)
    compute = ins.op.compute

    def native(args, out):
        view = compute([args[0]])
        if not isinstance(view, np.ndarray) or not np.shares_memory(view, args[0]):
            return None
        return _copy_any(out, view)  # (more than one strided level, a rotary embedding's halves: a table)

    run.native = native  # type: ignore[attr-defined]
    return run


@lowering("reshape", "flatten", "squeeze", "unsqueeze")
def reshape(ins: Instruction, ctx: LowerContext) -> Kernel:
    """A reshape the plan gave a buffer (its input is laid out otherwise than standard): one copy
    into that buffer seen with the input's lens, not numpy's copy and then a copy in. A view (no
    buffer) is numpy's reshape."""
    view = reference_kernel(ins, ctx)

    def run(args, out):
        if out is None:
            return view(args, out)
        np.copyto(out.reshape(np.shape(args[0])), args[0])
        return out

    def native(args, out):  # the same copy in C: a memcpy, rows of them, or a table of offsets
        return _copy_any(out.reshape(args[0].shape), args[0])

    run.native = native  # type: ignore[attr-defined]
    return run

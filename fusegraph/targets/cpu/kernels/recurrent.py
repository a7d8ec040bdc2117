"""LSTM, GRU and RNN as native kernels: the weights prepared once (W^T of every direction side by
side, R^T per direction, the biases that can be summed summed), then per call one product for the
input projections of every step and direction, and the recurrence in generated C (codegen/
recurrent.py: the state's product with R^T and the fused gates per step, directions on their own
threads). The numpy reference spent ~10 array operations a step (CRNN's 2-layer BiLSTM over 40
columns: 160 steps, most of the model's time). Dynamic shapes, weights computed at run time and
dtypes other than float32/float64 keep the reference."""

from __future__ import annotations

import ctypes

import numpy as np

from ....ir.module import Instruction
from ..codegen import CodegenUnsupported
from ..codegen.recurrent import recurrent_kernel
from ..lowering import SMALL_WORK, Kernel, LowerContext, lowering, reference_kernel

_PTR = ctypes.c_void_p
XW_ON_STACK = 16384  # elements of the projection a kernel keeps on its stack (64 KiB in float32)


@lowering("lstm", "gru", "rnn")
def recurrent(ins: Instruction, ctx: LowerContext) -> Kernel:
    op = ins.op
    x_shape = ins.inputs[0].shape
    weights = [ctx.const(i) for i in ins.inputs[1:op.n_weights]]  # W, R, B (and P)
    if x_shape.is_dynamic or any(w is None for w in weights):
        return reference_kernel(ins, ctx)
    w, r, b = weights[:3]
    peep = weights[3] if op.n_weights > 4 else None
    t_len, batch, n_in = x_shape.lens
    dtype, h, dirs = x_shape.dtype.np, op.hidden_size, op.num_directions
    gh = op.gates * h
    # a small input projection is the kernel's own loop (XW on its stack): no library call, no array
    inside = 2.0 * t_len * batch * n_in * dirs * gh < SMALL_WORK and t_len * batch * dirs * gh <= XW_ON_STACK
    try:
        source = recurrent_kernel(op, x_shape.dtype, t_len, batch, peepholes=peep is not None and bool(np.any(peep)),
                                  project=n_in if inside else 0)
    except CodegenUnsupported:
        return reference_kernel(ins, ctx)
    # Rb is summed into the projection's bias except GRU's linear-before-reset candidate bias, which
    # the reset gate scales (the kernel adds it to H Rh^T)
    summed = np.ones(gh, bool)
    if op.name == "gru" and op.linear_before_reset:
        summed[2 * h:] = False
    wt = np.ascontiguousarray(np.concatenate([w[k].T for k in range(dirs)], axis=1), dtype)  # [in, dirs*gh]
    bias = np.concatenate([b[k][:gh] + np.where(summed, b[k][gh:], 0) for k in range(dirs)]).astype(dtype)
    rt = np.ascontiguousarray(np.stack([r[k].T for k in range(dirs)]), dtype)  # [dirs, H, gh]
    rb = np.ascontiguousarray(b[:, gh:], dtype)
    pp = np.ascontiguousarray(peep if peep is not None else np.zeros((dirs, 3 * h)), dtype)
    k_lens = op.n_weights
    k_h0 = k_lens + op.has_sequence_lens
    k_c0 = k_h0 + op.has_initial_h
    ctx.kernel_sources.append(source)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[source.name]))
    threads = recurrence_threads(ctx, t_len * batch * dirs * (op.gates * h) * (h + (n_in if inside else 0)))
    dims = (ctypes.c_int64 * 1)(0)
    fixed = (rt, rb, pp)  # the kernel's constant arguments
    projection = (wt, bias) if inside else ()  # the kernel's own product's arguments (kept alive here)
    tail = tuple(a.ctypes.data for a in projection)
    project, prim = (None, None) if inside else _projection(wt, bias, t_len * batch, ctx)
    shapes = [(t_len, dirs, batch, h), (dirs, batch, h), (dirs, batch, h)][:op.n_states + 1]

    def optional(args):  # sequence_lens, initial_h, initial_c: an array or None
        return (np.ascontiguousarray(args[k_lens], np.int64) if op.has_sequence_lens else None,
                np.ascontiguousarray(args[k_h0], dtype) if op.has_initial_h else None,
                np.ascontiguousarray(args[k_c0], dtype) if op.has_initial_c else None)

    def run(args, out):
        kernel = cell["kernel"]
        x = np.ascontiguousarray(args[0]).reshape(t_len * batch, -1)
        xw = x if inside else project(x)  # every step's and direction's input projection: one product
        # the planned elements' buffers (plan_memory.TUPLE_WRITERS), else arrays of its own
        ys = [np.empty(sh, dtype) if out is None or out[k] is None else out[k] for k, sh in enumerate(shapes)]
        ptrs = (_PTR * 12)(xw.ctypes.data, *(a.ctypes.data for a in fixed),
                           *(None if a is None else a.ctypes.data for a in (*optional(args), *ys, None)[:6]), *tail)
        kernel._fn(ptrs, dims, threads)
        return tuple(ys)

    run.projection = projection  # type: ignore[attr-defined]

    def native(args, out):
        """The C calls over fixed buffers: [the projection's oneDNN product,] the kernel; the
        elements nobody reads go to this thread's scratch arrays."""
        from ..native_program import dense, kernel_call, primitive_call

        given = [args[0]] + [args[k] if f else None for k, f in (
            (k_lens, op.has_sequence_lens), (k_h0, op.has_initial_h), (k_c0, op.has_initial_c))]
        if (out is None or (not inside and prim is None)
                or any(a is not None and a.dtype != d for a, d in zip(given, (dtype, np.int64, dtype, dtype)))):
            return None
        calls, operands = [], []
        for a in given:  # (a strided one, a transposed sequence, copied into a dense scratch first)
            d = None if a is None else dense(a)
            if a is not None and d is None:
                return None
            operands.append(None if d is None else d[0])
            calls += [] if d is None else d[1]
        ys = [np.empty(sh, dtype) if out[k] is None else out[k] for k, sh in enumerate(shapes)]
        x = xw = operands[0].reshape(t_len * batch, n_in)
        if not inside:
            xw = np.empty((t_len * batch, dirs * gh), dtype)
            calls.append(primitive_call(prim, x, out=xw))
        kernel = cell["kernel"]
        ptrs = [a.ctypes.data for a in fixed] + [
            0 if a is None else a.ctypes.data for a in (*operands[1:], *ys, None)[:6]] + list(tail)
        record, keep = kernel_call(kernel._fn, xw.ctypes.data, ptrs, dims, threads)
        return [*calls, (record, (*keep, operands, xw, ys))]

    run.native = native  # type: ignore[attr-defined]
    return run


def recurrence_threads(ctx: LowerContext, multiply_adds: int) -> int:
    """Threads for a recurrence's two directions: one below SMALL_WORK, where waking the other
    thread (asleep, or descheduled on a busy machine) costs more than its half: a two-layer
    BiLSTM over 12 steps of 16 units took 0.49 ms at two threads on the loaded VM, 0.02 at one."""
    return ctx.threads_for(2.0 * multiply_adds)


def _projection(wt: np.ndarray, bias: np.ndarray, rows: int, ctx: LowerContext):
    """x[rows, in] -> x @ wt + bias, and the oneDNN primitive doing it (None for numpy's product):
    for float32 a oneDNN matmul with the weights packed once (its
    threads are the generated kernels' OpenMP pool; numpy's BLAS would bring a second, competing
    pool: on the loaded 2-core VM a [40, 128] @ [128, 1024] took 56 ms there against 0.25 ms on one
    thread)."""
    flops = 2.0 * rows * wt.shape[0] * wt.shape[1]
    # below SMALL_WORK (a streaming cell's one step: silero-vad's [1, 256] @ [256, 512]) BLAS runs one
    # thread and oneDNN's call costs more than the product: 0.118 -> ms a step with it, 0.086 without
    if wt.dtype != np.float32 or flops < SMALL_WORK:
        return (lambda x: np.add(np.matmul(x, wt), bias)), None
    from .. import onednn

    prim = onednn.MatMul((rows, wt.shape[0]), wt, bias, threads=ctx.threads_for(flops))
    return (lambda x: prim(x)), prim

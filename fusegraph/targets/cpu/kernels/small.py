"""Tiny convolutions in numpy: im2col as one gather through indices worked out at compile time,
then one BLAS product. Below a few hundred thousand multiply-adds oneDNN's cost per call (25-50 us
on the 2-core VM, and its reference kernel for shapes like silero-vad's 128 -> 1 head: 130 us with
the op's reference) is most of the time; this way silero-vad's 1-D convs take a few microseconds.

Also the numpy form of an epilogue chain for kernels that apply it after the product: each step
compiled once into numpy calls (the same functions the reference evaluates), in place.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence

import numpy as np

from ....ops.conv import window_attrs
from ....ops.scalar import SCALAR_FUNCS, Call, Const, Expr, Var
from ..ops import RESIDUAL, Activation, activation_expr

SMALL_CONV = 1e6  # multiply-adds under which a convolution with constant weights runs here


def _compile(e: Expr) -> Callable[[np.ndarray], np.ndarray]:
    """`e` over x0 as nested numpy calls (no tree walk per call)."""
    if isinstance(e, Var):
        return lambda x: x
    if isinstance(e, Const):
        v = e.value
        return lambda x: v
    assert isinstance(e, Call)
    fn = SCALAR_FUNCS[e.fn].numpy
    args = [_compile(a) for a in e.args]
    if len(args) == 1:
        (a,) = args
        return lambda x: fn(a(x))
    if len(args) == 2:
        a, b = args
        return lambda x: fn(a(x), b(x))
    return lambda x: fn(*[f(x) for f in args])


# steps computed in place, as the reference computes them (relu: max(x, 0); linear: x * a + b)
_IN_PLACE = {
    "relu": lambda y, a, b: np.maximum(y, 0, out=y),
    "linear": lambda y, a, b: np.add(np.multiply(y, a, out=y), b, out=y),
}


def numpy_chain(activations: Sequence[Activation]) -> Callable[[np.ndarray, Sequence[np.ndarray]], None]:
    """chain(y, residuals): the epilogue's steps applied to `y` in place (ops.apply_chain's math)."""
    steps = []
    for name, a, b in activations:
        if name == RESIDUAL:
            steps.append(None)
        elif name in _IN_PLACE:
            fn = _IN_PLACE[name]
            steps.append(lambda y, fn=fn, a=a, b=b: fn(y, a, b))
        else:
            expr = _compile(activation_expr(name, a, b))
            steps.append(lambda y, expr=expr: np.copyto(y, expr(y)))

    def chain(y: np.ndarray, residuals: Sequence[np.ndarray]) -> None:
        pending = iter(residuals)
        for step in steps:
            if step is None:
                y += next(pending)
            else:
                step(y)

    return chain


def small_conv(x_lens: Sequence[int], w: np.ndarray, bias: np.ndarray | None, op, activations: Sequence[Activation],
               out_lens: Sequence[int]) -> Callable:
    """fn(x, out, residuals) for a convolution of N, C, *spatial input `x_lens` with weights `w`."""
    n, c, *sp = x_lens
    m, cg, *ks = w.shape
    g = op.group
    idx = tap_table(x_lens, w.shape, op, out_lens)
    (taps, s_out), s_in = idx.shape, math.prod(sp)
    wg = np.ascontiguousarray(w.reshape(g, m // g, cg * taps))
    b = None if bias is None else bias.reshape(1, g, m // g, 1).astype(w.dtype)
    chain = numpy_chain(activations)
    padding = bool((idx == s_in).any())
    direct = not padding and taps == 1 and s_out == s_in and (idx[0] == np.arange(s_in)).all()  # 1x1, stride 1
    unrolled = _unrolled(w, idx, s_in) if g == 1 and s_in * s_out <= taps else None

    def run(x: np.ndarray, out: np.ndarray, residuals: Sequence[np.ndarray]) -> np.ndarray:
        y = out.reshape(n, g, m // g, s_out)
        if unrolled is not None:
            np.matmul(x.reshape(n, c * s_in), unrolled, out=out.reshape(n, m * s_out))
        else:
            if direct:
                cols = x.reshape(n, g, cg, s_in)
            elif padding:
                padded = np.empty((n, c, s_in + 1), w.dtype)
                padded[:, :, s_in] = 0  # the column padding reads
                padded[:, :, :s_in] = x.reshape(n, c, s_in)
                cols = padded[:, :, idx].reshape(n, g, cg * taps, s_out)
            else:
                cols = x.reshape(n, c, s_in)[:, :, idx].reshape(n, g, cg * taps, s_out)
            np.matmul(wg, cols, out=y)
        if b is not None:
            y += b
        chain(out, residuals)
        return out

    return run


def tap_table(x_lens: Sequence[int], w_lens: Sequence[int], op, out_lens: Sequence[int]) -> np.ndarray:
    """idx[tap, o]: the flat input position tap `tap` of output `o` reads, or S_IN (the number of
    input positions: a zero) where it reads padding."""
    sp, ks, out_sp = list(x_lens[2:]), list(w_lens[2:]), list(out_lens[2:])
    pb, _, strides, dils = window_attrs(op, len(sp))
    s_in, taps, s_out = math.prod(sp), math.prod(ks), math.prod(out_sp)
    # taps and outputs in row-major order (np.ndindex's), all at once (a per-position loop: 0.25 s of a
    # YOLOv8n compile, for its 8400-anchor head)
    col = (-1, 1, 1)
    pos = np.indices(out_sp, np.intp).reshape(len(sp), 1, s_out)
    offs = np.indices(ks, np.intp).reshape(len(sp), taps, 1)
    src = pos * np.reshape(strides, col) - np.reshape(pb, col) + offs * np.reshape(dils, col)
    inside = ((src >= 0) & (src < np.reshape(sp, col))).all(axis=0)
    idx = np.where(inside, np.ravel_multi_index(tuple(src), sp, mode="clip"), s_in).astype(np.intp)
    return idx


def c_small_conv(ins, w: np.ndarray, bias: np.ndarray | None, activations: Sequence[Activation], ctx) -> Callable:
    """A step running a tiny float32 convolution as generated C (codegen/small_conv.py), with its
    C form for native programs."""
    from ..codegen import small_conv1d
    from ..codegen.small_conv import small_conv_kernel
    from ..native_program import kernel_call

    x_lens, lens = ins.inputs[0].shape.lens, ins.shape.lens
    n, c, m, g = x_lens[0], x_lens[1], w.shape[0], ins.op.group
    # a 1-D signal of more positions than output channels a group (an ECG, a text CNN) or of most of a
    # vector: register tiles of channels x positions (codegen/small_conv1d.py); else (silero-vad's
    # STFT: 3 positions, 129 channels, or an input too long for the tiles' stack scratch) the output
    # channels innermost
    one_d = len(x_lens) == 3 and lens[2] >= min(m // g, small_conv1d.MOST_OF_A_VECTOR)
    if one_d:
        pb, _, (stride,), (dil,) = window_attrs(ins.op, 1)
        one_d = small_conv1d.fits(c // g, m // g, w.shape[2], lens[2], stride, dil)
    if one_d:
        src = small_conv1d.small_conv1d_kernel(n, c, x_lens[2], g, m, w.shape[2], lens[2], stride, dil, pb[0],
                                               bias is not None, activations)
        wt = small_conv1d.kernel_weights(np.asarray(w, np.float32), g, w.shape[2], lens[2], stride, dil)
        idx = np.zeros(1, np.int64)  # no tap table
    else:
        idx = np.ascontiguousarray(tap_table(x_lens, w.shape, ins.op, lens), np.int64)
        taps, s_out = idx.shape
        src = small_conv_kernel(n, c, math.prod(x_lens[2:]), g, m, taps, s_out, bias is not None, activations)
        # [G, CG * TAPS, MG]: a tap's weights for every output channel of its group side by side
        wt = np.ascontiguousarray(w.reshape(g, m // g, -1).transpose(0, 2, 1), np.float32)
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))
    b = np.ascontiguousarray(bias if bias is not None else np.zeros(1), np.float32)
    consts = (wt, b, idx)
    k = 2 + (bias is not None)
    dims = (ctypes.c_int64 * 1)(0)

    last: list = [((), None)]  # the last call's addresses and pointer array (a thread's arena repeats them)

    def run(args, out):
        if out is None:
            out = np.empty(lens, np.float32)
        operands = [np.ascontiguousarray(args[0]), *consts, *[np.ascontiguousarray(r) for r in args[k:]]]
        addresses = (out.ctypes.data, *[a.ctypes.data for a in operands])
        seen, ptrs = last[0]  # one read: another thread may replace it meanwhile
        if addresses != seen:
            ptrs = (ctypes.c_void_p * len(addresses))(*addresses)
            last[0] = addresses, ptrs
        cell["kernel"]._fn(ptrs, dims, 1)
        return out

    def native(args, out):
        from ..native_program import dense_all

        made = dense_all([args[0], *args[k:]])  # (a transposed input: copied into a dense scratch first)
        if made is None:
            return None
        operands, calls = made
        x, *residuals = operands
        record, keep = kernel_call(cell["kernel"]._fn, out.ctypes.data,
                                   [a.ctypes.data for a in (x, *consts, *residuals)], (), 1)
        return [*calls, (record, (*keep, operands))]

    run.native = native  # type: ignore[attr-defined]
    return run


def small_max_pool(ins, kernel: Sequence[int], ctx) -> Callable:
    """A small max pooling on N, C, *spatial as generated C, with its C form for native programs:
    a signal's windows as contiguous runs (codegen/small_conv1d.py), others' as a table of input
    positions (codegen/small_conv.py; p[2], which the 1-D kernel does not read)."""
    from ..codegen import small_conv1d
    from ..codegen.small_conv import small_max_pool_kernel
    from ..native_program import kernel_call

    x_lens, lens = ins.inputs[0].shape.lens, ins.shape.lens
    rows = x_lens[0] * x_lens[1]
    one_d = len(x_lens) == 3  # a signal: contiguous runs per tap (codegen/small_conv1d.py)
    if one_d:
        pb, _, (stride,), (dil,) = window_attrs(ins.op, 1)
        layout = small_conv1d.phase_layout(kernel[0], lens[2], stride, dil)
        one_d = layout.floats <= small_conv1d.SCRATCH
    if one_d:
        src = small_conv1d.small_max_pool1d_kernel(rows, x_lens[2], kernel[0], lens[2], stride, dil, pb[0])
        idx = np.zeros(1, np.int64)  # no tap table
    else:
        idx = np.ascontiguousarray(tap_table(x_lens, (1, 1, *kernel), ins.op, lens), np.int64)
        src = small_max_pool_kernel(rows, math.prod(x_lens[2:]), idx.shape[0], idx.shape[1])
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))
    dims = (ctypes.c_int64 * 1)(0)

    def run(args, out):
        out = np.empty(lens, np.float32) if out is None else out
        x = np.ascontiguousarray(args[0])
        cell["kernel"]._fn((ctypes.c_void_p * 3)(out.ctypes.data, x.ctypes.data, idx.ctypes.data), dims, 1)
        return out

    def native(args, out):
        if not args[0].flags.c_contiguous:
            return None
        record, keep = kernel_call(cell["kernel"]._fn, out.ctypes.data, [args[0].ctypes.data, idx.ctypes.data], (), 1)
        return [(record, (*keep, idx))]

    run.native = native  # type: ignore[attr-defined]
    return run


def _unrolled(w: np.ndarray, idx: np.ndarray, s_in: int) -> np.ndarray:
    """The convolution with weights `w` [M, C, *kernel] (one group) and taps `idx` (see small_conv)
    as one matrix [C * s_in, M * s_out] over the whole flattened input. Where input and output
    positions are few (s_in * s_out <= taps: silero-vad's last encoder convs, 2 or 1 positions in,
    1 out) it holds no more weights than im2col's product reads, and needs no gather: 11.5 -> 5.7 us
    a call on the 2-core VM."""
    m, c = w.shape[:2]
    taps, s_out = idx.shape
    full = np.zeros((c, s_in + 1, m, s_out), w.dtype)  # position s_in: padding, dropped below
    wt = w.reshape(m, c, taps).transpose(1, 2, 0)  # [C, taps, M]
    for t in range(taps):
        for o in range(s_out):
            full[:, idx[t, o], :, o] += wt[:, t]
    return np.ascontiguousarray(full[:, :s_in].reshape(c * s_in, m * s_out))

"""A 3 x 3 convolution by Winograd's minimal filtering (codegen/winograd.py, chosen by
passes/choose_winograd.py): the input transform (generated C), a^2 products in one call of oneDNN's
batched matmul over the weights transformed once, the output transform with the bias and the
epilogue chain (generated C). The transformed tiles live in this thread's scratch, one buffer shared
by every such step of the program (`WinogradScratch`), not in the memory plan: they live only while
the step runs.

An input or residual holding a NaN or an infinity runs the direct convolution (`direct`): the
transforms would spread it over whole tiles, and an infinity minus itself is a NaN the reference has
not. Natively (native_program.py) the same choice is a `guarded` call.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable

import numpy as np

from ....ir.module import Instruction
from ....ops.conv import window_attrs
from ..lowering import Kernel, LowerContext
from .epilogue import finite


class WinogradScratch:
    """One float32 buffer per thread, as large as the largest step's transformed input and products
    (`reserve` at lowering, before any run), shared by the steps one after another."""

    def __init__(self) -> None:
        self.floats = 0
        self.local = threading.local()

    def reserve(self, floats: int) -> None:
        self.floats = max(self.floats, floats)

    def buffer(self) -> np.ndarray:
        from ..onednn.memory import aligned_empty

        buf = getattr(self.local, "buf", None)
        if buf is None or buf.size < self.floats:
            buf = self.local.buf = aligned_empty(4 * self.floats, np.float32, (self.floats,))
        return buf


def winograd_conv(ins: Instruction, w: np.ndarray, bias: np.ndarray | None, ctx: LowerContext,
                  direct: Kernel) -> Kernel:
    """The step of a conv_epilogue marked `winograd` (its tile size m), `direct` for non-finite inputs."""
    from .. import onednn
    from ..codegen import winograd as codegen

    op, m = ins.op, ins.op.winograd
    n, h, wd, c = ins.inputs[0].shape.lens
    _, ho, wo, k = ins.shape.lens
    (pt, pl), _, _, _ = window_attrs(op, 2)
    th, tw = math.ceil(ho / m), math.ceil(wo / m)
    a2, tiles = (m + 2) ** 2, n * th * tw
    sources = (codegen.input_kernel(n, h, wd, c, m, pt, pl, th, tw),
               codegen.output_kernel(n, ho, wo, k, m, th, tw, bias is not None, op.activations))
    ctx.kernel_sources.extend(sources)
    fns: list = []
    ctx.deferred.append(lambda: fns.extend(ctx.library[s.name]._fn for s in sources))
    threads = ctx.threads_for(2.0 * a2 * tiles * c * k)
    gemm = onednn.MatMul((a2, tiles, c), codegen.weights(w, m), threads=threads)
    if ctx.scratch is None:
        ctx.scratch = WinogradScratch()
    scratch = ctx.scratch
    scratch.reserve(a2 * tiles * (c + k))
    b = np.ascontiguousarray(bias if bias is not None else np.zeros(1), np.float32)
    first_residual = 2 + op.has_bias
    lens = ins.shape.lens

    def buffers() -> tuple[np.ndarray, np.ndarray]:
        buf = scratch.buffer()
        v = buf[:a2 * tiles * c].reshape(a2, tiles, c)
        return v, buf[v.size:v.size + a2 * tiles * k].reshape(a2, tiles, k)

    def addresses(out: np.ndarray, x: np.ndarray, residuals, v: np.ndarray, products: np.ndarray):
        return ((v.ctypes.data, [x.ctypes.data]),
                (out.ctypes.data, [products.ctypes.data, b.ctypes.data, *[r.ctypes.data for r in residuals]]))

    def run(args, out):
        x, residuals = args[0], args[first_residual:]
        if not finite(x, *residuals):
            return direct(args, out)
        if out is None:
            out = np.empty(lens, np.float32)
        x, residuals = np.ascontiguousarray(x), [np.ascontiguousarray(r) for r in residuals]
        v, products = buffers()
        (vo, vi), (oo, oi) = addresses(out, x, residuals, v, products)
        _call(fns[0], vo, vi, threads)
        gemm(v, out=products)
        _call(fns[1], oo, oi, threads)
        return out

    def native(args, out):
        from ..native_finite import finite_or_exact
        from ..native_program import dense_all, kernel_call, primitive_call

        made = dense_all([args[0], *args[first_residual:]])
        if made is None or not out.flags.c_contiguous:
            return None
        operands, copies = made
        x, *residuals = operands
        v, products = buffers()
        (vo, vi), (oo, oi) = addresses(out, x, residuals, v, products)
        fast = [*copies, kernel_call(fns[0], vo, vi, (), threads), primitive_call(gemm, v, out=products),
                kernel_call(fns[1], oo, oi, (), threads)]
        fast[-1] = (fast[-1][0], (*fast[-1][1], b, operands))  # kept alive with the table
        exact = direct.native(args, out) if hasattr(direct, "native") else None
        return finite_or_exact([args[0], *args[first_residual:]], fast, exact)

    run.native = native  # type: ignore[attr-defined]
    return run


def _call(fn: Callable, out: int, inputs: list[int], threads: int) -> None:
    ptrs = (ctypes.c_void_p * (1 + len(inputs)))(out, *inputs)
    fn(ptrs, (ctypes.c_int64 * 1)(0), threads)

"""A 3 x 3 convolution by Winograd's minimal filtering (codegen/winograd.py, chosen by
passes/choose_winograd.py): the input transform (generated C), a^2 products in one call of oneDNN's
batched matmul over the weights transformed once, the output transform with the bias and the
epilogue chain (generated C), the three for each pass of at most CHUNK_TILES output tiles. The transformed tiles live in this thread's scratch, one buffer shared
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

# Output tiles a pass takes through the three steps. A large batch's V and M (a^2 x tiles x channels:
# 29 MB at ResNet-50's first stage at batch 8) left the cache between the steps; on the 2-core VM,
# stage 1 at batch 8 (1568 tiles) took 5.8 ms in one pass, 3.9-4.4 in passes of 196-392 tiles, stage
# 2 (392 tiles) 4.3 against 3.0-3.7 (against 8.4-8.9 direct); fewer tiles a pass thin the products.
CHUNK_TILES = 256


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
            buf.fill(0)  # a short last pass multiplies rows it leaves unread: finite ones, never denormal garbage
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
    chunks = chunks_of(tiles)
    rows = chunks[0][1]  # V's and M's rows: the largest chunk's tiles
    sources = (codegen.input_kernel(h, wd, c, m, pt, pl, th, tw, rows),
               codegen.output_kernel(ho, wo, k, m, th, tw, rows, bias is not None, op.activations))
    ctx.kernel_sources.extend(sources)
    fns: list = []
    ctx.deferred.append(lambda: fns.extend(ctx.library[s.name]._fn for s in sources))
    threads = ctx.threads_for(2.0 * a2 * rows * c * k)
    gemm = onednn.MatMul((a2, rows, c), codegen.weights(w, m), threads=threads)
    if ctx.scratch is None:
        ctx.scratch = WinogradScratch()
    scratch = ctx.scratch
    scratch.reserve(a2 * rows * (c + k))
    b = np.ascontiguousarray(bias if bias is not None else np.zeros(1), np.float32)
    first_residual = 2 + op.has_bias
    lens = ins.shape.lens

    def buffers() -> tuple[np.ndarray, np.ndarray]:
        buf = scratch.buffer()
        v = buf[:a2 * rows * c].reshape(a2, rows, c)
        return v, buf[v.size:v.size + a2 * rows * k].reshape(a2, rows, k)

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
        for chunk in chunks:
            _call(fns[0], vo, vi, chunk, threads)
            gemm(v, out=products)
            _call(fns[1], oo, oi, chunk, threads)
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
        fast = list(copies)
        for chunk in chunks:
            fast += [kernel_call(fns[0], vo, vi, chunk, threads), primitive_call(gemm, v, out=products),
                     kernel_call(fns[1], oo, oi, chunk, threads)]
        fast[-1] = (fast[-1][0], (*fast[-1][1], b, operands))  # kept alive with the table
        exact = direct.native(args, out) if hasattr(direct, "native") else None
        return finite_or_exact([args[0], *args[first_residual:]], fast, exact)

    run.native = native  # type: ignore[attr-defined]
    return run


def chunks_of(tiles: int) -> list[tuple[int, int]]:
    """(first tile, tiles) of each pass over `tiles` output tiles: one where they fit CHUNK_TILES'
    half again, else as few passes of at most CHUNK_TILES as even as can be (the first the largest)."""
    count = 1 if tiles <= CHUNK_TILES * 3 // 2 else math.ceil(tiles / CHUNK_TILES)
    size = math.ceil(tiles / count)
    return [(t, min(size, tiles - t)) for t in range(0, tiles, size)]


def _call(fn: Callable, out: int, inputs: list[int], chunk: tuple[int, int], threads: int) -> None:
    ptrs = (ctypes.c_void_p * (1 + len(inputs)))(out, *inputs)
    fn(ptrs, (ctypes.c_int64 * 2)(*chunk), threads)

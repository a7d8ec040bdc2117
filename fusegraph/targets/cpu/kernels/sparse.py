"""Sparse weights on the cpu target: y = x @ W for a constant W with few nonzeros, in C (sparse_c.py).

W [K, N] is packed once, at compile, by output column (the CSR form of W transposed: for column n
the rows k of its nonzeros, ascending, and their values), split into segments of KB rows and laid
out in the order the kernel reads them. A run packs x [M, K] k-major into panels of 16 to 64 rows,
and each nonzero of a column feeds a few vector FMAs over a panel (sparse_c.py says how). The order
of every sum depends on the packing only, so results do not depend on the thread count.

The dot and dot_epilogue lowerings (kernels/dense.py) time this against oneDNN's dense product at
compile and keep the faster (`choose`): sparsity pays only past a density that depends on the
machine and the shape. `sparse_matmul` (ops/sparse.py: a sparse constant's values and indices, or
a weight the model marked sparse) is packed straight from its operands and always runs sparse.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ....ir.dtypes import DType
from ..codegen.build import build_library
from ..codegen.kernels import KernelSource
from ..lowering import lowering
from . import sparse_c

MAX_DENSITY = 0.5  # denser weights are not even tried: the dense kernels win by far
MARGIN = 0.9  # the sparse kernel must win by 10 %: timing noise must not flip the choice between compiles

_P = ctypes.c_void_p
_I = ctypes.c_int64


@dataclass(frozen=True)
class _Library:
    fn: Callable[..., None]
    width: int  # floats in one vector of the build (16 with AVX-512)


@functools.cache
def _library() -> _Library:
    src = KernelSource(name="fg_spmm_f32", code=sparse_c.SOURCE, helpers=(), in_dtypes=(DType.float32,),
                       out_dtype=DType.float32)
    lib = build_library([src])
    fn = lib.kernels["fg_spmm_f32"]._fn
    fn.argtypes = [_P, _P, _I, _I, _I, _P, _I, _P, _P, _P, _I, ctypes.c_int]
    fn.restype = None
    width = ctypes.CDLL(str(lib.path)).fg_spmm_vector_floats
    width.restype = ctypes.c_int
    return _Library(fn, int(width()))


def _aligned(size: int, align: int = 64) -> np.ndarray:
    """`size` float32 starting on an `align`-byte boundary: the kernel's 64-byte vector loads of a
    panel row then never straddle two cache lines (numpy's large buffers start 16 bytes past a page,
    where every such load straddled two: a third of the kernel's time)."""
    raw = np.empty(size + align // 4, np.float32)
    skip = (-raw.ctypes.data % align) // 4
    return raw[skip:skip + size]


_LOCAL = threading.local()  # per thread: its packing buffer, shared by every sparse product it runs


def _scratch(size: int) -> np.ndarray:
    """This thread's buffer for packed activations, kept between calls (a fresh one each call cost
    its page faults every run: 5 ms of a 2048 x 2048 input's 16 MB here) and shared by the sparse
    products the thread runs, one at a time."""
    buf = getattr(_LOCAL, "buf", None)
    if buf is None or buf.size < size:
        buf = _LOCAL.buf = _aligned(size)
    return buf[:size]


def density(w: np.ndarray) -> float:
    return float(np.count_nonzero(w)) / max(w.size, 1)


class SparseWeights:
    """W [K, N] packed by output column; `__call__(x, out)` computes x @ W for x [..., K]."""

    def __init__(self, w: np.ndarray, threads: int):
        if w.ndim != 2 or w.dtype != np.float32:
            raise ValueError(f"sparse weights are float32 matrices, got {w.dtype}{list(w.shape)}")
        flat = np.flatnonzero(w)
        self._pack(w.reshape(-1)[flat], flat, *w.shape, threads)

    @classmethod
    def from_coo(cls, values: np.ndarray, indices: np.ndarray, k: int, n: int, threads: int) -> SparseWeights:
        """W [k, n] given by its `values` at flat row-major `indices` (a sparse constant's form,
        ops/sparse.py), packed without making W dense; a repeated index keeps its last value."""
        last = len(indices) - 1 - np.unique(np.asarray(indices)[::-1], return_index=True)[1]
        self = cls.__new__(cls)
        self._pack(np.asarray(values, np.float32)[last], np.asarray(indices, np.int64)[last], k, n, threads)
        return self

    def _pack(self, vals: np.ndarray, flat: np.ndarray, k: int, n: int, threads: int) -> None:
        """The nonzeros ordered by (block of NB columns, block of KB rows, column, row): the segments
        the kernel reads one after another lie one after another, so they stream from memory as one
        (read column by column, the 32 columns of a block were 32 streams, one jump each per row
        block). seg[(b * nkb + kb) * NB + c] is where segment (b, kb, column b * NB + c) starts."""
        self.k, self.n = k, n
        self._lib = _library()
        self.kb = kb = max(sparse_c.block_rows(k, self._lib.width, len(flat) / max(k * n, 1)), 1)
        nb = sparse_c.NB
        self.nkb, blocks = max(-(-k // kb), 1), -(-n // nb)
        cols, rows = flat % max(n, 1), flat // max(n, 1)
        segment = ((cols // nb) * self.nkb + rows // kb) * nb + cols % nb
        order = np.lexsort((rows, segment))  # by segment, then ascending k within it
        counts = np.bincount(segment, minlength=blocks * self.nkb * nb)
        self.seg = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.rows = rows[order].astype(np.int32)
        self.vals = vals[order].astype(np.float32)
        self.nnz = int(self.vals.size)
        self.threads = threads

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        lead = x.shape[:-1]
        m = int(np.prod(lead)) if lead else 1
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(m, self.k)
        if out is None or not out.flags.c_contiguous:
            target = np.empty((*lead, self.n), np.float32)
        else:
            target = out
        r = sparse_c.panel_vectors(m, self._lib.width)
        rows = r * self._lib.width
        packed = _scratch(-(-m // rows) * rows * self.k)  # x in panels of `rows` rows
        self._lib.fn(x2.ctypes.data, target.ctypes.data, m, self.k, self.n, self.seg.ctypes.data, self.nkb,
                     self.rows.ctypes.data, self.vals.ctypes.data, packed.ctypes.data, r, self.threads)
        if out is not None and target is not out:
            out[...] = target
            return out
        return target


def _fastest_times(fns: tuple[Callable[[], object], ...], reps: int) -> list[float]:
    """Each function's fastest of `reps` runs, the functions alternating: on a shared machine other
    work only ever adds time, and alternating spreads a burst of it over both sides (timed one after
    the other, a burst could fall on one side and flip the choice)."""
    for fn in fns:
        fn()  # warm: caches, page faults, OpenMP team
    best = [float("inf")] * len(fns)
    for _ in range(reps):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def choose(dense: Callable[[np.ndarray], object], sparse: Callable[[np.ndarray], object], x_lens: tuple[int, ...],
           reps: int = 5) -> tuple[bool, float, float]:
    """Whether the sparse product beats `dense` on an input of `x_lens` (and both fastest times)."""
    x = np.random.default_rng(0).standard_normal(x_lens).astype(np.float32)
    t_dense, t_sparse = _fastest_times((lambda: dense(x), lambda: sparse(x)), reps)
    return t_sparse < MARGIN * t_dense, t_dense, t_sparse


@lowering("sparse_matmul")
def sparse_matmul(ins, ctx) -> Callable:
    """The sparse kernel straight from the op's values and indices, or from its dense weight's
    nonzeros (asked for by the model: not timed against a dense product); float32 with constant
    weights, else the op's numpy reference."""
    from ..lowering import reference_kernel

    a, *weights = ins.inputs
    consts = [ctx.const(w) for w in weights]
    if ins.shape.dtype != DType.float32 or any(c is None for c in consts) or any(x.shape.is_dynamic for x in (ins, a)):
        return reference_kernel(ins, ctx)
    flops = 2.0 * (ins.shape.elements // max(ins.shape.lens[-1], 1)) * np.count_nonzero(consts[0])
    threads = ctx.threads_for(flops)
    kernel = SparseWeights(consts[0], threads) if len(consts) == 1 else \
        SparseWeights.from_coo(consts[0], consts[1], ins.op.k, ins.op.n, threads)
    return lambda args, out: kernel(args[0], out)


def sparse_dot(ins, ctx, w: np.ndarray, dense: Callable) -> Callable | None:
    """The sparse kernel for dot `ins` with constant weights `w`, if it times faster than `dense`
    (the oneDNN step, `dense(args, out)`); None to keep the dense one."""
    if w.ndim != 2 or w.dtype != np.float32 or density(w) > MAX_DENSITY:
        return None
    a = ins.inputs[0]
    flops = 2.0 * ins.shape.elements * a.shape.lens[-1]
    kernel = SparseWeights(w, ctx.threads_for(flops))
    faster, _, _ = choose(lambda x: dense([x], None), kernel, tuple(a.shape.lens))
    return (lambda args, out: kernel(args[0], out)) if faster else None


def sparse_dot_epilogue(ins, ctx, w: np.ndarray, bias: np.ndarray | None, dense: Callable) -> Callable | None:
    """The sparse product, then the bias and the epilogue's whole chain in numpy, for dot_epilogue
    `ins` with constant weights `w`, if it times faster than `dense` (the oneDNN step with the chain
    in its post-ops, `dense(args, out)`); None to keep the dense one."""
    if w.ndim != 2 or w.dtype != np.float32 or density(w) > MAX_DENSITY:
        return None
    from .dense import Chain

    a = ins.inputs[0]
    flops = 2.0 * ins.shape.elements * a.shape.lens[-1]
    kernel = SparseWeights(w, ctx.threads_for(flops))
    chain = Chain(ins.op.activations, post=False)  # every step after the product, as the reference
    lens, product = ins.shape.lens, (*a.shape.lens[:-1], w.shape[1])

    def run(args, out):
        out, residuals = chain.destination(out, lens, np.float32, args)
        y = out.reshape(product)  # a view: the destination is dense
        kernel(args[0], y)
        if bias is not None:
            y += bias
        chain.finish(out, residuals)
        return out

    rng = np.random.default_rng(0)
    rest = [x for x in (bias,) if x is not None] + [rng.standard_normal(lens).astype(np.float32)
                                                     for _ in range(ins.op.n_residual)]
    faster, _, _ = choose(lambda x: dense([x, w, *rest], None), lambda x: run([x, w, *rest], None), tuple(a.shape.lens))
    return run if faster else None

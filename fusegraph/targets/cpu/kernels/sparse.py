"""Sparse weights on the cpu target: y = x @ W for a constant W with few nonzeros, in C.

W [K, N] is packed once, at compile, by output column (the CSR form of W transposed: for column n
the rows k of its nonzeros, ascending, and their values). A run packs x [M, K] into tiles of 8 or 64
rows laid out k-major, so the terms of one column over a tile are contiguous, which the compiler
vectorizes, and a tile stays in cache while a block of 64 columns reads it. Each output element adds
its terms in ascending k, one rounding each (no FMA contraction: -ffp-contract=off), so results do
not depend on the thread count. For M = 1 each column is a gathered dot product.

The dot and dot_epilogue lowerings (kernels/dense.py) time this against oneDNN's dense product at
compile and keep the faster (`choose`): sparsity pays only past a density that depends on the
machine and the shape. `sparse_matmul` (ops/sparse.py: a sparse constant's values and indices, or
a weight the model marked sparse) is packed straight from its operands and always runs sparse.
"""

from __future__ import annotations

import ctypes
import functools
import time
from collections.abc import Callable

import numpy as np

from ....ir.dtypes import DType
from ..codegen.build import build_library
from ..codegen.kernels import KernelSource
from ..lowering import lowering

MAX_DENSITY = 0.5  # denser weights are not even tried: the dense kernels win by far
_KB = 512  # rows of a tile read at a time when K is large: 512 x 64 floats = 128 KiB, half an L2
_KB_FROM = 1024  # up to this K the whole tile (256 KiB at most) is read in one block: fewer partial sums
MARGIN = 0.9  # the sparse kernel must win by 10 %: timing noise must not flip the choice between compiles

_SOURCE = r"""
/* x [M, K] is packed into tiles of T rows, xp[tile][k][t] (zero-padded), so the terms of one output
   column over a tile are T contiguous floats: acc[0..T) += v * xp[tile][k][0..T) vectorizes, and a
   block of 64 columns reads the tile KB rows at a time (kptr: where each column's nonzeros cross a
   multiple of KB), so the KB x T rows in use stay in L1/L2 whatever K is; a column's partial sums
   wait in `part` between row blocks, which keeps each sum in ascending k. */
typedef float fg_v8 __attribute__((vector_size(32)));  /* 8 floats: one AVX register where there is one */
typedef float fg_v8u __attribute__((vector_size(32), aligned(4)));  /* the same, read unaligned */
#define FG_SPMM(T)                                                                                    \
static void fg_spmm_t##T(const float* x, float* y, int64_t M, int64_t K, int64_t N,                   \
                         const int64_t* kptr, int64_t nkb, const int32_t* rows, const float* vals,     \
                         float* xp, int threads) {                                                    \
    const int64_t tiles = (M + T - 1) / T, NB = 64, blocks = (N + NB - 1) / NB;                       \
    _Pragma("omp parallel num_threads(threads)")                                                      \
    {                                                                                                 \
        _Pragma("omp for collapse(2) schedule(static)")                                               \
        for (int64_t i = 0; i < tiles; i++)                                                           \
            for (int64_t k = 0; k < K; k++)                                                           \
                for (int64_t t = 0; t < T; t++) {                                                     \
                    const int64_t m = i * T + t;                                                      \
                    xp[(i * K + k) * T + t] = m < M ? x[m * K + k] : 0.0f;                            \
                }                                                                                     \
        _Pragma("omp for collapse(2) schedule(dynamic, 1)")                                           \
        for (int64_t i = 0; i < tiles; i++)                                                           \
            for (int64_t b = 0; b < blocks; b++) {                                                    \
                const int64_t tm = M - i * T < T ? M - i * T : T;                                     \
                const float* tile = xp + i * K * T;                                                   \
                const int64_t n1 = (b + 1) * NB < N ? (b + 1) * NB : N;                               \
                fg_v8 part[64 * (T / 8)]; /* the block's columns over this tile, summed so far */    \
                for (int64_t q = 0; q < (n1 - b * NB) * (T / 8); q++) part[q] = (fg_v8){0};           \
                for (int64_t kb = 0; kb < nkb; kb++)                                                  \
                    for (int64_t n = b * NB; n < n1; n++) {                                           \
                        fg_v8 acc[T / 8];                                                             \
                        fg_v8* keep = part + (n - b * NB) * (T / 8);                                  \
                        for (int q = 0; q < T / 8; q++) acc[q] = keep[q];                             \
                        const int64_t* at = kptr + n * (nkb + 1) + kb;                                \
                        for (int64_t j = at[0]; j < at[1]; j++) {                                     \
                            const fg_v8 v = (fg_v8){0} + vals[j];                                     \
                            const fg_v8u* xr = (const fg_v8u*)(tile + (int64_t)rows[j] * T);          \
                            for (int q = 0; q < T / 8; q++) acc[q] += v * xr[q];                      \
                        }                                                                             \
                        for (int q = 0; q < T / 8; q++) keep[q] = acc[q];                             \
                    }                                                                                 \
                for (int64_t n = b * NB; n < n1; n++) {                                               \
                    const float* a = (const float*)(part + (n - b * NB) * (T / 8));                   \
                    for (int64_t t = 0; t < tm; t++) y[(i * T + t) * N + n] = a[t];                   \
                }                                                                                     \
            }                                                                                         \
    }                                                                                                 \
}
FG_SPMM(8)
FG_SPMM(64)

__attribute__((visibility("default")))
void fg_spmm_f32(const float* x, float* y, int64_t M, int64_t K, int64_t N, const int64_t* indptr,
                 const int64_t* kptr, int64_t nkb, const int32_t* rows, const float* vals, float* xp,
                 int threads) {
    if (M == 1) {  /* one gathered dot product per column */
        #pragma omp parallel for num_threads(threads) schedule(static) if (N * 64 > 32768)
        for (int64_t n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int64_t j = indptr[n]; j < indptr[n + 1]; j++) acc += vals[j] * x[rows[j]];
            y[n] = acc;
        }
    } else if (M <= 32) {
        fg_spmm_t8(x, y, M, K, N, kptr, nkb, rows, vals, xp, threads);
    } else {
        fg_spmm_t64(x, y, M, K, N, kptr, nkb, rows, vals, xp, threads);
    }
}
"""


def _tile(m: int) -> int:
    return 1 if m == 1 else 8 if m <= 32 else 64


_P = ctypes.c_void_p
_I = ctypes.c_int64


@functools.cache
def _library():
    src = KernelSource(name="fg_spmm_f32", code=_SOURCE, helpers=(), in_dtypes=(DType.float32,),
                       out_dtype=DType.float32)
    fn = build_library([src]).kernels["fg_spmm_f32"]._fn
    fn.argtypes = [_P, _P, _I, _I, _I, _P, _P, _I, _P, _P, _P, ctypes.c_int]
    fn.restype = None
    return fn


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
        self.k, self.n = k, n
        cols, rows = flat % max(n, 1), flat // max(n, 1)
        order = np.lexsort((rows, cols))  # by column, then ascending k within it
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=n))]).astype(np.int64)
        self.rows = rows[order].astype(np.int32)
        self.vals = vals[order].astype(np.float32)
        # per column, where its nonzeros cross each multiple of kb rows (rows ascend within a column)
        kb = self.k if self.k <= _KB_FROM else _KB
        self.nkb = max(-(-self.k // max(kb, 1)), 1)
        cols = np.repeat(np.arange(self.n), np.diff(self.indptr))
        counts = np.zeros((self.n, self.nkb), np.int64)
        np.add.at(counts, (cols, self.rows // max(kb, 1)), 1)
        self.kptr = np.concatenate([self.indptr[:-1, None], self.indptr[:-1, None] + np.cumsum(counts, axis=1)],
                                   axis=1).astype(np.int64).reshape(-1)
        self.nnz = int(self.vals.size)
        self.threads = threads
        self._fn = _library()

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        lead = x.shape[:-1]
        m = int(np.prod(lead)) if lead else 1
        x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(m, self.k)
        if out is None or not out.flags.c_contiguous:
            target = np.empty((*lead, self.n), np.float32)
        else:
            target = out
        t = _tile(m)
        packed = np.empty(-(-m // t) * t * self.k, np.float32)  # x in tiles of t rows
        self._fn(x2.ctypes.data, target.ctypes.data, m, self.k, self.n, self.indptr.ctypes.data,
                 self.kptr.ctypes.data, self.nkb, self.rows.ctypes.data, self.vals.ctypes.data, packed.ctypes.data,
                 self.threads)
        if out is not None and target is not out:
            out[...] = target
            return out
        return target


def _median_time(fn: Callable[[], object], reps: int) -> float:
    fn()  # warm: caches, page faults, OpenMP team
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def choose(dense: Callable[[np.ndarray], object], sparse: Callable[[np.ndarray], object], x_lens: tuple[int, ...],
           reps: int = 5) -> tuple[bool, float, float]:
    """Whether the sparse product beats `dense` on an input of `x_lens` (and both median times)."""
    x = np.random.default_rng(0).standard_normal(x_lens).astype(np.float32)
    t_dense = _median_time(lambda: dense(x), reps)
    t_sparse = _median_time(lambda: sparse(x), reps)
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

"""Straight-line runs of native steps as one C call: a native program.

A small model's run is mostly the Python between its kernels (silero-vad: ~25 steps of a few
microseconds each, ppocr_cls: 70 oneDNN and generated kernels). Where consecutive steps all have a
C form over buffers that stay where they are (a thread's arena, the weights), their calls are
written once per thread into a table of `fg_call` records, and a run walks the table in C
(`fg_run_calls`): one ctypes call for the region instead of a Python step per kernel.

A kernel offers its C form as `fn.native(args, out) -> list[Call] | None`, asked once per thread
with the step's fixed arrays (None: not for these buffers, the step stays a Python one):
- `kernel_call`: a generated kernel (codegen: `void k(void *const *p, const int64_t *d, int nt)`);
- `primitive_call`: a oneDNN primitive through dnnl_primitive_execute, the ABI its Python
  binding calls through ctypes, with the thread's memory objects bound once;
- `guard`: a float32 buffer must hold no NaN or infinity, else the region stops there: that step
  runs as a Python step (which then takes its exact, non-finite-safe path), and the table goes on
  after it;
- `guarded`: a step's fast calls where its float32 inputs hold no NaN or infinity, else its exact
  ones, in C (native_finite.py);
- `copy`: a memcpy into a dense buffer, from a dense or a row-strided one (a column slice);
- `take`: elements gathered by a table of offsets (a small pad, gather or resize), fills copied in;
- `gather`: blocks picked by run-time indices (an embedding lookup); an index out of range stops
  the region like a guard, and the step's Python form raises its error (native_indexing.py: the
  gathers and scatters by run-time indices);
- `loop`, `copy_at`, `branch`: control flow (native_control.py).
The results are bit for bit the Python steps': the same kernels on the same buffers, in order.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import FusegraphError
from ...ir import run_limits

KERNEL, PRIMITIVE, GUARD, COPY, COPY_ROWS = 0, 1, 2, 3, 4
TAKE = {1: 5, 2: 6, 4: 7, 8: 8}  # by element size
GATHER, GATHER_ND, SCATTER_ND, SCATTER_ELEMENTS, GATHER_ELEMENTS = 9, 10, 11, 12, 16  # native_indexing.py
LOOP, COPY_AT, IF = 13, 14, 15  # native_control.py
GUARDED, RELU, NAN_MAX_POOL = 17, 18, 19  # native_finite.py
NO_BOUND = (1 << 63) - 1
TAKE_LIMIT = 1 << 16  # elements: a take's table is 16 bytes an element
MIN_STEPS = 1  # one step too: a oneDNN step binds its buffers through ctypes on every Python call (~3 us), a region did once

RUNNER = r"""
#include <stdint.h>
#include <string.h>
#include <omp.h>
#define FG_EXPORT __attribute__((visibility("default")))
typedef struct { int32_t kind, threads; void *fn, *a, *b, *c; int64_t n; } fg_call;
typedef void (*fg_kernel)(void *const *, const int64_t *, int);
typedef int (*fg_execute)(void *, void *, int, void *);

#define FG_TAKE(W) { \
    const int64_t *g = (const int64_t *)c->c; \
    for (int64_t k = 0; k < c->n; k++) ((W *)c->a)[g[c->n + k]] = *(const W *)((const char *)c->b + g[k]); }

/* n tuples of g[0] int64 indices, each in [-length, length) of its axis (g[2 + k]) */
static int fg_nd_in_range(const int64_t *idx, int64_t n, const int64_t *g) {
    for (int64_t k = 0; k < n * g[0]; k++) {
        const int64_t len = g[2 + k % g[0]];
        if (idx[k] < -len || idx[k] >= len) return 0;
    }
    return 1;
}

/* the block tuple t addresses (negative indices from the end; g[2 + K + k]: axis k's stride) */
static int64_t fg_nd_at(const int64_t *idx, int64_t t, const int64_t *g) {
    const int64_t K = g[0];
    int64_t at = 0;
    for (int64_t k = 0; k < K; k++) {
        const int64_t j = idx[t * K + k];
        at += (j + (j < 0 ? g[2 + k] : 0)) * g[2 + K + k];
    }
    return at;
}

/* *dst = b, or reduced with it (1 add, 2 mul, 3 max, 4 min; numpy's maximum and minimum keep a NaN) */
static inline void fg_reduce_into(float *dst, float b, int64_t red) {
    const float a = *dst;
    *dst = red == 0 ? b : red == 1 ? a + b : red == 2 ? a * b : (a != a || b != b) ? a + b
         : red == 3 ? (b > a ? b : a) : (b < a ? b : a);
}

/* n int64 indices, each in [-len, len) */
static int fg_in_range(const int64_t *idx, int64_t n, int64_t len) {
    for (int64_t k = 0; k < n; k++)
        if (idx[k] < -len || idx[k] >= len) return 0;
    return 1;
}

/* BODY for each element k of [outer, m, inner] indices along an axis of length len: j, its index
   there (a negative one from the end) */
#define FG_ALONG_AXIS(BODY) \
    for (int64_t o = 0; o < outer; o++) \
        for (int64_t a = 0; a < m; a++) \
            for (int64_t e = 0; e < inner; e++) { \
                const int64_t k = (o * m + a) * inner + e, j = idx[k] + (idx[k] < 0 ? len : 0); \
                BODY; \
            }

static int fg_all_finite(const uint32_t *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (x[i] & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

/* Runs calls[0..n) in order, in iteration t of the loop around them (0 outside any); returns n, or
   the index of the call that stopped it with *status set (-1: a guard found a NaN or infinity, or a
   gather an index out of range; > 0: oneDNN's error status). */
static int64_t fg_run(const fg_call *calls, int64_t n, int32_t *status, int64_t t) {
    for (int64_t i = 0; i < n; i++) {
        const fg_call *c = calls + i;
        switch (c->kind) {
        case 0: ((fg_kernel)c->fn)((void *const *)c->a, (const int64_t *)c->b, c->threads); break;
        case 1: {
            omp_set_num_threads(c->threads);  /* per calling thread, as the Python binding sets it */
            int st = ((fg_execute)c->fn)(c->a, c->b, (int)c->n, c->c);
            if (st) { *status = st; return i; }
            break;
        }
        case 2: if (!fg_all_finite((const uint32_t *)c->a, c->n)) { *status = -1; return i; } break;
        case 3: memcpy(c->a, c->b, (size_t)c->n); break;
        case 4: {  /* n rows of c[0] bytes, c[1] bytes apart in the source, c[2] in the destination */
            const int64_t *g = (const int64_t *)c->c;
            for (int64_t r = 0; r < c->n; r++) memcpy((char *)c->a + r * g[2], (const char *)c->b + r * g[1], (size_t)g[0]);
            break;
        }
        /* n elements of 1, 2, 4 or 8 bytes: the destination's k-th is the source's element at byte
           offset c[k] (c[n + k] its place in the destination, in elements) */
        case 5: FG_TAKE(uint8_t) break;
        case 6: FG_TAKE(uint16_t) break;
        case 7: FG_TAKE(uint32_t) break;
        case 8: FG_TAKE(uint64_t) break;
        case 9: {  /* gather: n indices (fn, int32 or int64) into an axis of a dense tensor; c: geometry
                      [outer, block bytes, axis length, index size]; an index out of range stops here */
            const int64_t *g = (const int64_t *)c->c;
            const int64_t outer = g[0], block = g[1], len = g[2];
            for (int64_t k = 0; k < c->n; k++) {
                const int64_t j = g[3] == 8 ? ((const int64_t *)c->fn)[k] : ((const int32_t *)c->fn)[k];
                if (j < -len || j >= len) { *status = -1; return i; }
            }
            for (int64_t o = 0; o < outer; o++)
                for (int64_t k = 0; k < c->n; k++) {
                    int64_t j = g[3] == 8 ? ((const int64_t *)c->fn)[k] : ((const int32_t *)c->fn)[k];
                    j += j < 0 ? len : 0;
                    memcpy((char *)c->a + (o * c->n + k) * block, (const char *)c->b + (o * len + j) * block, (size_t)block);
                }
            break;
        }
        case 10: {  /* gather_nd: n tuples of K int64 indices (fn) into the leading axes of a dense
                       tensor; c: [K, block bytes, the K axis lengths, their strides in blocks] */
            const int64_t *g = (const int64_t *)c->c, *idx = (const int64_t *)c->fn;
            if (!fg_nd_in_range(idx, c->n, g)) { *status = -1; return i; }
            for (int64_t t = 0; t < c->n; t++)
                memcpy((char *)c->a + t * g[1], (const char *)c->b + fg_nd_at(idx, t, g) * g[1], (size_t)g[1]);
            break;
        }
        case 11: {  /* scatter_nd of float32: out (a) holds the data already (a copy call before);
                       n tuples of K int64 indices (fn); c: [K, block elements, the K axis lengths,
                       their strides in blocks, reduction (0 none, 1 add, 2 mul, 3 max, 4 min),
                       address of the updates]; applied in order, as numpy's ufunc.at */
            const int64_t *g = (const int64_t *)c->c, *idx = (const int64_t *)c->fn;
            const int64_t K = g[0], block = g[1], red = g[2 + 2 * K];
            const float *u = (const float *)(intptr_t)g[3 + 2 * K];
            if (!fg_nd_in_range(idx, c->n, g)) { *status = -1; return i; }
            for (int64_t t = 0; t < c->n; t++) {
                float *dst = (float *)c->a + fg_nd_at(idx, t, g) * block;
                for (int64_t e = 0; e < block; e++) fg_reduce_into(dst + e, u[t * block + e], red);
            }
            break;
        }
        case 12: {  /* scatter_elements of float32 along an axis: out (a) holds the data already;
                       indices (fn, int64) and updates [outer, n, inner]; c: [outer, n, inner, the
                       axis's length, reduction, address of the updates]; in order, as ufunc.at */
            const int64_t *g = (const int64_t *)c->c, *idx = (const int64_t *)c->fn;
            const int64_t outer = g[0], m = g[1], inner = g[2], len = g[3], red = g[4];
            const float *u = (const float *)(intptr_t)g[5];
            if (!fg_in_range(idx, c->n, len)) { *status = -1; return i; }
            FG_ALONG_AXIS(fg_reduce_into((float *)c->a + (o * len + j) * inner + e, u[k], red))
            break;
        }
        case 16: {  /* gather_elements along an axis: out (a) [outer, m, inner] of c[4]-byte elements
                       from data (b) [outer, len, inner] at the int64 indices (fn, like out); c:
                       [outer, m, inner, len, element size]; an index out of range stops here */
            const int64_t *g = (const int64_t *)c->c, *idx = (const int64_t *)c->fn;
            const int64_t outer = g[0], m = g[1], inner = g[2], len = g[3], size = g[4];
            if (!fg_in_range(idx, c->n, len)) { *status = -1; return i; }
            FG_ALONG_AXIS(memcpy((char *)c->a + k * size, (const char *)c->b + ((o * len + j) * inner + e) * size,
                                 (size_t)size))
            break;
        }
        case 13: {  /* a loop: the n calls at fn run *(int64 *)b[0] times (none when c, a bool, is
                       false), iteration t written to the int64 at a first (where a is not NULL); a
                       count past b[1] (the run's max_loop_iterations) stops here */
            const int64_t *g = (const int64_t *)c->b;
            const int64_t count = c->c && !*(const uint8_t *)c->c ? 0 : *(const int64_t *)(intptr_t)g[0];
            if (count > g[1]) { *status = -1; return i; }
            for (int64_t k = 0; k < count; k++) {
                if (c->a) *(int64_t *)c->a = k;
                if (fg_run((const fg_call *)c->fn, c->n, status, k) != c->n) return i;
            }
            break;
        }
        case 15: {  /* an If: the calls at fn (then) or at b (else), as the bool at a says; c: their counts */
            const int go = *(const uint8_t *)c->a != 0;
            const int64_t m = ((const int64_t *)c->c)[go ? 0 : 1];
            if (fg_run((const fg_call *)(go ? c->fn : c->b), m, status, t) != m) return i;
            break;
        }
        FG_EXACT_FORMS  /* cases 17-19: native_finite.py */
        case 14: {  /* memcpy of c[0] bytes, to a + t * c[1] from b + t * c[2] (a loop's slice t) */
            const int64_t *g = (const int64_t *)c->c;
            memcpy((char *)c->a + t * g[1], (const char *)c->b + t * g[2], (size_t)g[0]);
            break;
        }
        }
    }
    return n;
}

FG_EXPORT int64_t fg_run_calls(const fg_call *calls, int64_t n, int32_t *status) {
    return fg_run(calls, n, status, 0);
}
"""


class FgCall(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("threads", ctypes.c_int32), ("fn", ctypes.c_void_p),
                ("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("c", ctypes.c_void_p), ("n", ctypes.c_int64)]


# (record, objects the record points into, kept alive with the table)
Call = tuple[tuple[int, int, int, int, int, int, int], tuple]


@functools.cache
def runner() -> Callable[..., int]:
    """fg_run_calls, compiled once (the kernel cache keeps the library between processes)."""
    from .codegen.build import FLAGS, _compile, find_compiler, library_path
    from .native_finite import EXACT_FORMS

    source = RUNNER.replace("FG_EXACT_FORMS", EXACT_FORMS)
    path = library_path(source)
    if not path.exists():
        _compile(source, path, find_compiler(), FLAGS)
    fn = ctypes.CDLL(str(path)).fg_run_calls
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    fn.restype = ctypes.c_int64
    return fn


def kernel_call(fn: Any, out: int, inputs: Sequence[int], dims: Sequence[int], threads: int) -> Call:
    """A generated kernel (a ctypes function of build.Kernel) on raw addresses."""
    ptrs = (ctypes.c_void_p * (1 + len(inputs)))(out, *inputs)
    d = (ctypes.c_int64 * max(len(dims), 1))(*dims)
    address = ctypes.cast(fn, ctypes.c_void_p).value
    return (KERNEL, threads, address, ctypes.addressof(ptrs), ctypes.addressof(d), 0, 0), (fn, ptrs, d)


def primitive_call(prim: Any, *inputs: np.ndarray, out: np.ndarray) -> Call:
    """A oneDNN primitive (onednn.Primitive) over these buffers."""
    handle, stream, nargs, args, threads = prim.native_call(*inputs, out=out)
    execute = ctypes.cast(prim._lib.dnnl_primitive_execute, ctypes.c_void_p).value
    return (PRIMITIVE, threads, execute, handle, stream, args, nargs), (prim, inputs, out)


def dense_span(a: np.ndarray) -> bool:
    """Whether `a`'s elements fill the memory from its first one exactly (a permutation of a
    contiguous buffer: a channels-last tensor seen as N, C, H, W)."""
    if a.size == 0 or any(s <= 0 for n, s in zip(a.shape, a.strides) if n > 1):
        return False
    return 1 + sum((n - 1) * s // a.itemsize for n, s in zip(a.shape, a.strides)) == a.size


def guard(*arrays: np.ndarray) -> list[Call] | None:
    """Stop the region unless every one of `arrays` (float32, dense) is finite; None where one is not
    checkable that way."""
    if not all(a.dtype == np.float32 and dense_span(a) for a in arrays):
        return None
    return [((GUARD, 1, 0, a.ctypes.data, 0, 0, a.size), (a,)) for a in arrays]


def copy(dst: np.ndarray, src: np.ndarray) -> Call | None:
    """`src` copied into `dst` (alike): one memcpy where both are dense, or one a row where each is
    rows of contiguous elements a fixed stride apart (a column slice, a concat's part); else None."""
    if dst.shape != src.shape or dst.dtype != src.dtype or not dst.flags.writeable or src.size == 0:
        return None
    merged: list[list[int]] = []  # [n, source stride, destination stride], innermost first
    for n, ss, ds in reversed([d for d in zip(src.shape, src.strides, dst.strides) if d[0] != 1]):
        if merged and ss == merged[-1][0] * merged[-1][1] and ds == merged[-1][0] * merged[-1][2]:
            merged[-1][0] *= n  # contiguous with the dim inside it, in both
        else:
            merged.append([n, ss, ds])
    (inner, s_in, d_in), *outer = merged or [[1, src.itemsize, dst.itemsize]]
    if s_in != src.itemsize or d_in != dst.itemsize or len(outer) > 1 or any(x < 0 for o in outer for x in o):
        return None
    if not outer:
        return (COPY, 1, 0, dst.ctypes.data, src.ctypes.data, 0, inner * src.itemsize), (dst, src)
    ((rows, s_row, d_row),) = outer
    geometry = (ctypes.c_int64 * 3)(inner * src.itemsize, s_row, d_row)
    return ((COPY_ROWS, 1, 0, dst.ctypes.data, src.ctypes.data, ctypes.addressof(geometry), rows),
            (dst, src, geometry))


def take(dst: np.ndarray, src: np.ndarray, index: np.ndarray, fill: np.ndarray | None = None) -> list[Call] | None:
    """dst = src's elements at `index` (dst's shape: flat positions in src, C order); where an index
    is negative, `fill`'s element (an array like dst, dst dense) instead. Either may be strided (a
    part of a concat's output). None where the element size is not 1, 2, 4 or 8 bytes, or the table
    would be over TAKE_LIMIT elements."""
    flat = index.ravel()
    if (dst.shape != index.shape or dst.dtype != src.dtype or not dst.flags.writeable or dst.itemsize not in TAKE
            or dst.size > TAKE_LIMIT or src.size == 0 or (fill is None and (flat < 0).any())
            or (fill is not None and not dst.flags.c_contiguous)):
        return None
    places = np.flatnonzero(flat >= 0)
    # (a 0-d array has one place, at offset 0: unravel_index takes no empty shape)
    coords = np.unravel_index(flat[places], src.shape) if src.ndim else ()
    offsets = sum((c.astype(np.int64) * s for c, s in zip(coords, src.strides)), np.zeros(len(places), np.int64))
    # where each goes, in dst's elements from its first
    at = np.unravel_index(places, dst.shape) if dst.ndim else ()
    places = sum((c.astype(np.int64) * (s // dst.itemsize) for c, s in zip(at, dst.strides)),
                 np.zeros(len(places), np.int64))
    table = np.ascontiguousarray(np.concatenate([offsets, places]), np.int64)
    calls: list[Call] = []
    if len(places) < dst.size:
        image = np.ascontiguousarray(fill, dst.dtype)  # the filled elements (the others overwritten)
        calls.append(((COPY, 1, 0, dst.ctypes.data, image.ctypes.data, 0, dst.nbytes), (dst, image)))
    if len(places):
        calls.append(((TAKE[dst.itemsize], 1, 0, dst.ctypes.data, src.ctypes.data, table.ctypes.data, len(places)),
                      (dst, src, table)))
    return calls


def copy_any(dst: np.ndarray, src: np.ndarray) -> list[Call] | None:
    """`src` copied into `dst` (alike, any strides): a memcpy or rows of them where they do, else a
    table of offsets (`take`: small tensors); None where neither can."""
    c = copy(dst, src)
    if c is not None:
        return [c]
    return take(dst, src, np.arange(src.size).reshape(src.shape)) if dst.shape == src.shape else None


def dense(src: np.ndarray) -> tuple[np.ndarray, list[Call]] | None:
    """`src` as a C-contiguous array: itself, or a scratch array of this thread's and the calls that
    copy `src` into it (a memcpy, rows of them, or a table); None where no call can."""
    if src.flags.c_contiguous:
        return src, []
    out = np.empty(src.shape, src.dtype)
    calls = copy_any(out, src)
    return None if calls is None else (out, calls)


def dense_all(arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[Call]] | None:
    """`dense` of each of `arrays`: the C-contiguous arrays and every copy's calls; None where one has none."""
    out, calls = [], []
    for a in arrays:
        d = dense(a)
        if d is None:
            return None
        out.append(d[0])
        calls += d[1]
    return out, calls


_CALL_BYTES = ctypes.sizeof(FgCall)


class Region:
    """Rows `rows` (the executable's step rows) run as one table of C calls; `starts[k]` is the first
    call of row k. A guard that stops the table runs its row in Python, and the table goes on after it
    (where that row's result is in its buffer; else the rest of the region runs in Python)."""

    def __init__(self, rows: list[tuple], calls: list[list[Call]], produced: dict[int, np.ndarray]):
        self.rows = rows
        flat = [c for cs in calls for c in cs]
        self.table = (FgCall * len(flat))(*[FgCall(*record) for record, _ in flat])
        self.keep = [objs for _, objs in flat]
        self.calls = flat  # (a loop around this region, native_control.py, runs its records again)
        self.starts = np.cumsum([0] + [len(cs) for cs in calls[:-1]])
        freed = {u for r in rows for u in r[3]}
        # values later steps read: set in the environment as the Python rows would have
        self.kept = [(u, a) for u, a in produced.items() if u not in freed]
        self.produced = frozenset(produced)
        self.frees = tuple(u for r in rows for u in r[3] if u not in produced)
        self.status = ctypes.c_int32(0)
        # a loop's count is checked against the run's max_loop_iterations (written into the last
        # object a loop record keeps: native_control.loop); with a deadline the rows run in Python
        self.loop_bounds = [objs[-1] for record, objs in flat if record[0] == LOOP]
        self.run_calls = runner()
        self.address, self.n, self.status_address = ctypes.addressof(self.table), len(flat), ctypes.addressof(self.status)

    def __call__(self, values: list, out: Any, env: dict[int, Any]) -> Any:
        if self.loop_bounds:
            limits = run_limits.current()
            if limits.deadline_at is not None:  # (iterations are not timed in C)
                for j in range(len(self.rows)):
                    self._row(j, env, run=True)
                return self.rows[-1][5]
            for g in self.loop_bounds:
                g[1] = NO_BOUND if limits.max_loop_iterations is None else limits.max_loop_iterations
        start, done = 0, 0  # the next call, and the rows whose results are settled in env
        while True:
            stopped = start + self.run_calls(self.address + start * _CALL_BYTES, self.n - start, self.status_address)
            if stopped == self.n:
                break
            k = self._row_of(stopped)
            for j in range(done, k):  # done in C: the result is in its buffer
                self._row(j, env, run=False)
            done = k + 1
            if self._row(k, env, run=True) is not self.rows[k][5]:  # the table's later calls would not see it
                for j in range(done, len(self.rows)):
                    self._row(j, env, run=True)
                return self.rows[-1][5]
            if done == len(self.rows):
                return self.rows[-1][5]
            start = int(self.starts[done])
        if done:  # what the rows run in C after a stop freed
            for dead in (u for r in self.rows[done:] for u in r[3] if u in self.produced):
                env.pop(dead, None)
        env.update(self.kept)
        return self.rows[-1][5]

    def _row_of(self, stopped: int) -> int:
        if self.status.value > 0:
            raise FusegraphError(f"oneDNN: a primitive of a native program failed (status {self.status.value})")
        self.status.value = 0
        return int(np.searchsorted(self.starts, stopped, side="right")) - 1  # the row whose call stopped

    def _row(self, j: int, env: dict[int, Any], run: bool) -> Any:
        """Row j's result set in env: its buffer (`run` false: done in C), or what it returns run in
        Python (a guard stopped it: its exact path)."""
        fn, args, uid, frees, needs_env, out = self.rows[j]
        if run:
            values = [env[a] for a in args]
            env[uid] = fn(values, out, env) if needs_env else fn(values, out)
        else:
            env[uid] = out
        result = env[uid]
        for dead in frees:
            if dead in self.produced:  # the others the executable's loop frees (Region.frees)
                del env[dead]
        return result


def native_rows(rows: list[tuple], stable: dict[int, Any]) -> list[tuple]:
    """`rows` with each run of at least MIN_STEPS consecutive native steps replaced by one Region row.
    `stable`: the values whose buffers stay where they are (constants, this thread's arena views)."""
    out: list[tuple] = []
    run: list[tuple] = []
    calls: list[list[Call]] = []

    def close() -> None:
        if len(run) >= MIN_STEPS:
            produced = {r[2]: r[5] for r in run}
            region = Region(list(run), list(calls), produced)
            out.append((region, (), run[-1][2], region.frees, True, None))
        else:
            out.extend(run)
        run.clear()
        calls.clear()

    for row in rows:
        fn, args, uid, frees, needs_env, buf = row
        native = getattr(fn, "native", None)
        c = None
        if native is not None and buf is not None and all(isinstance(stable.get(a), np.ndarray) for a in args):
            values = [stable[a] for a in args]
            # (a step reading its environment, control flow, is given the values that stay where they are)
            c = native(values, buf, stable) if needs_env else native(values, buf)
        if c is None:
            close()
            out.append(row)
            continue
        run.append(row)
        calls.append(c)
        stable[uid] = buf
    close()
    return out

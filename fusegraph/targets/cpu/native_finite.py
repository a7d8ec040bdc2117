"""The exact forms of guarded steps, in C (native_program.py's calls).

oneDNN's relu post-op and its max pooling are vmaxps, which drops a NaN where the reference keeps it,
so a step using them is exact on finite inputs only. Where an input holds a NaN or an infinity, the
step's exact form runs instead: `guarded` picks between the two in the table, so that input does
not send the rest of the run to Python steps (perf_analyzer's default input is random bytes, 0.4 %
NaN: ResNet-50 then ran 8-12 ms slower a run, 2.6 ms with these).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from .native_program import GUARDED, NAN_MAX_POOL, RELU, Call, FgCall, dense_span, guard

# the runner's cases of these calls (native_program.RUNNER; fg_all_finite is its guard's check)
EXACT_FORMS = r"""
        case 17: {  /* the calls at fn where the float32 buffers a lists ([k, address, n, ...]) hold no
                       NaN or infinity, else those at b; c: their counts */
            const int64_t *g = (const int64_t *)c->a;
            int ok = 1;
            for (int64_t k = 0; ok && k < g[0]; k++) ok = fg_all_finite((const uint32_t *)(intptr_t)g[1 + 2 * k], g[2 + 2 * k]);
            const int64_t m = ((const int64_t *)c->c)[ok ? 0 : 1];
            if (fg_run((const fg_call *)(ok ? c->fn : c->b), m, status, t) != m) return i;
            break;
        }
        case 18: {  /* relu in place over n float32 at a, a NaN kept (numpy's maximum(x, 0)) */
            float *x = (float *)c->a;
            const int64_t len = c->n;
            #pragma omp parallel for num_threads(c->threads) schedule(static) if (c->threads > 1 && len >= 65536)
            for (int64_t k = 0; k < len; k++) x[k] = x[k] > 0.0f || x[k] != x[k] ? x[k] : 0.0f;  /* -0 too: +0 */
            break;
        }
        case 19: {  /* max pooling's NaN, after oneDNN's max (which skips one): the output at a is NaN
                       where its window of the float32 input at b holds one. c: N, C, OH, OW, H, W,
                       KH, KW, SH, SW, PH, PW, DH, DW, then the input's and the output's N, C, H, W
                       strides in elements */
            const int64_t *g = (const int64_t *)c->c;
            const float *x = (const float *)c->b;
            float *y = (float *)c->a;
            #pragma omp parallel for collapse(2) num_threads(c->threads) if (c->threads > 1)
            for (int64_t b = 0; b < g[0]; b++)
                for (int64_t oh = 0; oh < g[2]; oh++)
                    for (int64_t ow = 0; ow < g[3]; ow++)
                        for (int64_t kh = 0; kh < g[6]; kh++)
                            for (int64_t kw = 0; kw < g[7]; kw++) {
                                const int64_t ih = oh * g[8] - g[10] + kh * g[12], iw = ow * g[9] - g[11] + kw * g[13];
                                if (ih < 0 || ih >= g[4] || iw < 0 || iw >= g[5]) continue;
                                const float *xp = x + b * g[14] + ih * g[16] + iw * g[17];
                                float *yp = y + b * g[18] + oh * g[20] + ow * g[21];
                                if (g[15] == 1 && g[19] == 1)  /* channels last: vectors */
                                    for (int64_t ch = 0; ch < g[1]; ch++) yp[ch] = xp[ch] != xp[ch] ? xp[ch] : yp[ch];
                                else
                                    for (int64_t ch = 0; ch < g[1]; ch++)
                                        if (xp[ch * g[15]] != xp[ch * g[15]]) yp[ch * g[19]] = xp[ch * g[15]];
                            }
            break;
        }
"""


def guarded(arrays: Sequence[np.ndarray], fast: list[Call], exact: list[Call]) -> Call | None:
    """`fast` where every one of `arrays` (float32, dense) holds no NaN or infinity, else `exact`,
    without leaving the table; None where one is not checkable that way."""
    if not all(a.dtype == np.float32 and dense_span(a) for a in arrays):
        return None
    checked = (ctypes.c_int64 * (1 + 2 * len(arrays)))(len(arrays), *[v for a in arrays for v in (a.ctypes.data, a.size)])
    a, b = ((FgCall * max(len(t), 1))(*[FgCall(*record) for record, _ in t]) for t in (fast, exact))
    counts = (ctypes.c_int64 * 2)(len(fast), len(exact))
    return ((GUARDED, 1, ctypes.addressof(a), ctypes.addressof(checked), ctypes.addressof(b), ctypes.addressof(counts), 0),
            ([objs for _, objs in fast + exact], a, b, counts, checked, tuple(arrays)))


def finite_or_exact(arrays: Sequence[np.ndarray], fast: list[Call], exact: list[Call] | None) -> list[Call] | None:
    """A step's calls where it is exact on finite inputs only: `fast` where `arrays` hold no NaN or
    infinity, else `exact` (a `guarded` call); where `exact` has no C form (None), a guard that stops
    the table before `fast` (the step then runs in Python); None where `arrays` are not checkable."""
    both = guarded(arrays, fast, exact) if exact is not None else None
    if both is not None:
        return [both]
    checks = guard(*arrays)
    return None if checks is None else [*checks, *fast]


def relu(a: np.ndarray, threads: int) -> Call | None:
    """max(a, 0) in place, a NaN kept (float32, dense); None otherwise."""
    if a.dtype != np.float32 or not dense_span(a) or not a.flags.writeable:
        return None
    return (RELU, threads, 0, a.ctypes.data, 0, 0, a.size), (a,)


def nan_max_pool(out: np.ndarray, x: np.ndarray, lengths: Sequence[int], strides: Sequence[int],
                 begins: Sequence[int], dilations: Sequence[int], threads: int) -> Call | None:
    """NaN into `out` where its window of `x` holds one (N, C, H, W views, float32), after oneDNN's max
    pooling wrote the rest; None for other ranks or layouts."""
    views = (out, x)
    if x.ndim != 4 or any(v.dtype != np.float32 or min(v.strides) < 0 or not v.flags.aligned for v in views):
        return None
    g = np.array([out.shape[0], x.shape[1], *out.shape[2:], *x.shape[2:], *lengths, *strides, *begins, *dilations,
                  *(s // 4 for s in x.strides), *(s // 4 for s in out.strides)], np.int64)
    return (NAN_MAX_POOL, threads, 0, out.ctypes.data, x.ctypes.data, g.ctypes.data, 0), (out, x, g)

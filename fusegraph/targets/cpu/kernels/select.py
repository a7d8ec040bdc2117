"""top_k of float32 with a static k as generated C: each row's k best kept sorted while the row is
read once, in index order (an equal value never passes one already kept: the lower index first, as
the reference's stable sort), NaN the largest value as numpy's sort has it. An SSD head's top 20 of
960 scores: 58 us in numpy's argsort of the whole row. It writes both results into their planned
buffers (plan_memory.TUPLE_WRITERS) and joins native programs."""

from __future__ import annotations

import ctypes
import hashlib
import math

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..codegen.kernels import KernelSource
from ..lowering import Kernel, LowerContext, lowering, reference_kernel

_CODE = r"""
/* a before b in the result: the larger (LARGEST) or smaller, NaN counted the largest */
static inline int KNAME_before(float a, float b) {
    if (a != a) return LARGEST && b == b;
    if (b != b) return !LARGEST;
    return LARGEST ? a > b : a < b;
}

FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    (void)d; (void)nt;
    float *const values = (float *)p[0];
    int64_t *const indices = (int64_t *)p[1];
    const float *const x = (const float *)p[2];
    for (int64_t o = 0; o < OUTER; o++)
        for (int64_t i = 0; i < INNER; i++) {
            const float *row = x + o * N * INNER + i;
            float *v = values + o * K * INNER + i;
            int64_t *ix = indices + o * K * INNER + i;
            int64_t kept = 0;
            for (int64_t j = 0; j < N; j++) {
                const float e = row[j * INNER];
                if (kept == K && !KNAME_before(e, v[(K - 1) * INNER])) continue;
                int64_t at = kept < K ? kept++ : K - 1;  /* the slot it takes, moved up past the worse */
                while (at > 0 && KNAME_before(e, v[(at - 1) * INNER])) {
                    v[at * INNER] = v[(at - 1) * INNER];
                    ix[at * INNER] = ix[(at - 1) * INNER];
                    at--;
                }
                v[at * INNER] = e;
                ix[at * INNER] = j;
            }
        }
}
"""


def top_k_kernel(outer: int, n: int, inner: int, k: int, largest: bool) -> KernelSource:
    consts = {"OUTER": outer, "INNER": inner, "LARGEST": int(largest), "N": n, "K": k}
    code = "\n".join([*(f"#define {c} {v}" for c, v in consts.items()), _CODE, *(f"#undef {c}" for c in consts)])
    name = "fg_top_k_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=(),
                        in_dtypes=(DType.int64, DType.float32), out_dtype=DType.float32)


@lowering("top_k")
def top_k(ins: Instruction, ctx: LowerContext) -> Kernel:
    run = reference_kernel(ins, ctx)
    op, x = ins.op, ins.inputs[0].shape
    if (op.k is None or not isinstance(x, Shape) or x.is_dynamic or x.dtype != DType.float32 or op.k == 0
            or x.elements == 0):
        return run
    outer, n, inner = math.prod(x.lens[:op.axis]), x.lens[op.axis], math.prod(x.lens[op.axis + 1:])
    src = top_k_kernel(outer, n, inner, op.k, op.largest)
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))
    lens = ins.shape.elements[0].lens

    def compiled(args, out):
        a = args[0]
        if not a.flags.c_contiguous:  # a layout the IR did not promise: the reference
            return run(args, out)
        values, indices = out if isinstance(out, tuple) else (None, None)
        values = np.empty(lens, np.float32) if values is None else values
        indices = np.empty(lens, np.int64) if indices is None else indices
        kernel = cell["kernel"]
        kernel._fn((ctypes.c_void_p * 3)(values.ctypes.data, indices.ctypes.data, a.ctypes.data),
                   (ctypes.c_int64 * 1)(0), 1)
        return values, indices

    def native(args, out):
        from ..native_program import kernel_call

        if not isinstance(out, tuple) or not args[0].flags.c_contiguous:
            return None
        ys = [np.empty(lens, d) if o is None else o for o, d in zip(out, (np.float32, np.int64), strict=True)]
        if not all(y.flags.c_contiguous for y in ys):
            return None
        kernel = cell["kernel"]
        record, keep = kernel_call(kernel._fn, ys[0].ctypes.data, [ys[1].ctypes.data, args[0].ctypes.data], [0], 1)
        return [(record, (*keep, ys))]

    compiled.native = native  # type: ignore[attr-defined]
    return compiled

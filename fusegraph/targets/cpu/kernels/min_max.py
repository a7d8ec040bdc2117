"""min_max (ops_int8_dynamic.py) on the cpu: one compiled pass over x on every thread, each thread's
min and max vectorized (`omp simd` reductions: gcc does not vectorize a float min without them), then
combined. numpy's min and max are two single-threaded passes; DynamicQuantizeLinear runs before every
dynamically quantized product. The order of the elements does not matter: a transposed tensor whose
elements fill their buffer (a permutation of it, dense_span) is one pass over the buffer too."""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..codegen.kernels import KernelSource
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from ..native_program import dense_span

_GRAIN = 1 << 17  # elements a thread gets at least: below, forking (and, on a busy machine, waiting for
#                   the other thread at the barrier) costs more than the pass saves

_CODE = r"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    float *const out = (float *)p[0];
    const float *const x = (const float *)p[1];
    const int64_t n = d[0];
    const int use = fg_threads(nt, n, GRAIN);
    float lo = INFINITY, hi = -INFINITY;
    int nan = 0;
    #pragma omp parallel num_threads(use) if (use > 1)
    {
        const int t = omp_get_thread_num(), k = omp_get_num_threads();
        const int64_t a = n * t / k, b = n * (t + 1) / k;
        float l = INFINITY, h = -INFINITY;
        int bad = 0;
        #pragma omp simd reduction(min:l) reduction(max:h) reduction(|:bad)
        for (int64_t i = a; i < b; ++i) {
            const float v = x[i];
            l = v < l ? v : l;
            h = v > h ? v : h;
            bad |= v != v;
        }
        #pragma omp critical
        {
            lo = l < lo ? l : lo;
            hi = h > hi ? h : hi;
            nan |= bad;
        }
    }
    out[0] = nan ? NAN : lo;
    out[1] = nan ? NAN : hi;
}
"""


def min_max_kernel() -> KernelSource:
    code = _CODE.replace("GRAIN", str(_GRAIN))
    name = "fg_min_max_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=(),
                        in_dtypes=(DType.float32,), out_dtype=DType.float32)


@lowering("min_max")
def min_max(ins: Instruction, ctx: LowerContext) -> Kernel:
    x = ins.inputs[0].shape
    if x.is_dynamic:
        return reference_kernel(ins, ctx)
    src = min_max_kernel()
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))
    ptrs, dims = ctypes.c_void_p * 2, ctypes.c_int64 * 1
    n = x.elements

    def run(args, out):
        a = args[0]
        if out is None:
            out = np.empty(2, np.float32)
        if not dense_span(a):  # a strided view: numpy's two passes (a permuted buffer is one pass)
            np.copyto(out, ins.op.compute([a]))
            return out
        kernel = cell["kernel"]
        kernel._fn(ptrs(out.ctypes.data, a.ctypes.data), dims(n), kernel.threads)
        return out

    def native(args, out):  # (before every dynamically quantized product: it kept them apart)
        from ..native_program import kernel_call

        if not dense_span(args[0]) or not out.flags.c_contiguous:
            return None
        kernel = cell["kernel"]
        return [kernel_call(kernel._fn, out.ctypes.data, [args[0].ctypes.data], [n], kernel.threads)]

    run.native = native  # type: ignore[attr-defined]
    return run

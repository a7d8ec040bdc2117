"""int8_lookup (ops_int8.py) on the cpu: one compiled C loop, out[i] = table[x[i]] over the
elements in memory order, the table's entries copied as bytes (any result type of 1-8 bytes).
numpy's take would first widen the 8-bit indices to intp: five times slower than the loop.

A table of bytes (a QDQ SiLU from uint8 to uint8: YOLOv8n's 51 lookups, a fifth of its int8 time)
is looked up 64 at a time where the compiler targets AVX-512 VBMI: the 256 entries in four
registers, two vpermi2b picking from the lower and the upper half by the index's low 7 bits, its
top bit choosing between them."""

from __future__ import annotations

import hashlib

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..codegen.kernels import KernelSource
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from ..ops_int8 import table_index

_WORDS = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}
_GRAIN = 1 << 16  # elements a thread gets at least: below, forking costs more than the loop

_CODE = r"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    WORD *const out = (WORD *)p[0];
    const uint8_t *const x = (const uint8_t *)p[1];
    const WORD *const table = (const WORD *)p[2];
    const int64_t n = d[0];
    const int use = fg_threads(nt, n, GRAIN);
    #pragma omp parallel num_threads(use) if (use > 1)
    {
        const int t = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t i = n * t / k;
        const int64_t end = n * (t + 1) / k;
VECTOR
        for (; i < end; ++i)
            out[i] = table[x[i]];
    }
}
"""

# bytes from bytes: 64 per step with vpermi2b (each thread's share; its tail one by one)
_VBMI = r"""
#if defined(__AVX512VBMI__) && defined(__AVX512BW__)
        const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
        const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
        for (; i + 64 <= end; i += 64) {
            const __m512i v = _mm512_loadu_si512(x + i);
            const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
            _mm512_storeu_si512(out + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
        }
#endif
"""
_INCLUDE = "#if defined(__AVX512VBMI__) && defined(__AVX512BW__)\n#include <immintrin.h>\n#endif\n"


def lookup_kernel(itemsize: int) -> KernelSource:
    code = _CODE.replace("WORD", _WORDS[itemsize]).replace("GRAIN", str(_GRAIN))
    code = _INCLUDE + code.replace("VECTOR", _VBMI.strip("\n")) if itemsize == 1 else code.replace("VECTOR\n", "")
    name = "fg_lookup_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=(),
                        in_dtypes=(DType.uint8, DType.uint8), out_dtype=DType.uint8)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@lowering("int8_lookup")
def int8_lookup(ins: Instruction, ctx: LowerContext) -> Kernel:
    table = ctx.const(ins.inputs[1])
    itemsize = ins.shape.dtype.np.itemsize
    if table is None or itemsize not in _WORDS or ins.shape.is_dynamic:
        return reference_kernel(ins, ctx)
    table = np.ascontiguousarray(table)
    src = lookup_kernel(itemsize)
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))
    lens, dtype = ins.shape.lens, ins.shape.dtype.np
    import ctypes

    ptrs, dims = ctypes.c_void_p * 3, ctypes.c_int64 * 1

    def run(args, out):
        x = args[0]
        if out is None:
            out = np.empty(lens, dtype)
        if not (x.flags.c_contiguous and out.flags.c_contiguous):  # a strided view: numpy's gather
            np.copyto(out, table[table_index(x)])
            return out
        idx = table_index(x)  # int8: the bits with the sign flipped (a copy; uint8: x itself)
        kernel = cell["kernel"]
        kernel._fn(ptrs(_address(out), _address(idx), _address(table)), dims(x.size), kernel.threads)
        return out

    def native(args, out):  # uint8 indices in place (int8 ones need their flipped copy: a Python step)
        from ..native_program import kernel_call

        x = args[0]
        if x.dtype != np.uint8 or not (x.flags.c_contiguous and out.flags.c_contiguous):
            return None
        kernel = cell["kernel"]
        return [kernel_call(kernel._fn, _address(out), [_address(x), _address(table)], (x.size,), kernel.threads)]

    run.native = native  # type: ignore[attr-defined]
    return run

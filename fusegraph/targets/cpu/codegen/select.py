"""C for the selections a detector's post-processing makes over its scores: ArgMax/ArgMin and TopK
(ops/reduce.py, ops/select.py). As numpy reference steps they were each a Python call of a few
numpy passes (ssd_detector's argmax, top_k and their tuple reads: ~0.1 ms of its 0.28 ms run); as
generated kernels they join the native program around them (native_program.py).

The order is the references': numpy's argmax and argmin both pick the first NaN; TopK's stable
sort puts NaNs last ascending (TopK-smallest), so TopK-largest, its reverse, puts them first;
equal values by lower index (the last one for select_last_index). The input is read in place through its
strides (a slice of a softmax), viewed as [outer, n, inner] with the selected axis in the middle.

    arg:  p[0] int64 out [outer, 1, inner]   p[1] x
    topk: p[0] values [outer, k, inner]   p[1] x   p[2] int64 indices [outer, k, inner]
"""

from __future__ import annotations

from collections.abc import Sequence

from ....ir.dtypes import DType
from .c_expr import CodegenUnsupported, CRenderer, c_type
from .kernels import KernelSource, finish

_TYPES = frozenset({DType.float32, DType.float64, DType.int8, DType.int16, DType.int32, DType.int64,
                    DType.uint8, DType.uint16, DType.uint32, DType.uint64})

# a ranks before b: larger (or smaller) values, equal ones (and NaNs among themselves) by lower
# index, NaN before every number (or after: TopK-smallest)
_BEFORE = r"""
static inline int KNAME_before($T va, int64_t ia, $T vb, int64_t ib) {
    const int na = va != va, nb = vb != vb;
    if (na | nb) return $NAN_FIRST ? na && (!nb || ia < ib) : nb && (!na || ia < ib);
    return $LARGEST ? (va > vb || (va == vb && ia < ib)) : (va < vb || (va == vb && ia < ib));
}
"""

_ARG = _BEFORE + r"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    (void)d; (void)nt;
    int64_t *out = (int64_t *)p[0];
    const $T *x = (const $T *)p[1];
    for (int64_t o = 0; o < $OUTER; o++)
        for (int64_t e = 0; e < $INNER; e++) {
            const $T *row = x + o * $S_OUTER + e * $S_INNER;
            int64_t best = $LAST ? $N - 1 : 0;
            for (int64_t j = $LAST ? $N - 2 : 1; $LAST ? j >= 0 : j < $N; j += $LAST ? -1 : 1)
                /* scanning from the end, the last extremum ranks first when equal ones rank by index reversed */
                if ($LAST ? KNAME_before(row[j * $S_N], $N - 1 - j, row[best * $S_N], $N - 1 - best)
                         : KNAME_before(row[j * $S_N], j, row[best * $S_N], best)) best = j;
            out[o * $INNER + e] = best;
        }
}
"""

_TOPK = _BEFORE + r"""
/* the heap's root is the candidate ranking last of the $K kept */
static inline void KNAME_sift($T *v, int64_t *ix, int64_t n, int64_t k) {
    const $T tv = v[k]; const int64_t ti = ix[k];
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && KNAME_before(v[c], ix[c], v[c + 1], ix[c + 1])) ++c;
        if (!KNAME_before(tv, ti, v[c], ix[c])) break;
        v[k] = v[c]; ix[k] = ix[c]; k = c;
    }
    v[k] = tv; ix[k] = ti;
}
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    (void)d; (void)nt;
    $T *values = ($T *)p[0];
    const $T *x = (const $T *)p[1];
    int64_t *indices = (int64_t *)p[2];
    $T hv[$K]; int64_t hi[$K];
    for (int64_t o = 0; o < $OUTER; o++)
        for (int64_t e = 0; e < $INNER; e++) {
            const $T *row = x + o * $S_OUTER + e * $S_INNER;
            for (int64_t j = 0; j < $K; j++) { hv[j] = row[j * $S_N]; hi[j] = j; }
            for (int64_t j = $K / 2 - 1; j >= 0; j--) KNAME_sift(hv, hi, $K, j);
            for (int64_t j = $K; j < $N; j++)
                if (KNAME_before(row[j * $S_N], j, hv[0], hi[0])) { hv[0] = row[j * $S_N]; hi[0] = j; KNAME_sift(hv, hi, $K, 0); }
            for (int64_t m = $K - 1; m >= 0; m--) {  /* the root ranks last of those left: it takes place m */
                values[(o * $K + m) * $INNER + e] = hv[0]; indices[(o * $K + m) * $INNER + e] = hi[0];
                hv[0] = hv[m]; hi[0] = hi[m];
                KNAME_sift(hv, hi, m, 0);
            }
        }
}
"""

TOPK_STACK = 4096  # k above this: the reference (the kernel keeps its k candidates on the stack)


def _geometry(lens: Sequence[int], strides: Sequence[int], axis: int) -> tuple[int, ...]:
    """(outer, n, inner, their element strides) of a tensor viewed as [outer, n, inner] around `axis`;
    CodegenUnsupported where the dims before (or after) it do not merge into one strided run."""
    def merged(ls: Sequence[int], ss: Sequence[int]) -> tuple[int, int]:
        total, stride = 1, 0
        for n, s in reversed([(n, s) for n, s in zip(ls, ss) if n != 1]):
            if total > 1 and s != stride * total:
                raise CodegenUnsupported("the dims around the selected axis do not merge")
            stride, total = (s if total == 1 else stride), total * n
        return total, stride

    outer, s_outer = merged(lens[:axis], strides[:axis])
    inner, s_inner = merged(lens[axis + 1:], strides[axis + 1:])
    return outer, lens[axis], inner, s_outer, strides[axis], s_inner


def _fill(code: str, dtype: DType, geometry: tuple[int, ...], **values: int) -> str:
    if dtype not in _TYPES:
        raise CodegenUnsupported(f"no selection kernel for {dtype}")
    names = ("OUTER", "N", "INNER", "S_OUTER", "S_N", "S_INNER")
    # longest names first: $S_N is no prefix of another, but $N is of nothing either way
    for name, v in sorted([*zip(names, geometry), *values.items()], key=lambda kv: -len(kv[0])):
        code = code.replace(f"${name}", f"((int64_t){v})")
    return code.replace("$T", c_type(dtype))


def arg_kernel(dtype: DType, lens: Sequence[int], strides: Sequence[int], axis: int, largest: bool,
               last: bool) -> KernelSource:
    """argmax (largest) or argmin of a `lens` tensor laid out with `strides` (elements) along `axis`."""
    geometry = _geometry(lens, strides, axis)
    code = _fill(_ARG, dtype, geometry, LARGEST=int(largest), LAST=int(last), NAN_FIRST=1)
    return finish(code, CRenderer(), "fg_arg", in_dtypes=(dtype,), out_dtype=DType.int64)


def topk_kernel(dtype: DType, lens: Sequence[int], strides: Sequence[int], axis: int, k: int,
                largest: bool) -> KernelSource:
    """The k largest (or smallest) of a `lens` tensor laid out with `strides` (elements) along `axis`,
    ranked, with their int64 indices; 0 < k <= TOPK_STACK."""
    if not 0 < k <= min(TOPK_STACK, lens[axis]):
        raise CodegenUnsupported(f"top_k with k={k} of {lens[axis]}")
    geometry = _geometry(lens, strides, axis)
    code = _fill(_TOPK, dtype, geometry, LARGEST=int(largest), K=k, NAN_FIRST=int(largest))
    return finish(code, CRenderer(), "fg_topk", in_dtypes=(dtype,), out_dtype=dtype)

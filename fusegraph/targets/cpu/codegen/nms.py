"""C source of the cpu target's NonMaxSuppression kernel (float32 boxes and scores, as ONNX Runtime's).

Selections are ONNX Runtime's (and the reference's, ops/select.py): per batch and class, the boxes
whose score is above the threshold, by descending score, equal scores by lower box index, each kept
unless its IoU with a box its class kept before is above the IoU threshold, until the class holds
`limit`. The IoU is computed as ORT's SuppressByIOU computes it, in float32 with the same operations
(corners from [x, y, w, h] as centre -/+ half the size), so threshold comparisons round the same.

Where ORT pushes every candidate into a priority queue (n log n), the kernel heapifies them in place
(n) and pops only those it looks at: a detector's class looks at a few hundred of its thousands.
Candidates are keyed as one uint64 (score bits made order-preserving, then the complemented box
index), so one integer comparison orders score then index. (batch, class) pairs run on OpenMP
threads when there are several; each writes its own slot, compacted in order at the end.

    void fg_nms(void *const *p, const int64_t *d, int nt)
    p[0] int64 out[1 + B*C*limit*3]: the count (-1: out of memory), then the selected [batch, class, box] triples
    p[1] float boxes[B, N, 4]   p[2] float scores[B, C, N]   p[3] float thresholds[2]: iou, score
    d = {B, N, C, limit (<= N, > 0), center_point_box, has_score_threshold}
"""

from __future__ import annotations

import hashlib

from ....ir.dtypes import DType
from .kernels import KernelSource

_CODE = r"""
#include <stdlib.h>
static inline uint64_t KNAME_key(float s, int64_t i) {
    s += 0.0f;  /* -0.0 as +0.0: they are equal scores, ordered by index */
    uint32_t u; memcpy(&u, &s, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  /* larger float -> larger unsigned */
    return ((uint64_t)u << 32) | (uint32_t)~(uint32_t)i;  /* equal scores: lower index is larger */
}
static inline void KNAME_sift(uint64_t *h, int64_t n, int64_t k) {
    const uint64_t v = h[k];
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] > h[c]) ++c;
        if (h[c] <= v) break;
        h[k] = h[c]; k = c;
    }
    h[k] = v;
}
/* ORT's SuppressByIOU, of candidate b against every kept box at once: the kept boxes' corners lie
   in contiguous arrays (k: lo0, lo1, hi0, hi1, area, `cap` apart), so the loop vectorizes; the
   tests ORT makes one by one (x then y overlap, areas, union) are one mask, which selects the same */
static inline int KNAME_suppressed(const float *k, int64_t cap, int64_t count, float b0, float b1, float c0,
                                   float c1, float ab, float thr) {
    const float *lo0 = k, *lo1 = k + cap, *hi0 = k + 2 * cap, *hi1 = k + 3 * cap, *area = k + 4 * cap;
    for (int64_t j0 = 0; j0 < count; j0 += 16) {  /* 16 at a time: most suppressed boxes stop early */
        const int64_t j1 = j0 + 16 < count ? j0 + 16 : count;
        int hit = 0;
        for (int64_t j = j0; j < j1; ++j) {
            const float ix = (hi1[j] < c1 ? hi1[j] : c1) - (lo1[j] > b1 ? lo1[j] : b1);
            const float iy = (hi0[j] < c0 ? hi0[j] : c0) - (lo0[j] > b0 ? lo0[j] : b0);
            const float inter = ix * iy, uni = area[j] + ab - inter;
            const int ok = (ix > 0.0f) & (iy > 0.0f) & (inter > 0.0f) & (area[j] > 0.0f) & (ab > 0.0f)
                           & (uni > 0.0f);
            hit |= ok & (inter / (ok ? uni : 1.0f) > thr);
        }
        if (hit) return 1;
    }
    return 0;
}
static int64_t KNAME_class(const float *scores, const float *c, int64_t n, int64_t limit, float iou,
                           int has_score, float score_thr, uint64_t *heap, float *kc, int64_t *kept) {
    const float *lo0 = c, *lo1 = c + n, *hi0 = c + 2 * n, *hi1 = c + 3 * n, *area = c + 4 * n;
    int64_t m = 0, count = 0;
    int64_t i = 0;
    if (has_score && score_thr >= 0.0f) {
        /* most scores fail: a block of 32 whose largest is not above the threshold is skipped. The
           largest is taken over the scores' bits as int32 (for a threshold >= 0 floats above it
           order as their bits do; negative floats are negative ints; a NaN's bits are above the
           threshold's, so its block is looked at, and excluded below): gcc vectorizes an integer
           max, and integer compares take no microcode assist on the denormals tiny scores are */
        const float t0 = score_thr + 0.0f;  /* -0.0 as +0.0 */
        int32_t tb; memcpy(&tb, &t0, 4);
        const int32_t *bits = (const int32_t *)scores;
        for (; i + 32 <= n; i += 32) {
            int32_t top = INT32_MIN;
            for (int k = 0; k < 32; ++k) top = bits[i + k] > top ? bits[i + k] : top;
            if (top > tb)  /* (as integers here too: a float compare of a denormal takes an assist) */
                for (int k = 0; k < 32; ++k)
                    if (bits[i + k] > tb && bits[i + k] <= 0x7f800000) heap[m++] = KNAME_key(scores[i + k], i + k);
        }
    }
    for (; i < n; ++i)
        if (!has_score || scores[i] > score_thr) heap[m++] = KNAME_key(scores[i], i);
    for (int64_t k = m / 2 - 1; k >= 0; --k) KNAME_sift(heap, m, k);
    while (m > 0 && count < limit) {
        const int64_t box = (int64_t)(uint32_t)~(uint32_t)heap[0];
        heap[0] = heap[--m];
        KNAME_sift(heap, m, 0);
        if (KNAME_suppressed(kc, limit, count, lo0[box], lo1[box], hi0[box], hi1[box], area[box], iou)) continue;
        kc[count] = lo0[box]; kc[limit + count] = lo1[box]; kc[2 * limit + count] = hi0[box];
        kc[3 * limit + count] = hi1[box]; kc[4 * limit + count] = area[box];
        kept[count++] = box;
    }
    return count;
}
static inline int64_t KNAME_pair(int64_t pc, int64_t C, int64_t N, int64_t limit, const float *scores,
                                 const float *corners, const float *thr, int has_score, uint64_t *heap,
                                 int64_t *kept) {
    float *kc = (float *)(heap + N);  /* the kept boxes' corners, after the heap in the same scratch */
    return KNAME_class(scores + pc * N, corners + (pc / C) * 5 * N, N, limit, thr[0], has_score, thr[1], heap,
                       kc, kept + pc * limit);
}
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    int64_t *out = (int64_t *)p[0];
    const float *boxes = (const float *)p[1], *scores = (const float *)p[2], *thr = (const float *)p[3];
    const int64_t B = d[0], N = d[1], C = d[2], limit = d[3], center = d[4], has_score = d[5];
    float *corners = (float *)malloc(sizeof(float) * 5 * (size_t)(B * N > 0 ? B * N : 1));
    int64_t *kept = (int64_t *)malloc(sizeof(int64_t) * (size_t)(B * C * limit > 0 ? B * C * limit : 1));
    int64_t *counts = (int64_t *)calloc((size_t)(B * C > 0 ? B * C : 1), sizeof(int64_t));
    if (!corners || !kept || !counts) { out[0] = -1; free(corners); free(kept); free(counts); return; }
    for (int64_t b = 0; b < B; ++b) {
        const float *x = boxes + b * N * 4;
        float *lo0 = corners + b * 5 * N, *lo1 = lo0 + N, *hi0 = lo0 + 2 * N, *hi1 = lo0 + 3 * N, *ar = lo0 + 4 * N;
        for (int64_t i = 0; i < N; ++i) {
            const float *q = x + 4 * i;
            if (center) {  /* [x, y, w, h]: axis 1 is x, axis 0 is y */
                const float hw = q[2] / 2, hh = q[3] / 2;
                lo1[i] = q[0] - hw; hi1[i] = q[0] + hw; lo0[i] = q[1] - hh; hi0[i] = q[1] + hh;
            } else {       /* [y1, x1, y2, x2], either corner order */
                lo0[i] = q[0] <= q[2] ? q[0] : q[2]; hi0[i] = q[0] <= q[2] ? q[2] : q[0];
                lo1[i] = q[1] <= q[3] ? q[1] : q[3]; hi1[i] = q[1] <= q[3] ? q[3] : q[1];
            }
            ar[i] = (hi1[i] - lo1[i]) * (hi0[i] - lo0[i]);
        }
    }
    const int64_t pairs = B * C;
    const int use = fg_threads(nt, pairs * N, 65536);
    if (use == 1) {  /* no OpenMP region: entering one costs more than a detector's whole NMS */
        uint64_t *heap = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(N > 0 ? N : 1) + sizeof(float) * 5 * (size_t)limit);
        for (int64_t pc = 0; pc < pairs; ++pc)
            counts[pc] = heap ? KNAME_pair(pc, C, N, limit, scores, corners, thr, (int)has_score, heap, kept) : -1;
        free(heap);
    } else {
        #pragma omp parallel num_threads(use)
        {
            uint64_t *heap = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(N > 0 ? N : 1) + sizeof(float) * 5 * (size_t)limit);
            #pragma omp for schedule(dynamic, 1)
            for (int64_t pc = 0; pc < pairs; ++pc)
                counts[pc] = heap ? KNAME_pair(pc, C, N, limit, scores, corners, thr, (int)has_score, heap, kept) : -1;
            free(heap);
        }
    }
    int64_t total = 0;
    for (int64_t pc = 0; pc < pairs; ++pc)
        if (counts[pc] < 0) { out[0] = -1; free(corners); free(kept); free(counts); return; }
    for (int64_t pc = 0; pc < pairs; ++pc)
        for (int64_t j = 0; j < counts[pc]; ++j, ++total) {
            int64_t *t = out + 1 + 3 * total;
            t[0] = pc / C; t[1] = pc % C; t[2] = kept[pc * limit + j];
        }
    out[0] = total;
    free(corners); free(kept); free(counts);
}
"""


def nms_kernel() -> KernelSource:
    """The NonMaxSuppression kernel (one for every shape: its sizes come in d)."""
    name = "fg_nms_" + hashlib.sha256(_CODE.encode()).hexdigest()[:16]
    return KernelSource(name=name, code=_CODE.replace("KNAME", name), helpers=(),
                        in_dtypes=(DType.float32, DType.float32, DType.float32), out_dtype=DType.int64)

"""The C of the cpu sparse product (kernels/sparse.py): y [M, N] = x [M, K] @ W for W packed by output
column (CSR of W^T, in segments of KB rows stored in the order they are read: by block of NB
columns, then row block, then column), the scheme of XNNPACK's SpMM.

x is packed k-major into panels of MR = R vectors of rows (64 rows with AVX-512 and R = 4):
xp[panel][k][0..MR), zero-padded. For an output column n and each of its nonzeros (k, v), one
broadcast of v and R vector loads of row k of the panel feed R FMAs into accumulators that hold
y[panel rows, n]. Two sets of accumulators take alternate nonzeros, so 2R FMA chains run at once
(one set would wait on the FMA latency); they are added at the end of each row block. A block of NB
columns reads the panel KB rows at a time, so the rows in use stay in L1 or near it (32-96 KiB,
sparser weights taller: block_rows) whatever K is; a column's partial sums wait in the block's
tile between row blocks, and the tile is written to y row by row at the end. The panels must start
on a 64-byte boundary (sparse.py aligns them): a vector load across two cache lines costs two.
The order of every sum is fixed by the packing alone: results do not depend on the thread count.
M = 1 is one gathered dot product per column.
"""

from __future__ import annotations

PANEL_VECTORS = (1, 2, 4)  # R: panels of 1, 2 or 4 vectors of rows (the fewest that cover M, up to 4)
KB_BYTES = (32 * 1024, 96 * 1024)  # bounds of a slice of a panel read at a time (block_rows)
KB_BYTES_PER_DENSITY = 12 * 1024  # the slice's bytes times the weights' density (block_rows)
NB = 32  # columns of a block: its tile of NB x MR floats (8 KiB at 64 rows) stays in L1 beside the rows

SOURCE = r"""
#include <immintrin.h>
#if defined(__AVX512F__)
typedef __m512 fg_sv;
#define FG_W 16
#define FG_LOAD(p) _mm512_loadu_ps(p)
#define FG_STORE(p, v) _mm512_storeu_ps(p, v)
#define FG_SET1(s) _mm512_set1_ps(s)
#define FG_ZERO() _mm512_setzero_ps()
#define FG_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define FG_ADD(a, b) _mm512_add_ps(a, b)
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 fg_sv;
#define FG_W 8
#define FG_LOAD(p) _mm256_loadu_ps(p)
#define FG_STORE(p, v) _mm256_storeu_ps(p, v)
#define FG_SET1(s) _mm256_set1_ps(s)
#define FG_ZERO() _mm256_setzero_ps()
#define FG_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define FG_ADD(a, b) _mm256_add_ps(a, b)
#else  /* plain GCC vectors: a multiply and an add (the build keeps them two roundings) */
typedef float fg_sv __attribute__((vector_size(32)));
typedef float fg_svu __attribute__((vector_size(32), aligned(4)));
#define FG_W 8
#define FG_LOAD(p) (*(const fg_svu*)(p))
#define FG_STORE(p, v) (*(fg_svu*)(p) = (v))
#define FG_SET1(s) ((fg_sv){0} + (s))
#define FG_ZERO() ((fg_sv){0})
#define FG_FMA(a, b, c) ((a) * (b) + (c))
#define FG_ADD(a, b) ((a) + (b))
#endif
#define FG_NB NB_COLUMNS

/* panel p of x, k-major: xp[(p * K + k) * MR + r] = x[p * MR + r, k], zero past M */
#if defined(__AVX512F__)
/* r[0..16) := its transpose (row i of the result is column i of the input) */
static inline void fg_tr16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
}

/* 16 x 16 blocks transposed in registers (a scalar copy cost 1 ns an element: 4 ms of 2048 x 2048) */
static void fg_pack(const float* x, float* xp, int64_t M, int64_t K, int64_t p, int64_t MR) {
    for (int64_t g = 0; g < MR; g += 16)
        for (int64_t k0 = 0; k0 < K; k0 += 16) {
            const int64_t kn = K - k0 < 16 ? K - k0 : 16;
            const __mmask16 mask = (__mmask16)((1u << kn) - 1u);
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                const int64_t m = p * MR + g + i;
                r[i] = m < M ? _mm512_maskz_loadu_ps(mask, x + m * K + k0) : _mm512_setzero_ps();
            }
            fg_tr16(r);
            for (int64_t j = 0; j < kn; j++) _mm512_storeu_ps(xp + (p * K + k0 + j) * MR + g, r[j]);
        }
}
#else
/* k in blocks of 64 so the 64 destination lines of a block stay in L1 while its rows are read */
static void fg_pack(const float* x, float* xp, int64_t M, int64_t K, int64_t p, int64_t MR) {
    for (int64_t k0 = 0; k0 < K; k0 += 64) {
        const int64_t k1 = k0 + 64 < K ? k0 + 64 : K;
        for (int64_t r = 0; r < MR; r++) {
            const int64_t m = p * MR + r;
            float* dst = xp + (p * K + k0) * MR + r;
            if (m < M) for (int64_t k = k0; k < k1; k++, dst += MR) *dst = x[m * K + k];
            else for (int64_t k = k0; k < k1; k++, dst += MR) *dst = 0.0f;
        }
    }
}
#endif

#define FG_SPMM(R)                                                                                    \
static void fg_spmm_r##R(const float* x, float* y, int64_t M, int64_t K, int64_t N, const int64_t* seg,  \
                         int64_t nkb, const int32_t* rows, const float* vals, float* xp, int threads) {   \
    enum { MR = FG_W * R };                                                                           \
    const int64_t panels = (M + MR - 1) / MR, blocks = (N + FG_NB - 1) / FG_NB;                       \
    _Pragma("omp parallel num_threads(threads)")                                                      \
    {                                                                                                 \
        _Pragma("omp for schedule(static)")                                                           \
        for (int64_t p = 0; p < panels; p++) fg_pack(x, xp, M, K, p, MR);                             \
        _Pragma("omp for collapse(2) schedule(dynamic, 1)")                                           \
        for (int64_t p = 0; p < panels; p++)                                                          \
            for (int64_t b = 0; b < blocks; b++) {                                                    \
                const float* panel = xp + p * K * MR;                                                 \
                const int64_t n0 = b * FG_NB, nb = N - n0 < FG_NB ? N - n0 : FG_NB;                   \
                float tile[FG_NB * MR] __attribute__((aligned(64)));                                  \
                for (int64_t kb = 0; kb < nkb; kb++)                                                  \
                    for (int64_t c = 0; c < nb; c++) {                                                \
                        fg_sv a0[R], a1[R];                                                           \
                        float* keep = tile + c * MR;                                                  \
                        for (int q = 0; q < R; q++) {                                                 \
                            a0[q] = kb ? FG_LOAD(keep + q * FG_W) : FG_ZERO();                        \
                            a1[q] = FG_ZERO();                                                        \
                        }                                                                             \
                        const int64_t* at = seg + (b * nkb + kb) * FG_NB + c;                         \
                        int64_t j = at[0];                                                            \
                        for (; j + 1 < at[1]; j += 2) {                                               \
                            const fg_sv v0 = FG_SET1(vals[j]), v1 = FG_SET1(vals[j + 1]);             \
                            const float* x0 = panel + (int64_t)rows[j] * MR;                          \
                            const float* x1 = panel + (int64_t)rows[j + 1] * MR;                      \
                            for (int q = 0; q < R; q++) {                                             \
                                a0[q] = FG_FMA(v0, FG_LOAD(x0 + q * FG_W), a0[q]);                    \
                                a1[q] = FG_FMA(v1, FG_LOAD(x1 + q * FG_W), a1[q]);                    \
                            }                                                                         \
                        }                                                                             \
                        if (j < at[1]) {                                                              \
                            const fg_sv v0 = FG_SET1(vals[j]);                                        \
                            const float* x0 = panel + (int64_t)rows[j] * MR;                          \
                            for (int q = 0; q < R; q++) a0[q] = FG_FMA(v0, FG_LOAD(x0 + q * FG_W), a0[q]); \
                        }                                                                             \
                        for (int q = 0; q < R; q++) FG_STORE(keep + q * FG_W, FG_ADD(a0[q], a1[q]));  \
                    }                                                                                 \
                const int64_t rows_here = M - p * MR < MR ? M - p * MR : MR;                          \
                for (int64_t r = 0; r < rows_here; r++) {                                             \
                    float* out = y + (p * MR + r) * N + n0;                                           \
                    for (int64_t c = 0; c < nb; c++) out[c] = tile[c * MR + r];                       \
                }                                                                                     \
            }                                                                                         \
    }                                                                                                 \
}
FG_SPMM(1)
FG_SPMM(2)
FG_SPMM(4)

__attribute__((visibility("default")))
int fg_spmm_vector_floats(void) { return FG_W; }

__attribute__((visibility("default")))
void fg_spmm_f32(const float* x, float* y, int64_t M, int64_t K, int64_t N, const int64_t* seg,
                 int64_t nkb, const int32_t* rows, const float* vals, float* xp, int64_t panel_vectors,
                 int threads) {
    if (M == 1) {  /* one gathered dot product per column, its segments in ascending k */
        const int64_t blocks = (N + FG_NB - 1) / FG_NB;
        #pragma omp parallel for num_threads(threads) schedule(static) if (N * 64 > 32768)
        for (int64_t b = 0; b < blocks; b++) {
            float acc[FG_NB] = {0};
            const int64_t nb = N - b * FG_NB < FG_NB ? N - b * FG_NB : FG_NB;
            for (int64_t kb = 0; kb < nkb; kb++)
                for (int64_t c = 0; c < nb; c++) {
                    const int64_t* at = seg + (b * nkb + kb) * FG_NB + c;
                    for (int64_t j = at[0]; j < at[1]; j++) acc[c] += vals[j] * x[rows[j]];
                }
            for (int64_t c = 0; c < nb; c++) y[b * FG_NB + c] = acc[c];
        }
    } else if (panel_vectors == 1) {
        fg_spmm_r1(x, y, M, K, N, seg, nkb, rows, vals, xp, threads);
    } else if (panel_vectors == 2) {
        fg_spmm_r2(x, y, M, K, N, seg, nkb, rows, vals, xp, threads);
    } else {
        fg_spmm_r4(x, y, M, K, N, seg, nkb, rows, vals, xp, threads);
    }
}
""".replace("NB_COLUMNS", str(NB))


def panel_vectors(m: int, width: int) -> int:
    """R for m rows: the fewest vectors of `width` rows that cover m, at most 4 (then panels repeat)."""
    for r in PANEL_VECTORS:
        if m <= r * width:
            return r
    return PANEL_VECTORS[-1]


def block_rows(k: int, width: int, density: float) -> int:
    """KB, the rows of a panel read at a time: a slice of about KB_BYTES_PER_DENSITY / density bytes
    (within KB_BYTES) at the widest panel, all of K when it fits. A column's nonzeros in one slice are
    read in one loop whose exit the branch predictor misses: sparser weights need taller slices to
    keep those loops long, denser ones fit the slice in L1 (measured on Zen 5: 32-48 KiB best at
    density 0.3, 96 KiB at 0.1)."""
    lo, hi = KB_BYTES
    size = min(max(KB_BYTES_PER_DENSITY / max(density, 1e-6), lo), hi)
    kb = int(size) // (4 * width * PANEL_VECTORS[-1])
    return k if k <= kb else kb

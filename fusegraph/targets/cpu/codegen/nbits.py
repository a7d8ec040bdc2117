"""C text of the 4-bit weight-only product (`matmul_nbits`, `matmul_bnb4`: ops/nbits.py): y = x @ W^T
with W's 4-bit codes dequantized in registers, block by block, inside the product loop.

Layout trick: a chunk of C codes (C = 32, or 16 for 16-wide blocks) is C/2 bytes whose low nibbles
hold one half of its columns (the even ones for MatMulNBits, the odd ones for bnb4, whose high
nibble comes first) and whose high nibbles the other half. Instead of interleaving the nibbles, each
run permutes x once (`xp`: per chunk the columns of the low nibbles, then those of the high ones,
zero-padded to whole blocks), so a chunk is two vectors of C/2 weights, `lo` and `hi`, with no
shuffle. A block's 16 possible weights, (table[q] - zp) * scale (table: 0..15, or bnb4's code book
with zp 0), are made once as a vector table, and a vector of codes becomes its weights in one
permute: exactly the reference's dequantized values. The product sums in another order (vectors,
FMA), so results agree with the reference to float rounding.

Work: pairs of columns n handed out to the OpenMP threads dynamically; for each the rows go in
groups of 8, 4, 2, 1 (one vector accumulator per row and column), so a column's bytes are read from
memory once and its chunk of weights serves every row of the group. Columns k past K in the last
block are never read from x's padding: whole chunks below K run vectorized, the rest of the last
block scalar in k order.
"""

from __future__ import annotations

import functools

SOURCE = r"""
typedef float fg_nf16 __attribute__((vector_size(64)));
typedef float fg_nf8 __attribute__((vector_size(32)));
typedef uint8_t fg_nb16 __attribute__((vector_size(16), aligned(1)));
typedef uint8_t fg_nb8 __attribute__((vector_size(8), aligned(1)));
typedef int32_t fg_ni16 __attribute__((vector_size(64)));
typedef int32_t fg_ni8 __attribute__((vector_size(32)));

/* a block's 16 weights by code, (ct - z) * s, in 16 / H vectors; a vector of codes' weights from it
   (one vpermps / vpermt2ps where AVX-512 is) */
#define FG_NB_TABLE(t, H, VF, ct, z, s) for (int j_ = 0; j_ < 16 / (H); j_++) (t)[j_] = (((const VF*)(ct))[j_] - (z)) * (s)
static inline fg_nf16 fg_nb_look16(const fg_nf16* t, fg_nb16 q) {
    return __builtin_shuffle(t[0], __builtin_convertvector(q, fg_ni16));
}
static inline fg_nf8 fg_nb_look8(const fg_nf8* t, fg_nb8 q) {
    return __builtin_shuffle(t[0], t[1], __builtin_convertvector(q, fg_ni8));
}

/* columns [n, n + NC) over rows [m0, m0 + MR): H = C / 2 lanes of type VF, bytes of type VB. Two
   columns share each load of x (the rows of x are read from L2: one load per FMA would bound the
   product there). se / so: the shift of the even / odd column's code in its byte, read by the scalar
   tail; the vectors take low nibbles, then high ones, in xp's order, which follows se. */
#define FG_NB4_COL(NAME, MR, NC, H, VF, VB, LOOK, ZT)                                               \
static inline __attribute__((optimize("fp-contract=fast")))                                         \
void NAME(const float* xp, const float* x, float* y, int64_t m0, int64_t n, int64_t K, int64_t KP,  \
          int64_t N, int64_t BS, int64_t nb, const uint8_t* b, const float* sc, const ZT* zp,       \
          const float* ct, int se, int so) {                                                        \
    VF acc[MR][NC];                                                                                 \
    for (int r = 0; r < MR; r++) for (int c = 0; c < NC; c++) acc[r][c] = (VF){0};                  \
    const int64_t kfull = K / (2 * H) * (2 * H); /* chunks wholly below K run vectorized */         \
    const uint8_t* row = b + n * nb * (BS / 2);                                                     \
    for (int64_t blk = 0; blk * BS < kfull; blk++) {                                                \
        VF t[NC][16 / H];                                                                           \
        for (int c = 0; c < NC; c++)                                                                \
            FG_NB_TABLE(t[c], H, VF, ct, (float)zp[(n + c) * nb + blk], sc[(n + c) * nb + blk]);    \
        const int64_t k1 = (blk + 1) * BS < kfull ? (blk + 1) * BS : kfull;                         \
        for (int64_t k = blk * BS; k < k1; k += 2 * H) {                                            \
            VF lo[NC], hi[NC];                                                                      \
            for (int c = 0; c < NC; c++) {                                                          \
                const VB q = *(const VB*)(row + c * nb * (BS / 2) + k / 2);                         \
                lo[c] = LOOK(t[c], q & 15);                                                         \
                hi[c] = LOOK(t[c], q >> 4);                                                         \
            }                                                                                       \
            for (int r = 0; r < MR; r++) {                                                          \
                const VF* a = (const VF*)(xp + (m0 + r) * KP + k);                                  \
                const VF a0 = a[0], a1 = a[1];                                                      \
                for (int c = 0; c < NC; c++) {                                                      \
                    acc[r][c] += lo[c] * a0;  /* two FMAs (one sum of both would be an FMA and an add) */ \
                    acc[r][c] += hi[c] * a1;                                                        \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
    for (int r = 0; r < MR; r++)                                                                    \
        for (int c = 0; c < NC; c++) {                                                              \
            float total = 0.0f;                                                                     \
            for (int l = 0; l < H; l++) total += acc[r][c][l];                                      \
            for (int64_t k = kfull; k < K; k++) { /* the tail of the last block, in k order */      \
                const int64_t at = (n + c) * nb + k / BS;                                           \
                const int q = (row[c * nb * (BS / 2) + k / 2] >> (k & 1 ? so : se)) & 15;           \
                total += x[(m0 + r) * K + k] * ((ct[q] - (float)zp[at]) * sc[at]);                  \
            }                                                                                       \
            y[(m0 + r) * N + n + c] = total;                                                        \
        }                                                                                           \
}

/* the product for one chunk width and zero-point type (x already permuted into xp), and the
   dequantization of a panel of W's rows in the same permuted column order (zero past K) */
#define FG_NB4_CALL(F) F(xp, x, y, m0, n, K, KP, N, BS, nb, b, sc, zp, ct, se, so)
#define FG_NB4(SUFFIX, H, VF, VB, LOOK, ZT)                                                         \
FG_NB4_COL(fg_nb4_col8x2_##SUFFIX, 8, 2, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col4x2_##SUFFIX, 4, 2, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col2x2_##SUFFIX, 2, 2, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col1x2_##SUFFIX, 1, 2, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col8x1_##SUFFIX, 8, 1, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col4x1_##SUFFIX, 4, 1, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col2x1_##SUFFIX, 2, 1, H, VF, VB, LOOK, ZT)                                       \
FG_NB4_COL(fg_nb4_col1x1_##SUFFIX, 1, 1, H, VF, VB, LOOK, ZT)                                       \
static void fg_nb4_##SUFFIX(const float* xp, const float* x, float* y, int64_t M, int64_t K,        \
                            int64_t N, int64_t BS, const uint8_t* b, const float* sc,               \
                            const void* zpv, const float* ct, int se, int threads) {                \
    const ZT* zp = (const ZT*)zpv;                                                                  \
    const int64_t nb = (K + BS - 1) / BS, KP = nb * BS;                                             \
    const int so = 4 - se;                                                                          \
    /* dynamic: a thread that starts late (another process held its core) finds the work taken and
       only has to arrive; a static half would make the others wait for it to do that half */       \
    _Pragma("omp parallel for num_threads(threads) schedule(dynamic, 16)")                          \
    for (int64_t p = 0; p < (N + 1) / 2; p++) { /* pairs of columns; an odd N's last one alone */   \
        const int64_t n = 2 * p;                                                                    \
        int64_t m0 = 0;                                                                             \
        if (n + 1 < N) {                                                                            \
            for (; m0 + 8 <= M; m0 += 8) FG_NB4_CALL(fg_nb4_col8x2_##SUFFIX);                       \
            if (M - m0 >= 4) { FG_NB4_CALL(fg_nb4_col4x2_##SUFFIX); m0 += 4; }                      \
            if (M - m0 >= 2) { FG_NB4_CALL(fg_nb4_col2x2_##SUFFIX); m0 += 2; }                      \
            if (M - m0 >= 1) FG_NB4_CALL(fg_nb4_col1x2_##SUFFIX);                                   \
        } else {                                                                                    \
            for (; m0 + 8 <= M; m0 += 8) FG_NB4_CALL(fg_nb4_col8x1_##SUFFIX);                       \
            if (M - m0 >= 4) { FG_NB4_CALL(fg_nb4_col4x1_##SUFFIX); m0 += 4; }                      \
            if (M - m0 >= 2) { FG_NB4_CALL(fg_nb4_col2x1_##SUFFIX); m0 += 2; }                      \
            if (M - m0 >= 1) FG_NB4_CALL(fg_nb4_col1x1_##SUFFIX);                                   \
        }                                                                                           \
    }                                                                                               \
}                                                                                                   \
static void fg_nb4_deq_##SUFFIX(float* w, int64_t n0, int64_t n1, int64_t K, int64_t BS,            \
                                const uint8_t* b, const float* sc, const void* zpv, const float* ct,\
                                int se, int threads) {                                              \
    const ZT* zp = (const ZT*)zpv;                                                                  \
    const int64_t nb = (K + BS - 1) / BS, KP = nb * BS;                                             \
    _Pragma("omp parallel for num_threads(threads) schedule(dynamic, 16)")                          \
    for (int64_t n = n0; n < n1; n++) {                                                             \
        const uint8_t* row = b + n * nb * (BS / 2);                                                 \
        float* out = w + (n - n0) * KP;                                                             \
        for (int64_t blk = 0; blk < nb; blk++) {                                                    \
            VF t[16 / H];                                                                           \
            FG_NB_TABLE(t, H, VF, ct, (float)zp[n * nb + blk], sc[n * nb + blk]);                   \
            for (int64_t k = blk * BS; k < (blk + 1) * BS; k += 2 * H) {                            \
                const VB q = *(const VB*)(row + k / 2);                                             \
                const VF lo = LOOK(t, q & 15), hi = LOOK(t, q >> 4);                                \
                if (k + 2 * H <= K) {                                                               \
                    *(VF*)(out + k) = lo;                                                           \
                    *(VF*)(out + k + H) = hi;                                                       \
                } else for (int l = 0; l < H; l++) { /* padding codes: 0, never (q - zp) * scale */ \
                    out[k + l] = k + 2 * l + (se != 0) < K ? lo[l] : 0.0f;                          \
                    out[k + H + l] = k + 2 * l + (se == 0) < K ? hi[l] : 0.0f;                      \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    }                                                                                               \
}
FG_NB4(c32_u8, 16, fg_nf16, fg_nb16, fg_nb_look16, uint8_t)
FG_NB4(c32_f32, 16, fg_nf16, fg_nb16, fg_nb_look16, float)
FG_NB4(c16_u8, 8, fg_nf8, fg_nb8, fg_nb_look8, uint8_t)
FG_NB4(c16_f32, 8, fg_nf8, fg_nb8, fg_nb_look8, float)

/* xp [M, KP]: x with each chunk of C = 2H columns as the H columns of its bytes' low nibbles (the even
   ones when se = 0), then the H of the high nibbles, zero past K. Serial (microseconds), so the
   product's threads meet once, at its end: a barrier costs a time slice when another process holds
   a core. */
__attribute__((visibility("default")))
void fg_permute_nbits4(const float* x, float* xp, int64_t M, int64_t K, int64_t BS, int se) {
    const int64_t H = BS % 32 == 0 ? 16 : 8, KP = (K + BS - 1) / BS * BS, low = se != 0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < KP / (2 * H); c++)
            for (int64_t j = 0; j < H; j++) {
                const int64_t k = c * 2 * H + 2 * j;
                xp[m * KP + c * 2 * H + j] = k + low < K ? x[m * K + k + low] : 0.0f;
                xp[m * KP + c * 2 * H + H + j] = k + 1 - low < K ? x[m * K + k + 1 - low] : 0.0f;
            }
}

/* y [M, N] = x [M, K] @ W^T, W[n, k] = (ct[q] - zp) * scale for code q of (n, k), the even column's
   code in bits [se, se + 4) of its byte; zp: uint8 (float_zp = 0) or float (1) per block; ct: the
   16 code values (0..15 for linear int4), 64-byte aligned; xp: M * KP floats, 64-byte aligned */
__attribute__((visibility("default")))
void fg_matmul_nbits4(const float* x, float* y, float* xp, int64_t M, int64_t K, int64_t N, int64_t BS,
                      const uint8_t* b, const float* sc, const void* zp, int float_zp, const float* ct,
                      int se, int threads) {
    fg_permute_nbits4(x, xp, M, K, BS, se);
    if (BS % 32 == 0) {
        (float_zp ? fg_nb4_c32_f32 : fg_nb4_c32_u8)(xp, x, y, M, K, N, BS, b, sc, zp, ct, se, threads);
    } else {
        (float_zp ? fg_nb4_c16_f32 : fg_nb4_c16_u8)(xp, x, y, M, K, N, BS, b, sc, zp, ct, se, threads);
    }
}

/* rows [n0, n1) of W dequantized into w [n1 - n0, KP] (64-byte aligned), columns in xp's order:
   the panel a library GEMM multiplies by xp when x has many rows (each weight then serves every
   row; dequantizing it inside the dot-product loop would repeat that per group of 8 rows) */
__attribute__((visibility("default")))
void fg_dequant_nbits4(float* w, int64_t n0, int64_t n1, int64_t K, int64_t BS, const uint8_t* b,
                       const float* sc, const void* zp, int float_zp, const float* ct, int se, int threads) {
    if (BS % 32 == 0) {
        (float_zp ? fg_nb4_deq_c32_f32 : fg_nb4_deq_c32_u8)(w, n0, n1, K, BS, b, sc, zp, ct, se, threads);
    } else {
        (float_zp ? fg_nb4_deq_c16_f32 : fg_nb4_deq_c16_u8)(w, n0, n1, K, BS, b, sc, zp, ct, se, threads);
    }
}
"""


@functools.cache
def library():
    """The compiled entry points (fg_matmul_nbits4, fg_dequant_nbits4, fg_permute_nbits4), typed."""
    import ctypes

    from ....ir.dtypes import DType
    from .build import build_library
    from .kernels import KernelSource

    src = KernelSource(name="fg_matmul_nbits4", code=SOURCE, helpers=(), in_dtypes=(DType.float32,),
                       out_dtype=DType.float32)
    lib = build_library([src])
    fn = lib.kernels["fg_matmul_nbits4"]._fn
    p, i, c = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    fn.argtypes = [p, p, p, i, i, i, i, p, p, p, c, p, c, c]
    fn.restype = None
    dequant = lib._dll["fg_dequant_nbits4"]
    dequant.argtypes = [p, i, i, i, i, p, p, p, c, p, c, c]
    dequant.restype = None
    permute = lib._dll["fg_permute_nbits4"]
    permute.argtypes = [p, p, i, i, i, c]
    permute.restype = None
    return fn, dequant, permute

"""C for Winograd's minimal filtering of 3 x 3 convolutions, F(m x m, 3 x 3) with m = 2 or 4 (Lavin
and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015): a tile of m x m outputs from an
a x a input tile (a = m + 2) as a^2 products instead of 9 m^2 (F(4, 3): 36 against 144).

    V[p][t][c] = (B^T d_t,c B)[p]      input transform: each tile t's a x a patch, per channel
    M[p]       = V[p] @ U[p]           a^2 products [T, C] @ [C, K] (oneDNN's batched matmul)
    y_t,k      = A^T M[:, t, k] A      output transform: m x m outputs, + bias, the epilogue chain

The tiles (t = (n * TH + ty) * TW + tx over the batch) go through in chunks of at most TC: a call
transforms tiles [d[0], d[0] + d[1]) into or out of rows 0.. of V and M, which hold TC rows, so
that a large batch's V and M stay in the cache between the three steps (kernels/winograd.py).

U[p] = (G g G^T)[p] is the weights' transform, made once at compile time in float64 (`weights`).
Tensors are channels-last (N, H, W, C): a tile's values for one channel are C apart, so each kernel's
innermost loop runs over a block of channels and vectorizes. The transforms are written out from the
matrices (`_products`), zero coefficients skipped and +-1 as additions.

    input  kernel: p[0] V [a^2, TC, C]   p[1] x [N, H, W, C]
    output kernel: p[0] y [N, HO, WO, K]   p[1] M [a^2, TC, K]   p[2] bias [K]   p[3..] residuals, as y
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction as F

import numpy as np

from ....ir.dtypes import DType
from ..ops import Activation
from .c_expr import CRenderer
from .kernels import KernelSource, finish
from .small_conv import conv_epilogue

# (B^T, G, A^T) per output tile size m; the interpolation points 0, -1, 1 (m = 2) and 0, +-1, +-2 (m = 4)
MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [F(1, 2), F(1, 2), F(1, 2)], [F(1, 2), F(-1, 2), F(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[F(1, 4), 0, 0], [F(-1, 6), F(-1, 6), F(-1, 6)], [F(-1, 6), F(1, 6), F(-1, 6)],
         [F(1, 24), F(1, 12), F(1, 6)], [F(1, 24), F(-1, 12), F(1, 6)], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}
BLOCK = 64  # channels per pass of a tile (a^2 x BLOCK floats of stack: 9 KiB at a = 6)


def weights(w: np.ndarray, m: int) -> np.ndarray:
    """U [a^2, C, K] (float32) of convolution weights w [K, C, 3, 3]: G g G^T per (k, c), in float64."""
    g = np.array(MATRICES[m][1], dtype=np.float64)
    u = np.einsum("ai,kcij,bj->abck", g, np.asarray(w, np.float64), g)
    return np.ascontiguousarray(u.reshape(-1, *u.shape[2:]), np.float32)


def _term(coef, name: str) -> str:
    c = F(coef)
    if c == 1:
        return f"+ {name}"
    if c == -1:
        return f"- {name}"
    sign = "-" if c < 0 else "+"
    return f"{sign} {float(abs(c))!r}f * {name}"


def _products(mat, src: Sequence[str], dst: Sequence[str]) -> list[str]:
    """`float dst[r] = sum_i mat[r][i] * src[i];` for each row r, zero terms skipped."""
    lines = []
    for r, row in enumerate(mat):
        terms = " ".join(_term(c, s) for c, s in zip(row, src) if c != 0)
        lines.append(f"const float {dst[r]} = {terms.removeprefix('+ ') or '0.0f'};")
    return lines


def _two_sided(mat, src: str, dst: str) -> list[str]:
    """dst = mat X mat^T on the a x a scalars X named {src}{i}_{j} (a: mat's columns), into
    {dst}{r}_{s}, through t."""
    n, a = len(mat), len(mat[0])
    lines = []
    for j in range(a):  # columns: t = mat X
        lines += _products(mat, [f"{src}{i}_{j}" for i in range(a)], [f"t{r}_{j}" for r in range(n)])
    for r in range(n):  # rows: dst = t mat^T
        lines += _products(mat, [f"t{r}_{j}" for j in range(a)], [f"{dst}{r}_{s}" for s in range(n)])
    return lines


def input_kernel(h: int, w: int, c: int, m: int, pad_top: int, pad_left: int, th: int, tw: int,
                 chunk: int) -> KernelSource:
    a = m + 2
    bt = MATRICES[m][0]
    loads = "".join(f"            const float d{i}_{j} = buf[{i * a + j}][c];\n" for i in range(a) for j in range(a))
    body = "".join(f"            {s}\n" for s in _two_sided(bt, "d", "v"))
    stores = "".join(f"            v[({r * a + s} * TC + t - t0) * C + c0 + c] = v{r}_{s};\n" for r in range(a) for s in range(a))
    template = f"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {{
    enum {{ H = {h}, W = {w}, C = {c}, M = {m}, A = {a}, TH = {th}, TW = {tw}, PT = {pad_top}, PL = {pad_left},
           TC = {chunk}, CB = {BLOCK} }};
    float *v = (float *)p[0];
    const float *x = (const float *)p[1];
    const int64_t t0 = d[0], t1 = d[0] + d[1];
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t t = t0; t < t1; t++) {{
        const int64_t b = t / (TH * TW), y0 = (t / TW) % TH * M - PT, x0 = t % TW * M - PL;
        float buf[A * A][CB] __attribute__((aligned(64)));
        for (int64_t c0 = 0; c0 < C; c0 += CB) {{
            const int64_t cn = C - c0 < CB ? C - c0 : CB;
            for (int i = 0; i < A; i++)
                for (int j = 0; j < A; j++) {{
                    const int64_t yy = y0 + i, xx = x0 + j;
                    if (yy >= 0 && yy < H && xx >= 0 && xx < W)
                        memcpy(buf[i * A + j], x + ((b * H + yy) * W + xx) * C + c0, cn * sizeof(float));
                    else
                        memset(buf[i * A + j], 0, cn * sizeof(float));
                }}
            for (int64_t c = 0; c < cn; c++) {{
{loads}{body}{stores}            }}
        }}
    }}
}}
"""
    return finish(template, CRenderer(prefix="e"), "winograd_in", in_dtypes=(DType.float32,), out_dtype=DType.float32)


def output_kernel(ho: int, wo: int, k: int, m: int, th: int, tw: int, chunk: int, has_bias: bool,
                  chain: Sequence[Activation]) -> KernelSource:
    a = m + 2
    at = MATRICES[m][2]
    r, residuals, epilogue, n_res = conv_epilogue(chain, first=3)
    loads = "".join(f"            const float m{i}_{j} = mm[({i * a + j} * TC + t - t0) * K + k0 + q];\n"
                    for i in range(a) for j in range(a))
    body = "".join(f"            {s}\n" for s in _two_sided(at, "m", "y"))
    stores = "".join(f"            buf[{i * m + j}][q] = y{i}_{j};\n" for i in range(m) for j in range(m))
    bias = "buf[i * M + j][q] + bias[k0 + q]" if has_bias else "buf[i * M + j][q]"
    template = f"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {{
    enum {{ HO = {ho}, WO = {wo}, K = {k}, M = {m}, A = {a}, TH = {th}, TW = {tw}, TC = {chunk}, KB = {BLOCK} }};
    float *o = (float *)p[0];
    const float *mm = (const float *)p[1], *bias = (const float *)p[2];
{residuals}    (void)bias;
    const int64_t t0 = d[0], t1 = d[0] + d[1];
    #pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
    for (int64_t t = t0; t < t1; t++) {{
        const int64_t b = t / (TH * TW), y0 = (t / TW) % TH * M, x0 = t % TW * M;
        const int64_t hi = HO - y0 < M ? HO - y0 : M, wj = WO - x0 < M ? WO - x0 : M;
        float buf[M * M][KB] __attribute__((aligned(64)));
        for (int64_t k0 = 0; k0 < K; k0 += KB) {{
            const int64_t kn = K - k0 < KB ? K - k0 : KB;
            for (int64_t q = 0; q < kn; q++) {{
{loads}{body}{stores}            }}
            for (int64_t i = 0; i < hi; i++)
                for (int64_t j = 0; j < wj; j++)
                    for (int64_t q = 0; q < kn; q++) {{
                        const int64_t at = ((b * HO + y0 + i) * WO + x0 + j) * K + k0 + q;
                        float v = {bias};
{epilogue}                        o[at] = v;
                    }}
        }}
    }}
}}
"""
    return finish(template, r, "winograd_out", in_dtypes=(DType.float32,) * (2 + n_res), out_dtype=DType.float32)

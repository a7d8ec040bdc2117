"""C for tiny float32 convolutions (a few hundred thousand multiply-adds: silero-vad's 1-D convs):
the taps as a table of input positions worked out at compile time, the products accumulated over
the output channels in the innermost (vectorized) loop, bias and the epilogue chain applied as each
output value is stored. Below oneDNN's cost per call these were numpy's im2col + BLAS (small.py),
a few numpy calls each; as C they are one call, which a native program (native_program.py) makes
from C with its neighbours. 1-D signals of many positions: small_conv1d.py.

    p[0] out [N, M, S_OUT]   p[1] x [N, C, S_IN]   p[2] w [G, CG * TAPS, MG]   p[3] bias [M]
    p[4] taps [TAPS * S_OUT] (int64; S_IN: a padding zero)   p[5..] residuals [N, M, S_OUT]

A residual may be the output's own buffer: each value is read before the same value is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from ....ir.dtypes import DType
from ..ops import RESIDUAL, Activation, activation_expr
from .c_expr import CRenderer, CValue
from .kernels import KernelSource, finish


def conv_epilogue(chain: Sequence[Activation], first: int = 5) -> tuple[CRenderer, str, str, int]:
    """(renderer, residual pointer lines (the residuals from p[first] on), the chain's statements on
    `v` at output index `at`, residuals)."""
    r = CRenderer(prefix="e")
    lines, n_res = [], 0
    for name, a, b in chain:
        if name == RESIDUAL:
            lines.append(f"v = v + r{n_res}[at];")
            n_res += 1
            continue
        stmts, result = r.render(activation_expr(name, a, b), [CValue("v", DType.float32)], DType.float32)
        lines.append("{ " + " ".join(stmts) + f" v = {result}; }}")
    residuals = "".join(f"    const float *r{k} = (const float *)p[{first + k}];\n" for k in range(n_res))
    return r, residuals, "".join(f"                {x}\n" for x in lines), n_res


def small_conv_kernel(n: int, c: int, s_in: int, groups: int, m: int, taps: int, s_out: int, has_bias: bool,
                      chain: Sequence[Activation]) -> KernelSource:
    cg, mg = c // groups, m // groups
    r, residuals, epilogue, n_res = conv_epilogue(chain)
    bias = "acc[j] + bias[g * MG + j]" if has_bias else "acc[j]"
    template = f"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {{
    enum {{ N = {n}, C = {c}, S_IN = {s_in}, G = {groups}, CG = {cg}, MG = {mg}, TAPS = {taps}, S_OUT = {s_out} }};
    float *o = (float *)p[0];
    const float *x = (const float *)p[1], *w = (const float *)p[2], *bias = (const float *)p[3];
    const int64_t *tap = (const int64_t *)p[4];
{residuals}    (void)d; (void)nt; (void)bias;
    float acc[MG];
    for (int64_t b = 0; b < N; b++)
    for (int64_t g = 0; g < G; g++)
        for (int64_t q = 0; q < S_OUT; q++) {{
            for (int64_t j = 0; j < MG; j++) acc[j] = 0.0f;
            for (int64_t ci = 0; ci < CG; ci++) {{
                const float *xc = x + (b * C + g * CG + ci) * S_IN;
                for (int64_t t = 0; t < TAPS; t++) {{
                    const int64_t s = tap[t * S_OUT + q];
                    if (s == S_IN) continue;
                    const float xv = xc[s];
                    const float *wr = w + ((g * CG + ci) * TAPS + t) * MG;
                    for (int64_t j = 0; j < MG; j++) acc[j] += wr[j] * xv;
                }}
            }}
            for (int64_t j = 0; j < MG; j++) {{
                const int64_t at = (b * G * MG + g * MG + j) * S_OUT + q;
                float v = {bias};
{epilogue}                o[at] = v;
            }}
        }}
}}
"""
    return conv_source(template, r, "small_conv", n_res)


def conv_source(template: str, r: CRenderer, prefix: str, n_res: int) -> KernelSource:
    """The kernel of a small convolution's template: out, x, w, bias, taps, then its residuals."""
    f32 = DType.float32
    return finish(template, r, prefix, in_dtypes=(f32, f32, f32, f32, DType.int64) + (f32,) * n_res, out_dtype=f32)


_MAX_POOL = r"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    enum { ROWS = %(rows)d, S_IN = %(s_in)d, TAPS = %(taps)d, S_OUT = %(s_out)d };
    float *o = (float *)p[0];
    const float *x = (const float *)p[1];
    const int64_t *tap = (const int64_t *)p[2];
    (void)d; (void)nt;
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t q = 0; q < S_OUT; q++) {
            float v = -INFINITY;
            int nan = 0;
            for (int64_t t = 0; t < TAPS; t++) {
                const int64_t s = tap[t * S_OUT + q];
                if (s == S_IN) continue;  /* padding: -infinity, never the maximum */
                const float a = x[r * S_IN + s];
                nan |= a != a;
                v = a > v ? a : v;
            }
            o[r * S_OUT + q] = nan ? NAN : v;  /* numpy's maximum keeps a NaN */
        }
}
"""


def small_max_pool_kernel(rows: int, s_in: int, taps: int, s_out: int) -> KernelSource:
    """Max pooling of `rows` (N * C) planes of s_in positions: each output the maximum of its taps
    (a table as a small convolution's: S_IN marks padding), NaN if any tap is NaN, as the reference."""
    from .kernels import _content_name

    code = _MAX_POOL % {"rows": rows, "s_in": s_in, "taps": taps, "s_out": s_out}
    fields = {"in_dtypes": (DType.float32, DType.int64), "out_dtype": DType.float32}
    name = _content_name("small_max_pool", code, (), fields)
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=(), **fields)

"""C text of the scalar helpers that generated kernels call: vectorizable float32 exp/erf/tanh/sigmoid
and numpy's integer and modulo semantics.

The float32 approximations are branch-free (selects, no calls) so gcc vectorizes the loops that use
them; libm's scalar `expf`/`erff`/`tanhf` would keep those loops scalar. Measured against float64 libm
over every float32 in range (see tests/targets/cpu/test_codegen.py for the sampled check), the largest
relative errors are: exp 8.5e-8, erf 2.2e-7, tanh 1.4e-7, sigmoid 2.0e-7 (about 1-2 ulp; results that
underflow to denormals are within 1.1e-45 absolute). Coefficients: exp from Cephes, erf and tanh fitted
(relative minimax on Chebyshev nodes) for this code.
"""

from __future__ import annotations

from ....ir.dtypes import DType

# The prelude every translation unit starts with: includes, FMA when the CPU has it, bit casts,
# bfloat16 conversions and the thread-count rule (no OpenMP fork below `grain` work per thread).
PRELUDE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#ifdef __FMA__
#define FG_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define FG_FMAF(a, b, c) ((a) * (b) + (c))
#endif
#define FG_EXPORT __attribute__((visibility("default")))
static inline float fg_bits_to_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline int32_t fg_float_to_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }
static inline float fg_bf16_to_f32(uint16_t h) { return fg_bits_to_float((int32_t)((uint32_t)h << 16)); }
static inline uint16_t fg_f32_to_bf16(float f) {  /* round to nearest even; NaN stays a quiet NaN */
    const uint32_t u = (uint32_t)fg_float_to_bits(f);
    return (uint16_t)(f != f ? (u >> 16) | 0x40u : (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float fg_round_bf16(float f) { return fg_bf16_to_f32(fg_f32_to_bf16(f)); }
/* float16 <-> float32 in integer and float32 operations that gcc vectorizes (its _Float16 casts do not
   vectorize without AVX-512 FP16): exact widening; narrowing rounds to nearest even like the
   hardware's (and numpy's) conversion, past 65504 to infinity, a NaN to a quiet NaN keeping its
   payload's top bits */
static inline float fg_f16_to_f32(uint16_t h) {
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13, sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t normal = em + ((uint32_t)(127 - 15) << 23);
    const uint32_t special = em + ((uint32_t)(255 - 31) << 23);  /* inf, NaN */
    const float sub = fg_bits_to_float((int32_t)(normal + (1u << 23))) - fg_bits_to_float(113 << 23);
    const uint32_t bits = em >= (0x7c00u << 13) ? special : (em < (0x0400u << 13) ? (uint32_t)fg_float_to_bits(sub) : normal);
    return fg_bits_to_float((int32_t)(bits | sign));
}
static inline uint16_t fg_f32_to_f16(float v) {
    const uint32_t u = (uint32_t)fg_float_to_bits(v), sign = (u >> 16) & 0x8000u, f = u & 0x7fffffffu;
    const uint32_t nan = 0x7e00u | ((f >> 13) & 0x3ffu);
    const uint32_t big = f > 0x7f800000u ? nan : 0x7c00u;  /* (65520 and above round to infinity below) */
    const float denorm_magic = fg_bits_to_float(((127 - 15) + (23 - 10) + 1) << 23);
    const uint32_t sub = (uint32_t)fg_float_to_bits(fg_bits_to_float((int32_t)f) + denorm_magic)
                         - (uint32_t)fg_float_to_bits(denorm_magic);
    const uint32_t norm = (f + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((f >> 13) & 1u)) >> 13;
    const uint32_t o = f >= 0x47800000u ? big : (f < (113u << 23) ? sub : norm);
    return (uint16_t)(o | sign);
}
static inline float fg_round_f16(float f) { return fg_f16_to_f32(fg_f32_to_f16(f)); }
static inline int fg_threads(int nt, int64_t work, int64_t grain) {
    int64_t use = work / grain;
    if (use > nt) use = nt;
    return use < 1 ? 1 : (int)use;
}
"""

_FAST = {
    # exp(x) = 2^n exp(r): n = round(x / ln2) by the 1.5 * 2^23 trick, r by Cody-Waite with ln2 in two
    # parts, exp(r) by Cephes' degree-7 polynomial; 2^n applied as two factors so results down to
    # denormals and up to overflow round once. Below -103.97208 (where expf is 0) the lane computes
    # exp(0) and is replaced by 0: an underflowing multiply costs a microcode assist per vector, which
    # made masked softmax (exp(-1e4)) 3x slower. NaN passes through (its compares are false).
    "fg_expf": r"""
static inline float fg_expf(float x) {
    const int zero = x < -103.97208f;
    const float xc = zero ? 0.0f : (x > 89.0f ? 89.0f : x);
    const float t = FG_FMAF(xc, 1.44269504088896341f, 12582912.0f);
    const float n = t - 12582912.0f;
    const int32_t ni = fg_float_to_bits(t) - 0x4B400000;
    float r = FG_FMAF(n, -0.693359375f, xc);
    r = FG_FMAF(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = FG_FMAF(p, r, 1.3981999507e-3f);
    p = FG_FMAF(p, r, 8.3334519073e-3f);
    p = FG_FMAF(p, r, 4.1665795894e-2f);
    p = FG_FMAF(p, r, 1.6666665459e-1f);
    p = FG_FMAF(p, r, 5.0000001201e-1f);
    p = FG_FMAF(p, r * r, r) + 1.0f;
    const int32_t n1 = ni >> 1, n2 = ni - n1;
    const float r2 = p * fg_bits_to_float((n1 + 127) << 23) * fg_bits_to_float((n2 + 127) << 23);
    return zero ? 0.0f : r2;
}
""",
    # erf: x P(x^2) below 0.921875; above, 1 - exp(Q(|x| - 2.4)) with Q ~ log(erfc) (no cancellation:
    # erf >= 0.8 there); 1 from 3.95 on, where erfc < half an ulp of 1.
    "fg_erff": r"""
static inline float fg_erff(float x) {
    const float a = fabsf(x), s = x * x;
    float p = -6.013533566147089e-4f;
    p = FG_FMAF(p, s, 4.9980334006249905e-3f);
    p = FG_FMAF(p, s, -2.677025832235813e-2f);
    p = FG_FMAF(p, s, 0.11281928420066833f);
    p = FG_FMAF(p, s, -0.3761250674724579f);
    p = FG_FMAF(p, s, 1.1283791065216064f);
    const float small = p * x;
    const float u = (a > 3.95f ? 3.95f : a) - 2.4f;
    float q = -1.7094791360250383e-8f;
    q = FG_FMAF(q, u, 1.6349601992260432e-6f);
    q = FG_FMAF(q, u, -1.4506767001876142e-5f);
    q = FG_FMAF(q, u, 8.707476081326604e-5f);
    q = FG_FMAF(q, u, -4.696407704614103e-4f);
    q = FG_FMAF(q, u, 2.387433312833309e-3f);
    q = FG_FMAF(q, u, -1.1768070049583912e-2f);
    q = FG_FMAF(q, u, -0.9405019283294678f);
    q = FG_FMAF(q, u, -5.164236545562744f);
    q = FG_FMAF(q, u, -7.280974864959717f);
    float big = a >= 3.95f ? 1.0f : 1.0f - fg_expf(q);
    big = copysignf(big, x);
    return a < 0.921875f ? small : big;
}
""",
    # tanh: x + x^3 P(x^2) below 0.625; above, 1 - 2 / (exp(2|x|) + 1), which is >= 0.55 there so the
    # subtraction loses nothing; exp overflowing to inf gives exactly 1.
    "fg_tanhf": r"""
static inline float fg_tanhf(float x) {
    const float a = fabsf(x), s = x * x;
    float p = 2.2096617612987757e-3f;
    p = FG_FMAF(p, s, -8.254398591816425e-3f);
    p = FG_FMAF(p, s, 2.173379249870777e-2f);
    p = FG_FMAF(p, s, -5.3953222930431366e-2f);
    p = FG_FMAF(p, s, 0.13333261013031006f);
    p = FG_FMAF(p, s, -0.3333333134651184f);
    const float small = FG_FMAF(p * s, x, x);
    const float e = fg_expf(2.0f * a);
    const float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
    return a < 0.625f ? small : big;
}
""",
    # log: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' degree-9 polynomial of m - 1, e ln2
    # added in two parts; a denormal is scaled by 2^23 first. The special values as logf's: 0 -> -inf,
    # a negative or NaN -> NaN, inf -> inf. (libm's logf is one scalar call per element.)
    "fg_logf": r"""
static inline float fg_logf(float x) {
    const int den = x < 1.17549435e-38f;
    const float xs = den ? x * 8388608.0f : x;
    const int32_t i = fg_float_to_bits(xs);
    float e = (float)(((i >> 23) & 0xff) - 126 - (den ? 23 : 0));
    float m = fg_bits_to_float((i & 0x007fffff) | 0x3f000000);
    const int lo = m < 0.707106781186547524f;
    e = lo ? e - 1.0f : e;
    m = lo ? m + m - 1.0f : m - 1.0f;
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = FG_FMAF(y, m, -1.1514610310e-1f);
    y = FG_FMAF(y, m, 1.1676998740e-1f);
    y = FG_FMAF(y, m, -1.2420140846e-1f);
    y = FG_FMAF(y, m, 1.4249322787e-1f);
    y = FG_FMAF(y, m, -1.6668057665e-1f);
    y = FG_FMAF(y, m, 2.0000714765e-1f);
    y = FG_FMAF(y, m, -2.4999993993e-1f);
    y = FG_FMAF(y, m, 3.3333331174e-1f);
    y = y * m * z;
    y = FG_FMAF(e, -2.12194440e-4f, y);
    y = FG_FMAF(z, -0.5f, y);
    const float r = FG_FMAF(e, 0.693359375f, m + y);
    return x > 0.0f ? (x < INFINITY ? r : x) : (x == 0.0f ? -INFINITY : NAN);
}
""",
    # sigmoid without overflow or cancellation on either side: e = exp(-|x|) <= 1.
    "fg_sigmoidf": r"""
static inline float fg_sigmoidf(float x) {
    const float e = fg_expf(-fabsf(x));
    const float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}
""",
    # pow as ONNX Runtime's CPU Pow computes it: an exponent of 2 or 3 multiplies (x * x is powf's
    # correctly rounded answer; x * x * x within an ulp of it), the rest libm's powf. GPT's tanh GELU
    # (x^3 of every activation) spent most of its time in powf; the branch is the same for every
    # element of a broadcast exponent
    "fg_powf": r"""
static inline float fg_powf(float a, float b) {
    return b == 2.0f ? a * a : (b == 3.0f ? a * a * a : powf(a, b));
}
""",
    "fg_sigmoidf_libm": r"""
static inline float fg_sigmoidf_libm(float x) {
    const float e = expf(-fabsf(x));
    const float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;
}
""",
    "fg_sigmoid": r"""
static inline double fg_sigmoid(double x) {
    const double e = exp(-fabs(x));
    const double s = 1.0 / (1.0 + e);
    return x >= 0.0 ? s : e * s;
}
""",
}
DEPENDS = {"fg_erff": ("fg_expf",), "fg_tanhf": ("fg_expf",), "fg_sigmoidf": ("fg_expf",)}


def fast_helper(name: str) -> str:
    return _FAST[name]


def int_helper(op: str, dt: DType, c: str) -> tuple[str, str]:
    """(name, C definition) of numpy's integer div (truncating, x/0 = 0), fmod or mod (floored) for dt.
    Divisor -1 is answered without dividing: INT_MIN / -1 traps on x86."""
    name = f"fg_{op}_{dt.value}"
    signed = dt.is_signed
    if op == "div":
        body = ("return b == 0 ? 0 : (b == -1 ? (" + c + ")(0 - a) : a / b);") if signed else \
            "return b == 0 ? 0 : a / b;"
    elif op == "fmod":
        body = "return (b == 0 || b == -1) ? 0 : a % b;" if signed else "return b == 0 ? 0 : a % b;"
    else:  # mod: the remainder takes the divisor's sign, as Python's %
        body = (f"if (b == 0 || b == -1) return 0;\n    const {c} r = a % b;\n"
                f"    return (r != 0 && ((r < 0) != (b < 0))) ? ({c})(r + b) : r;") if signed else \
            "return b == 0 ? 0 : a % b;"
    return name, f"static inline {c} {name}({c} a, {c} b) {{\n    {body}\n}}\n"


def float_mod_helper(dt: DType, c: str) -> tuple[str, str]:
    """numpy's floating `mod` (npy_divmod): fmod, moved to the divisor's sign, signed zero kept."""
    sfx = "" if dt == DType.float64 else "f"
    name = f"fg_mod_{dt.value}"
    return name, (
        f"static inline {c} {name}({c} a, {c} b) {{\n"
        f"    {c} m = fmod{sfx}(a, b);\n"
        f"    if (b == 0) return m;\n"
        f"    if (m != 0) {{ if ((b < 0) != (m < 0)) m += b; }} else m = copysign{sfx}(0, b);\n"
        f"    return m;\n}}\n")

"""C source of `dynamic_quantize_lstm` (ORT's DynamicQuantizeLSTM, as ops/quantized_nn.py defines it).

Unlike the float recurrence (codegen/recurrent.py), the batch items of a step are coupled: every
step quantizes the direction's whole H[batch, H] with one scale, so the kernel walks the steps in
ORT's order (a reverse direction runs forward over each item's reversed sequence; an item whose
sequence has ended has zero H and C from then on and its final state is the one at its last step).
X is quantized once (all of it); both products are exact int32 sums of (q - zp) (W - W_zp), scaled
in float32 by a_scale * w_scale per column; ORT adds Wb + Rb after both products.

Arguments (ptrs): 0 X[T * batch, in], 1 W - W_zp int32[dirs, in, 4H], 2 R - R_zp int32[dirs, H, 4H],
3 W_scale[dirs, 4H], 4 R_scale[dirs, 4H], 5 Wb + Rb[dirs, 4H], 6 P[dirs, 3H], 7 sequence_lens int64
[batch] or NULL, 8 initial_h or NULL, 9 initial_c or NULL, 10 Y[T, dirs, batch, H], 11 Y_h, 12 Y_c.
"""

from __future__ import annotations

from ....ir.dtypes import DType
from .kernels import KernelSource, _content_name
from .recurrent import _F32, STEPS, activation_defines, float_helpers

_TEMPLATE = r"""
/* ORT's dynamic uint8 quantization of a[0:n] (GetQuantizationParameter): sets q = (uint8 - zp) */
static void KNAME_quantize(const float* restrict a, int64_t n, int32_t* restrict q, float* scale) {
    float lo = 0, hi = 0;
    for (int64_t e = 0; e < n; e++) { lo = a[e] < lo ? a[e] : lo; hi = a[e] > hi ? a[e] : hi; }
    const float sc = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    float zp = 0.0f - lo / sc;
    zp = nearbyintf(zp < 0 ? 0 : (zp > 255 ? 255 : zp));
    for (int64_t e = 0; e < n; e++) {
        float v = nearbyintf(a[e] / sc) + zp;
        v = v < 0 ? 0 : (v > 255 ? 255 : v);
        q[e] = (int32_t)v - (int32_t)zp;
    }
    *scale = sc;
}

/* out[0:GH] = float(q[0:n] @ w[0:n, 0:GH]) * (scale * ws) */
static inline void KNAME_product(const int32_t* restrict q, const int32_t* restrict w, int n, float scale,
                                 const float* restrict ws, float* restrict out) {
    int32_t acc[GH];
    for (int j = 0; j < GH; j++) acc[j] = 0;
    for (int i = 0; i < n; i++) {
        const int32_t qi = q[i];
        if (!qi) continue;
        const int32_t* row = w + (int64_t)i * GH;
        for (int j = 0; j < GH; j++) acc[j] += qi * row[j];
    }
    for (int j = 0; j < GH; j++) out[j] = (float)acc[j] * (scale * ws[j]);
}

static void KNAME_dir(int k, void** p, const float* xw) {
    const int32_t* rq = (const int32_t*)p[2] + (int64_t)k * H * GH;
    const float* rs = (const float*)p[4] + (int64_t)k * GH;
    const float* bias = (const float*)p[5] + (int64_t)k * GH;
    const float* pp = (const float*)p[6] + (int64_t)k * 3 * H;
    const int64_t* lens = (const int64_t*)p[7];
    const float* h0 = (const float*)p[8];
    const float* c0 = (const float*)p[9];
    float* y = (float*)p[10];
    float *yh = (float*)p[11] + (int64_t)k * BATCH * H, *yc = (float*)p[12] + (int64_t)k * BATCH * H;
    (void)pp;
    float hs[BATCH * H], cs[BATCH * H], acc[GH];
    int32_t hq[BATCH * H];
    for (int e = 0; e < BATCH * H; e++) {
        hs[e] = yh[e] = h0 ? h0[(int64_t)k * BATCH * H + e] : 0;
        cs[e] = yc[e] = c0 ? c0[(int64_t)k * BATCH * H + e] : 0;
    }
    for (int s = 0; s < T; s++) {
        float sc;
        KNAME_quantize(hs, BATCH * H, hq, &sc);
        for (int b = 0; b < BATCH; b++) {
            float* h = hs + b * H;
            float* c = cs + b * H;
            const int len = lens ? (int)lens[b] : T;
            const int t = REVERSE && s < len ? len - 1 - s : s;  /* the step it reads and writes */
            float* yt = y + (((int64_t)t * DIRS + k) * BATCH + b) * H;
            if (s >= len) {  /* ended: zero H and C (they take part in the next steps' scale) */
                for (int j = 0; j < H; j++) h[j] = c[j] = yt[j] = 0;
                continue;
            }
            KNAME_product(hq + b * H, rq, H, sc, rs, acc);
            const float* x = xw + (((int64_t)t * BATCH + b) * DIRS + k) * GH;
            for (int j = 0; j < GH; j++) acc[j] = (x[j] + acc[j]) + bias[j];
STEP
            for (int j = 0; j < H; j++) yt[j] = h[j];
            if (s == len - 1)
                for (int j = 0; j < H; j++) { yh[b * H + j] = h[j]; yc[b * H + j] = c[j]; }
        }
    }
}

FG_EXPORT void KNAME(void** p, const int64_t* d, int nt) {
    (void)d;
    /* every step's and direction's input product: X quantized once, all of it */
    float* xw = (float*)malloc(sizeof(float) * T * BATCH * DIRS * GH);
    int32_t* xq = (int32_t*)malloc(sizeof(int32_t) * T * BATCH * IN);
    float sc;
    KNAME_quantize((const float*)p[0], (int64_t)T * BATCH * IN, xq, &sc);
    for (int64_t r = 0; r < (int64_t)T * BATCH; r++)
        for (int k = 0; k < DIRS; k++)
            KNAME_product(xq + r * IN, (const int32_t*)p[1] + (int64_t)k * IN * GH, IN, sc,
                          (const float*)p[3] + (int64_t)k * GH, xw + (r * DIRS + k) * GH);
    free(xq);
    if (DIRS > 1 && nt > 1) {
        #pragma omp parallel for num_threads(2) schedule(static, 1)
        for (int k = 0; k < DIRS; k++) KNAME_dir(k, p, xw);
    } else {
        for (int k = 0; k < DIRS; k++) KNAME_dir(k, p, xw);
    }
    free(xw);
}
"""


def dynamic_quantize_lstm_kernel(op, t_len: int, batch: int, n_in: int, peepholes: bool) -> KernelSource:
    """The whole of `dynamic_quantize_lstm` op `op` over float32 X[t_len, batch, n_in]."""
    h, dirs = op.hidden_size, op.num_directions
    consts = {"FT": "float", "H": h, "GH": 4 * h, "T": t_len, "BATCH": batch, "DIRS": dirs, "IN": n_in,
              "REVERSE": "(k == 1)" if dirs == 2 else int(op.direction == "reverse"),
              "INPUT_FORGET": int(op.input_forget),
              "PI": "pp[j]" if peepholes else "0", "PO": "pp[H + j]" if peepholes else "0",
              "PF": "pp[2 * H + j]" if peepholes else "0"}
    lines = activation_defines(op, _F32, "f")
    undefs = [*consts, *(f"ACT{j}" for j in range(op.n_activations))]
    code = "\n".join([*(f"#define {k} {v}" for k, v in consts.items()), *lines,
                      _TEMPLATE.replace("STEP", STEPS["lstm"]), *(f"#undef {k}" for k in undefs)])
    helpers = tuple(float_helpers())
    f32, i32 = DType.float32, DType.int32
    in_dtypes = (f32, i32, i32, f32, f32, f32, f32, DType.int64, f32, f32, f32, f32, f32)
    name = _content_name("fg_dqlstm", code, helpers, {"dtype": "float32"})
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=helpers, in_dtypes=in_dtypes,
                        out_dtype=f32)

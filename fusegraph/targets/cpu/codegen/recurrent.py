"""C source of a recurrent layer's time loop (`rnn`, `gru`, `lstm`; ONNX semantics, as ops/rnn.py).

The input projection of every step (X W^T plus the biases that can be summed in) is one GEMM done
before the call; the kernel runs the recurrence: per step and batch item one product of the state
with R^T (rows unrolled by four so each pass over the gate accumulators does four rows), then the
gates fused in one pass over the hidden units, clip and activations inlined. Directions run on
their own threads. Shapes, flags, activations and their alpha/beta are baked in.

Arguments (ptrs): 0 XW[T, batch, dirs, G*H], 1 R^T[dirs, H, G*H], 2 Rb[dirs, G*H] (GRU's linear-
before-reset candidate bias; else unused), 3 P[dirs, 3*H] (lstm), 4 sequence_lens int64[batch] or
NULL, 5 initial_h or NULL, 6 initial_c or NULL, 7 Y[T, dirs, batch, H], 8 Y_h, 9 Y_c.
"""

from __future__ import annotations

from collections.abc import Sequence

from ....ir.dtypes import DType
from .c_expr import CodegenUnsupported
from .cmath import DEPENDS, fast_helper
from .kernels import KernelSource, _content_name

# ONNX activation name -> C expression over x, with $A and $B its alpha and beta (float32 helpers;
# the float64 kernel swaps them for libm's), as ops.rnn.ACTIVATIONS computes them
ACTIVATION_C = {
    "relu": "(x > 0 ? x : 0)",
    "tanh": "fg_tanhf(x)",
    "sigmoid": "fg_sigmoidf(x)",
    "affine": "($A * x + $B)",
    "leakyrelu": "(x >= 0 ? x : $A * x)",
    "thresholdedrelu": "(x > $A ? x : 0)",
    "scaledtanh": "($A * fg_tanhf($B * x))",
    "hardsigmoid": "FMIN(FMAX($A * x + $B, 0), 1)",
    "elu": "(x >= 0 ? x : $A * (EXP(x) - 1))",
    "softsign": "(x / (1 + FABS(x)))",
    "softplus": "(x > 0 ? x + LOG1P(EXP(-x)) : LOG1P(EXP(x)))",
}
_F32 = {"FMIN": "fminf", "FMAX": "fmaxf", "EXP": "expf", "FABS": "fabsf", "LOG1P": "log1pf"}
_F64 = {"FMIN": "fmin", "FMAX": "fmax", "EXP": "exp", "FABS": "fabs", "LOG1P": "log1p",
        "fg_tanhf": "tanh", "fg_sigmoidf": "fg_sigmoid"}

STEPS = {
    # acc holds XW + H R^T (+ all biases); c is the cell state
    "lstm": r"""
        for (int j = 0; j < H; j++) {
            const FT ci = c[j];
            const FT i = ACT0(acc[j] + PI * ci);
            const FT f = INPUT_FORGET ? 1 - i : ACT0(acc[2 * H + j] + PF * ci);
            const FT cn = f * ci + i * ACT1(acc[3 * H + j]);
            const FT o = ACT0(acc[H + j] + PO * cn);
            c[j] = cn;
            h[j] = o * ACT2(cn);
        }""",
    # acc[0:2H] holds XW + H Rzr^T (+ biases); the candidate's product comes after the reset gate
    "gru": r"""
        FT z[H], r[H];
        for (int j = 0; j < H; j++) { z[j] = ACT0(acc[j]); r[j] = ACT0(acc[H + j]); }
        if (LINEAR_BEFORE_RESET) {
            for (int j = 0; j < H; j++) h[j] = (1 - z[j]) * ACT1(x[2 * H + j] + r[j] * acc[2 * H + j]) + z[j] * h[j];
        } else {
            FT rh[H];
            for (int j = 0; j < H; j++) rh[j] = r[j] * h[j];
            KNAME_mv(rh, rt + 2 * H, acc + 2 * H, H, GH);
            for (int j = 0; j < H; j++) h[j] = (1 - z[j]) * ACT1(acc[2 * H + j]) + z[j] * h[j];
        }""",
    "rnn": r"""
        for (int j = 0; j < H; j++) h[j] = ACT0(acc[j]);""",
}

_TEMPLATE = r"""
/* acc[0:n] += h[0:H] @ rt[0:H, 0:n] (rt's rows ld apart) */
static inline void KNAME_mv(const FT* restrict h, const FT* restrict rt, FT* restrict acc, int n, int ld) {
    int k = 0;
    for (; k + 4 <= H; k += 4) {
        const FT h0 = h[k], h1 = h[k + 1], h2 = h[k + 2], h3 = h[k + 3];
        const FT *r0 = rt + k * ld, *r1 = r0 + ld, *r2 = r1 + ld, *r3 = r2 + ld;
        for (int j = 0; j < n; j++) acc[j] += (h0 * r0[j] + h1 * r1[j]) + (h2 * r2[j] + h3 * r3[j]);
    }
    for (; k < H; k++) {
        const FT hk = h[k];
        const FT* r0 = rt + k * ld;
        for (int j = 0; j < n; j++) acc[j] += hk * r0[j];
    }
}

static void KNAME_dir(int k, void** p) {
    const FT* xw = (const FT*)p[0];
    const FT* rt = (const FT*)p[1] + (int64_t)k * H * GH;
    const FT* rb = (const FT*)p[2] + (int64_t)k * GH;
    const FT* pp = (const FT*)p[3] + (int64_t)k * 3 * H;
    const int64_t* lens = (const int64_t*)p[4];
    const FT* h0 = (const FT*)p[5];
    const FT* c0 = (const FT*)p[6];
    FT* y = (FT*)p[7];
    FT *yh = (FT*)p[8], *yc = (FT*)p[9];
    (void)rb; (void)pp; (void)lens; (void)c0; (void)yc;
    FT hs[BATCH * H], cs[BATCH * H], acc[GH];
    for (int e = 0; e < BATCH * H; e++) {
        hs[e] = h0 ? h0[(int64_t)k * BATCH * H + e] : 0;
        cs[e] = c0 ? c0[(int64_t)k * BATCH * H + e] : 0;
    }
    const int rev = REVERSE;
    for (int s = 0; s < T; s++) {
        const int t = rev ? T - 1 - s : s;
        for (int b = 0; b < BATCH; b++) {
            FT* h = hs + b * H;
            FT* c = cs + b * H;
            (void)c;
            FT* yt = y + (((int64_t)t * DIRS + k) * BATCH + b) * H;
            if (HAS_LENS && t >= lens[b]) {  /* past this item's end: zeros out, state kept */
                for (int j = 0; j < H; j++) yt[j] = 0;
                continue;
            }
            const FT* x = xw + (((int64_t)t * BATCH + b) * DIRS + k) * GH;
            (void)x;
            for (int j = 0; j < PRODUCT_COLS; j++) acc[j] = x[j];
            for (int j = PRODUCT_COLS; j < GH; j++) acc[j] = LINEAR_BEFORE_RESET ? rb[j] : x[j];
            KNAME_mv(h, rt, acc, FIRST_PRODUCT, GH);
STEP
            for (int j = 0; j < H; j++) yt[j] = h[j];
        }
    }
    for (int e = 0; e < BATCH * H; e++) {
        yh[(int64_t)k * BATCH * H + e] = hs[e];
        if (yc) yc[(int64_t)k * BATCH * H + e] = cs[e];
    }
}

FG_EXPORT void KNAME(void** p, const int64_t* d, int nt) {
    (void)d;
#if PROJECT
    /* XW = X W^T + biases here (a small product: a call of a library costs more) */
    FT xw[T * BATCH * DIRS * GH];
    {
        const FT* x = (const FT*)p[0];
        const FT* wt = (const FT*)p[10];
        const FT* bias = (const FT*)p[11];
        for (int r = 0; r < T * BATCH; r++) {
            FT* o = xw + (int64_t)r * DIRS * GH;
            for (int j = 0; j < DIRS * GH; j++) o[j] = 0;
            for (int i = 0; i < PROJECT; i++) {
                const FT xi = x[(int64_t)r * PROJECT + i];
                const FT* w = wt + (int64_t)i * DIRS * GH;
                for (int j = 0; j < DIRS * GH; j++) o[j] += xi * w[j];
            }
            for (int j = 0; j < DIRS * GH; j++) o[j] += bias[j];
        }
    }
    void* q[10];
    for (int i = 1; i < 10; i++) q[i] = p[i];
    q[0] = xw;
    p = q;
#endif
    if (DIRS > 1 && nt > 1) {
        #pragma omp parallel for num_threads(2) schedule(static, 1)
        for (int k = 0; k < DIRS; k++) KNAME_dir(k, p);
    } else {
        for (int k = 0; k < DIRS; k++) KNAME_dir(k, p);
    }
}
"""


def recurrent_kernel(op, dtype: DType, t_len: int, batch: int, peepholes: bool, project: int = 0) -> KernelSource:
    """The time loop of recurrent op `op` (an ops.rnn RecurrentOp) over X[t_len, batch, in]; with
    `project` (= in), the input projection too: ptrs 0 is X[t_len * batch, in], 10 W^T[in, dirs *
    G*H] and 11 the summed biases (for a small product: XW then sits on the stack)."""
    if dtype not in (DType.float32, DType.float64):
        raise CodegenUnsupported(f"{op.name}: generated recurrence for float32/float64, not {dtype}")
    h, dirs, g = op.hidden_size, op.num_directions, op.gates
    ft = "float" if dtype == DType.float32 else "double"
    lit = "f" if ft == "float" else ""
    names = _F32 if ft == "float" else _F64
    lbr = bool(getattr(op, "linear_before_reset", False))
    first = {"lstm": 4 * h, "gru": 3 * h if lbr else 2 * h, "rnn": h}[op.name]
    template = _TEMPLATE.replace("STEP", STEPS[op.name])
    lines = activation_defines(op, names, lit)
    consts = {"FT": ft, "H": h, "GH": g * h, "T": t_len, "BATCH": batch, "DIRS": dirs,
              "REVERSE": "(k == 1)" if dirs == 2 else int(op.direction == "reverse"),
              "HAS_LENS": int(op.has_sequence_lens), "INPUT_FORGET": int(getattr(op, "input_forget", False)),
              "LINEAR_BEFORE_RESET": int(lbr), "FIRST_PRODUCT": first,
              "PRODUCT_COLS": 2 * h if op.name == "gru" and lbr else g * h,
              "PI": "pp[j]" if peepholes else "0", "PO": "pp[H + j]" if peepholes else "0",
              "PF": "pp[2 * H + j]" if peepholes else "0", "PROJECT": project}
    undefs = [*consts, *(f"ACT{j}" for j in range(op.n_activations))]
    code = "\n".join([*(f"#define {k} {v}" for k, v in consts.items()), *lines, template,
                      *(f"#undef {k}" for k in undefs)])
    helpers = []
    if ft == "float":
        helpers += float_helpers()
    else:
        helpers.append(("fg_sigmoid", fast_helper("fg_sigmoid")))
    assert all(dep in dict(helpers) for fn, _ in helpers for dep in DEPENDS.get(fn, ()))
    name = _content_name(f"fg_{op.name}", code, tuple(helpers), {"dtype": str(dtype)})
    ptr_dtypes: Sequence[DType] = (dtype, dtype, dtype, DType.int64, dtype, dtype, dtype, dtype, dtype,
                                   *((dtype, dtype) if project else ()))
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=tuple(helpers),
                        in_dtypes=tuple(ptr_dtypes), out_dtype=dtype)


def activation_defines(op, names: dict[str, str], lit: str) -> list[str]:
    """Each activation slot j as a C function per direction, and ACTj(v) picking by direction (k)
    only when the directions' functions differ (the branch is loop-invariant)."""
    lines = []
    for j in range(op.n_activations):
        bodies = [_act(op, k * op.n_activations + j, j not in op.unclipped, names, lit) for k in range(op.num_directions)]
        for k, body in enumerate(bodies):
            lines.append(f"static inline FT KNAME_act{j}_{k}(FT x) {{ return {body}; }}")
        pick = f"KNAME_act{j}_0(v)" if len(set(bodies)) == 1 else f"(k == 0 ? KNAME_act{j}_0(v) : KNAME_act{j}_1(v))"
        lines.append(f"#define ACT{j}(v) {pick}")
    return lines


def float_helpers() -> list[tuple[str, str]]:
    """The float32 activations' shared helpers, in dependency order."""
    return [(fn, fast_helper(fn)) for fn in ("fg_expf", "fg_tanhf", "fg_sigmoidf")]


def _act(op, i: int, clipped: bool, names: dict[str, str], lit: str) -> str:
    name, a, b = op.activations[i], op.activation_alpha[i], op.activation_beta[i]
    if name not in ACTIVATION_C:
        raise CodegenUnsupported(f"{op.name}: activation {name!r} has no C form")
    expr = ACTIVATION_C[name]
    for k, v in names.items():
        expr = expr.replace(k, v)
    expr = expr.replace("$A", f"({float(a)!r}{lit})").replace("$B", f"({float(b)!r}{lit})")
    if op.clip is not None and clipped:  # the clip bounds the activation's input, as the reference
        c = f"{float(op.clip)!r}{lit}"
        expr = f"({{ const FT x_ = x; const FT x = x_ < -{c} ? -{c} : (x_ > {c} ? {c} : x_); {expr}; }})"
    return expr

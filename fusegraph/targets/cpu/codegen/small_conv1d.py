"""C for tiny float32 1-D convolutions (an ECG classifier, a byte-level text CNN, a speech model's
feature encoder): a register tile of JB output channels x VB vectors of 16 output positions, the
inner step broadcasting JB weights against VB input vectors (the shape of MLAS's kernels).

Each (batch, group) first copies its input channels into a zero-padded scratch, split into the
stride's phases, so that tap t of output q reads phase (t*DIL) % STRIDE at q + (t*DIL) // STRIDE:
every tap of every output is one contiguous vector load, with no edge cases. The weights are packed
at compile time (`pack_conv1d_weights`) as [G, tiles, CG, K, JB], the JB weights of a step side by
side, zero past the group's channels. Each output adds its products in the same order as the other
small kernels (input channels, then taps; a padding tap adds w * 0), the bias and the epilogue chain
last, so its sums are theirs.

    p[0] out [N, M, S_OUT]   p[1] x [N, C, S_IN]   p[2] packed weights   p[3] bias [M]
    p[4] unused   p[5..] residuals [N, M, S_OUT] (one may be the output's own buffer)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ....ir.dtypes import DType
from ..ops import Activation
from .c_expr import CRenderer
from .kernels import KernelSource, finish
from .small_conv import conv_epilogue, conv_source

VW = 16  # floats in a vector (AVX-512: one register)
ACCUMULATORS = 16  # vector accumulators of a tile: with its loads and weights, within 32 registers
# output positions from which tiles beat the tap-table kernel (output channels innermost) whatever
# the channels: 15 positions, 20 -> 16 channels k3: 0.39 against 2.1 us; at 8 even, at 4 3x slower
MOST_OF_A_VECTOR = 12
# taps a tile unrolls; more loop over a table of offsets: unrolled, 7 taps ran 1.2x and 16 taps 1.6x
# slower (the code outgrows the front end's caches); 1-3 taps even either way
UNROLLED_TAPS = 3
SCRATCH = 16384  # floats of padded input a (batch, group) may need on the stack; more: not this kernel


@dataclass(frozen=True)
class PhaseLayout:
    """A row of input zero- (or -inf-) padded and split into the stride's phases: phase ph holds the
    padded positions ph, ph + STRIDE, ..., so tap t of output q is at q + tap_offset(t)."""

    stride: int
    dil: int
    phases: tuple[int, ...]  # the phases some tap reads
    row: int  # floats of one phase (a multiple of VW)

    @property
    def floats(self) -> int:
        return len(self.phases) * self.row

    def tap_offset(self, t: int) -> int:
        return self.phases.index(t * self.dil % self.stride) * self.row + t * self.dil // self.stride

    def fill(self, dst: str, src: str, pad_value: str, s_in: int, pad: int) -> str:
        """C statements filling `dst` (len(phases) * row floats) from the s_in floats at `src`: per
        phase, the padding before, the strided copy, the padding after (three loops gcc vectorizes)."""
        lines = []
        for k, ph in enumerate(self.phases):  # position i of phase ph: input i * stride + ph - pad
            lo = min(self.row, max(0, -(-(pad - ph) // self.stride)))
            hi = min(self.row, max(lo, -(-(s_in + pad - ph) // self.stride)))
            at = f"{dst}[{k * self.row} + i]"
            lines += [f"for (int i = 0; i < {lo}; i++) {at} = {pad_value};",
                      f"for (int i = {lo}; i < {hi}; i++) {at} = {src}[i * {self.stride} + {ph - pad}];",
                      f"for (int i = {hi}; i < {self.row}; i++) {at} = {pad_value};"]
        return "\n".join(lines)


def phase_layout(k: int, s_out: int, stride: int, dil: int) -> PhaseLayout:
    """The layout whose rows hold every tap of s_out outputs rounded up to whole vectors."""
    phases = tuple(sorted({t * dil % stride for t in range(k)}))
    row = -(-(-(-s_out // VW) * VW + (k - 1) * dil // stride) // VW) * VW
    return PhaseLayout(stride, dil, phases, row)


@dataclass(frozen=True)
class Conv1dTiling:
    """How a 1-D convolution's outputs are tiled: jb output channels x vb vectors of positions."""

    jb: int  # output channels of a tile (the group's channels padded up to a multiple)
    vb: int  # vectors of a full tile; the last tile of a row holds `tail` vectors (0: none)
    tail: int
    layout: PhaseLayout  # of each input channel in the scratch

    def scratch(self, cg: int) -> int:
        return cg * self.layout.floats


def conv1d_tiling(mg: int, k: int, s_out: int, stride: int, dil: int) -> Conv1dTiling:
    """Tiles of about ACCUMULATORS vectors, balanced over the group's channels (12 channels: three
    of 4, not 8 + 4 padded to 16)."""
    nvec = -(-s_out // VW)
    vb = min(4, nvec)
    jmax = max(1, ACCUMULATORS // vb)
    jb = -(-mg // -(-mg // jmax))
    return Conv1dTiling(jb, vb, nvec % vb, phase_layout(k, s_out, stride, dil))


def fits(cg: int, mg: int, k: int, s_out: int, stride: int, dil: int) -> bool:
    """Whether the kernel's scratch for one (batch, group) fits on the stack."""
    return conv1d_tiling(mg, k, s_out, stride, dil).scratch(cg) <= SCRATCH


def pack_conv1d_weights(w: np.ndarray, groups: int, tiling: Conv1dTiling) -> np.ndarray:
    """[M, CG, K] weights as the kernel reads them: [G, tiles, CG, K, JB], zeros past each group's
    channels."""
    m, cg, k = w.shape
    mg, jb = m // groups, tiling.jb
    tiles = -(-mg // jb)
    padded = np.zeros((groups, tiles * jb, cg, k), np.float32)
    padded[:, :mg] = w.reshape(groups, mg, cg, k)
    return np.ascontiguousarray(padded.reshape(groups, tiles, jb, cg, k).transpose(0, 1, 3, 4, 2))


def _tile(name: str, tiling: Conv1dTiling, vb: int, cg: int, k: int) -> str:
    """A tile's sums (jb channels x vb vectors) over the group's cg input channels and k taps,
    stored into `acc` ([jb][tiling.vb * VW]). Up to UNROLLED_TAPS taps are unrolled (their offsets
    constants); more loop over a table of offsets."""
    jb, layout = tiling.jb, tiling.layout
    a = [[f"a{j}_{u}" for u in range(vb)] for j in range(jb)]
    unrolled = k <= UNROLLED_TAPS
    lines = [f"static inline __attribute__((always_inline)) void {name}(const float *xs, const float *wt, "
             "float *acc) {",
             "    " + " ".join(f"fg_v16 {v} = {{0}};" for r in a for v in r),
             f"    for (int ci = 0; ci < {cg}; ci++, xs += {layout.floats}, wt += {k * jb}) {{"]
    if not unrolled:
        offsets = ", ".join(str(layout.tap_offset(t)) for t in range(k))
        lines.insert(0, f"static const int {name}_off[{k}] = {{{offsets}}};")
        lines.append(f"      for (int t = 0; t < {k}; t++) {{")
    for t in range(k) if unrolled else ["t"]:
        src, w = (layout.tap_offset(t), t * jb) if unrolled else (f"{name}_off[t]", "t * " + str(jb))
        loads = ", ".join(f"x{u} = KNAME_ld(xs + {src} + {u * VW})" for u in range(vb))
        pins = " ".join(f"KNAME_PIN(x{u});" for u in range(vb))
        lines.append(f"        {{ fg_v16 {loads}; {pins}")
        for j in range(jb):
            lines.append(f"          {{ const float w = wt[{w} + {j}]; "
                         + " ".join(f"{a[j][u]} += w * x{u};" for u in range(vb)) + " }")
        lines.append("        }")
    lines.append("    }" if unrolled else "    }}")
    lines += [f"    memcpy(acc + {(j * tiling.vb + u) * VW}, &{a[j][u]}, sizeof(fg_v16));"
              for j in range(jb) for u in range(vb)]
    return "\n".join(lines) + "\n}\n"


def small_conv1d_kernel(n: int, c: int, s_in: int, groups: int, m: int, k: int, s_out: int, stride: int, dil: int,
                        pad: int, has_bias: bool, chain: Sequence[Activation]) -> KernelSource:
    """A 1-D small convolution (stride, dilation, left padding `pad`, groups) as register tiles;
    p[2] the weights packed by `pack_conv1d_weights` with `conv1d_tiling(...)`, p[4] unused."""
    cg, mg = c // groups, m // groups
    tiling = conv1d_tiling(mg, k, s_out, stride, dil)
    jb, vb, tail, layout = tiling.jb, tiling.vb, tiling.tail, tiling.layout
    r, residuals, epilogue, n_res = conv_epilogue(chain)
    bias = "acc[jj * VB * VW + i] + bias[co]" if has_bias else "acc[jj * VB * VW + i]"
    fill = layout.fill("xr", "xc", "0.0f", s_in, pad).replace("\n", "\n            ")
    blocks = -(-s_out // VW) // vb
    compute = "KNAME_full(xp + q0, wt, acc);"
    if tail:
        compute = f"if (q0 < {blocks * vb * VW}) {compute} else KNAME_tail(xp + q0, wt, acc);"
    template = f"""typedef float fg_v16 __attribute__((vector_size(64)));
static inline fg_v16 KNAME_ld(const float *s) {{ fg_v16 v; memcpy(&v, s, sizeof v); return v; }}
/* a step's input vectors held in registers: gcc would fold each load into every channel's multiply,
   16 loads a step instead of 4 (15-20% slower) */
#ifdef __AVX512F__
#define KNAME_PIN(v) __asm__("" : "+v"(v))
#else
#define KNAME_PIN(v) (void)0
#endif
{_tile("KNAME_full", tiling, vb, cg, k)}{_tile("KNAME_tail", tiling, tail, cg, k) if tail else ""}FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {{
    enum {{ N = {n}, C = {c}, S_IN = {s_in}, G = {groups}, CG = {cg}, MG = {mg}, K = {k}, S_OUT = {s_out},
           PAD = {pad}, JB = {jb}, VB = {vb}, VW = {VW}, TILES = {-(-mg // jb)} }};
    float *o = (float *)p[0];
    const float *x = (const float *)p[1], *w = (const float *)p[2], *bias = (const float *)p[3];
{residuals}    (void)d; (void)nt; (void)bias;
    float xp[{tiling.scratch(cg)}] __attribute__((aligned(64)));
    float acc[JB * VB * VW] __attribute__((aligned(64)));
    for (int64_t b = 0; b < N; b++)
    for (int64_t g = 0; g < G; g++) {{
        for (int64_t ci = 0; ci < CG; ci++) {{  /* the group's input, zero-padded, phase by phase */
            const float *xc = x + (b * C + g * CG + ci) * S_IN;
            float *xr = xp + ci * {layout.floats};
            {fill}
        }}
        for (int64_t tj = 0; tj < TILES; tj++) {{
            const float *wt = w + (g * TILES + tj) * CG * K * JB;
            for (int64_t q0 = 0; q0 < S_OUT; q0 += VB * VW) {{
                {compute}
                const int64_t qn = S_OUT - q0 < VB * VW ? S_OUT - q0 : VB * VW;
                for (int64_t jj = 0; jj < JB && tj * JB + jj < MG; jj++) {{
                    const int64_t co = g * MG + tj * JB + jj;
                    for (int64_t i = 0; i < qn; i++) {{
                        const int64_t at = (b * G * MG + co) * S_OUT + q0 + i;
                        float v = {bias};
{epilogue}                        o[at] = v;
                    }}
                }}
            }}
        }}
    }}
}}
"""
    return conv_source(template, r, "small_conv1d", n_res)


def small_max_pool1d_kernel(rows: int, s_in: int, k: int, s_out: int, stride: int, dil: int,
                            pad: int) -> KernelSource:
    """Max pooling of `rows` (N * C) signals of s_in positions: each row copied -inf-padded into
    the stride's phases, then every output the maximum of its taps' contiguous runs (vectorized),
    NaN if any tap is NaN, as the reference.

        p[0] out [rows, S_OUT]   p[1] x [rows, S_IN]"""
    layout = phase_layout(k, s_out, stride, dil)
    taps = "".join(f" a = xr[{layout.tap_offset(t)} + q]; v = a > v || a != a ? a : v;" for t in range(k))
    code = f"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {{
    enum {{ ROWS = {rows}, S_IN = {s_in}, S_OUT = {s_out}, PAD = {pad} }};
    float *o = (float *)p[0];
    const float *x = (const float *)p[1];
    float xr[{layout.floats}] __attribute__((aligned(64)));
    (void)d; (void)nt;
    for (int64_t r = 0; r < ROWS; r++) {{
        const float *xc = x + r * S_IN;
        {layout.fill("xr", "xc", "-INFINITY", s_in, pad).replace(chr(10), chr(10) + "        ")}
        for (int64_t q = 0; q < S_OUT; q++) {{  /* a NaN tap: NaN stays (neither compare holds) */
            float a, v = -INFINITY;{taps}
            o[r * S_OUT + q] = v;
        }}
    }}
}}
"""
    return finish(code, CRenderer(), "small_max_pool1d", in_dtypes=(DType.float32,), out_dtype=DType.float32)


def kernel_weights(w: np.ndarray, groups: int, k: int, s_out: int, stride: int, dil: int) -> np.ndarray:
    """The packed weights of `small_conv1d_kernel` for these [M, CG, K] weights."""
    return pack_conv1d_weights(w, groups, conv1d_tiling(w.shape[0] // groups, k, s_out, stride, dil))

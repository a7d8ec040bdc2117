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

from ..ops import Activation
from .kernels import KernelSource
from .small_conv import conv_epilogue, conv_source

VW = 16  # floats in a vector (AVX-512: one register)
ACCUMULATORS = 16  # vector accumulators of a tile: with its loads and weights, within 32 registers
SCRATCH = 16384  # floats of padded input a (batch, group) may need on the stack; more: not this kernel


@dataclass(frozen=True)
class Conv1dTiling:
    """How a 1-D convolution's outputs are tiled: jb output channels x vb vectors of positions."""

    jb: int  # output channels of a tile (the group's channels padded up to a multiple)
    vb: int  # vectors of a full tile; the last tile of a row holds `tail` vectors (0: none)
    tail: int
    phases: tuple[int, ...]  # the stride's phases some tap reads
    row: int  # floats of one phase of one input channel in the scratch (a multiple of VW)

    def scratch(self, cg: int) -> int:
        return cg * len(self.phases) * self.row


def conv1d_tiling(mg: int, k: int, s_out: int, stride: int, dil: int) -> Conv1dTiling:
    """Tiles of about ACCUMULATORS vectors, balanced over the group's channels (12 channels: three
    of 4, not 8 + 4 padded to 16)."""
    nvec = -(-s_out // VW)
    vb = min(4, nvec)
    jmax = max(1, ACCUMULATORS // vb)
    jb = -(-mg // -(-mg // jmax))
    phases = tuple(sorted({t * dil % stride for t in range(k)}))
    row = -(-(nvec * VW + (k - 1) * dil // stride) // VW) * VW
    return Conv1dTiling(jb, vb, nvec % vb, phases, row)


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


def _tile(name: str, tiling: Conv1dTiling, vb: int, k: int, dil: int, stride: int) -> str:
    """A tile's sums (jb channels x vb vectors) over the group's input channels and taps, stored
    into `acc` ([jb][vb * VW])."""
    jb = tiling.jb
    a = [[f"a{j}_{u}" for u in range(vb)] for j in range(jb)]
    lines = [f"static inline __attribute__((always_inline)) void {name}(const float *xs, const float *wt, "
             "float *acc) {",
             "    " + " ".join(f"fg_v16 {v} = {{0}};" for r in a for v in r),
             f"    for (int ci = 0; ci < CG; ci++, xs += {len(tiling.phases) * tiling.row}, wt += {k * jb}) {{"]
    for t in range(k):
        src = tiling.phases.index(t * dil % stride) * tiling.row + t * dil // stride
        loads = ", ".join(f"x{u} = KNAME_ld(xs + {src + u * VW})" for u in range(vb))
        pin = ", ".join(f'"+v"(x{u})' for u in range(vb))
        lines.append(f"        {{ fg_v16 {loads}; __asm__(\"\" : {pin});")
        for j in range(jb):
            lines.append(f"          {{ const float w = wt[{t * jb + j}]; "
                         + " ".join(f"{a[j][u]} += w * x{u};" for u in range(vb)) + " }")
        lines.append("        }")
    lines.append("    }")
    lines += [f"    memcpy(acc + {(j * tiling.vb + u) * VW}, &{a[j][u]}, sizeof(fg_v16));"
              for j in range(jb) for u in range(vb)]
    return "\n".join(lines) + "\n}\n"


def small_conv1d_kernel(n: int, c: int, s_in: int, groups: int, m: int, k: int, s_out: int, stride: int, dil: int,
                        pad: int, has_bias: bool, chain: Sequence[Activation]) -> KernelSource:
    """A 1-D small convolution (stride, dilation, left padding `pad`, groups) as register tiles;
    p[2] the weights packed by `pack_conv1d_weights` with `conv1d_tiling(...)`, p[4] unused."""
    cg, mg = c // groups, m // groups
    tiling = conv1d_tiling(mg, k, s_out, stride, dil)
    jb, vb, tail, row = tiling.jb, tiling.vb, tiling.tail, tiling.row
    r, residuals, epilogue, n_res = conv_epilogue(chain)
    bias = "acc[jj * VB * VW + i] + bias[co]" if has_bias else "acc[jj * VB * VW + i]"
    fill = "\n".join(
        f"            for (int i = 0; i < ROW; i++) {{ const int64_t s = (int64_t)i * STRIDE + {ph} - PAD; "
        f"xr[{idx} * ROW + i] = s >= 0 && s < S_IN ? xc[s] : 0.0f; }}"
        for idx, ph in enumerate(tiling.phases))
    blocks = -(-s_out // VW) // vb
    compute = "KNAME_full(xp + q0, wt, acc);"
    if tail:
        compute = f"if (q0 < {blocks * vb * VW}) {compute} else KNAME_tail(xp + q0, wt, acc);"
    template = f"""typedef float fg_v16 __attribute__((vector_size(64)));
static inline fg_v16 KNAME_ld(const float *s) {{ fg_v16 v; memcpy(&v, s, sizeof v); return v; }}
enum {{ KNAME_CG = {cg} }};
#define CG KNAME_CG
{_tile("KNAME_full", tiling, vb, k, dil, stride)}{_tile("KNAME_tail", tiling, tail, k, dil, stride) if tail else ""}#undef CG
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {{
    enum {{ N = {n}, C = {c}, S_IN = {s_in}, G = {groups}, CG = {cg}, MG = {mg}, K = {k}, S_OUT = {s_out},
           STRIDE = {stride}, PAD = {pad}, JB = {jb}, VB = {vb}, VW = {VW}, ROW = {row},
           NPH = {len(tiling.phases)}, TILES = {-(-mg // jb)} }};
    float *o = (float *)p[0];
    const float *x = (const float *)p[1], *w = (const float *)p[2], *bias = (const float *)p[3];
{residuals}    (void)d; (void)nt; (void)bias;
    float xp[CG * NPH * ROW] __attribute__((aligned(64)));
    float acc[JB * VB * VW] __attribute__((aligned(64)));
    for (int64_t b = 0; b < N; b++)
    for (int64_t g = 0; g < G; g++) {{
        for (int64_t ci = 0; ci < CG; ci++) {{  /* the group's input, zero-padded, phase by phase */
            const float *xc = x + (b * C + g * CG + ci) * S_IN;
            float *xr = xp + ci * NPH * ROW;
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


def kernel_weights(w: np.ndarray, groups: int, k: int, s_out: int, stride: int, dil: int) -> np.ndarray:
    """The packed weights of `small_conv1d_kernel` for these [M, CG, K] weights."""
    return pack_conv1d_weights(w, groups, conv1d_tiling(w.shape[0] // groups, k, s_out, stride, dil))


__all__ = ["conv1d_tiling", "fits", "kernel_weights", "pack_conv1d_weights", "small_conv1d_kernel"]

"""C for float32 linear and cubic resizes (SegFormer's and MobileViT's bilinear upsampling), which
ran as the op's numpy reference: a Python step of a few numpy passes per axis, outside the native
program around it.

The reference (ops/resize.py) resamples one axis at a time; along each, output position o is
sum over k of in[idx[o, k]] * w[o, k], the products and sums in float32 in k's order. The kernel
makes the same operations in the same order (-ffp-contract=off: no fused multiply-adds), with the
op's own tables (`Resize.interpolated_axes`) baked in, so its results are the reference's bits.

    p[0] out float32 (contiguous)   p[1] x float32 (contiguous)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ....ir.dtypes import DType
from ....ir.shape import Shape
from .c_expr import CodegenUnsupported, CRenderer
from .kernels import KernelSource, finish

STACK_FLOATS = 1 << 14  # the values between two axes' passes live on the stack (64 KiB): larger, the reference


def _table(name: str, ctype: str, values: np.ndarray) -> str:
    body = ", ".join(repr(float(v)) + "f" if ctype == "float" else str(int(v)) for v in values.reshape(-1))
    return f"static const {ctype} {name}[{values.size}] = {{{body}}};\n"


def resize_kernel(in_lens: Sequence[int], stages: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> KernelSource:
    """The kernel applying `stages` ((axis, idx [n_out, taps], w [n_out, taps]) in order) to a
    contiguous float32 tensor of `in_lens`."""
    lens = list(in_lens)
    tables, steps = [], []
    for j, (axis, idx, w) in enumerate(stages):
        n_out, taps = idx.shape
        outer, n_in, inner = math.prod(lens[:axis]), lens[axis], math.prod(lens[axis + 1:])
        tables.append(_table(f"KNAME_i{j}", "int64_t", idx) + _table(f"KNAME_w{j}", "float", w.astype(np.float32)))
        last = j == len(stages) - 1
        steps.append(f"""    {{
        float *dst = {'out' if last else f'buf{j % 2}'};
        for (int64_t o = 0; o < {outer}; o++)
            for (int64_t q = 0; q < {n_out}; q++) {{
                const int64_t *ix = KNAME_i{j} + q * {taps};
                const float *wq = KNAME_w{j} + q * {taps};
                const float *s = src + o * {n_in * inner};
                float *d = dst + (o * {n_out} + q) * {inner};
                for (int64_t e = 0; e < {inner}; e++) {{
                    float v = s[ix[0] * {inner} + e] * wq[0];
                    for (int k = 1; k < {taps}; k++) v = v + s[ix[k] * {inner} + e] * wq[k];
                    d[e] = v;
                }}
            }}
        src = dst;
    }}
""")
        lens[axis] = n_out
    between = max((math.prod(_lens_after(in_lens, stages[:j + 1])) for j in range(len(stages) - 1)), default=0)
    if between > STACK_FLOATS:
        raise CodegenUnsupported(f"a resize of {list(in_lens)} passing {between} values between its axes")
    scratch = f"    float buf0[{max(between, 1)}], buf1[{max(between, 1) if len(stages) > 2 else 1}];\n"
    code = ("".join(tables)
            + "FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {\n"
            + "    (void)d; (void)nt;\n    float *out = (float *)p[0];\n"
            + "    const float *src = (const float *)p[1];\n" + scratch
            + "".join(steps) + "    (void)buf0; (void)buf1;\n}\n")
    return finish(code, CRenderer(), "fg_resize", in_dtypes=(DType.float32,), out_dtype=DType.float32,
                  in_shapes=(Shape.of(DType.float32, list(in_lens)),), out_lens=tuple(lens))


def _lens_after(in_lens: Sequence[int], stages: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> list[int]:
    lens = list(in_lens)
    for axis, idx, _ in stages:
        lens[axis] = idx.shape[0]
    return lens

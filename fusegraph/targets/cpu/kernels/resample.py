"""Linear and cubic float32 resizes in native programs: the op's reference arithmetic in C.

The reference (ops/resize.py) interpolates one axis after another: along each resized axis,
out[o] = sum over k of w[o, k] * in[idx[o, k]] in k's order, in float32, with the taps (edge-clamped
positions and weights) of `Interpolation.taps`. The taps depend on shapes and attributes only, so
they are computed here once; a generated C function then runs the same products and sums in the
same order (no contraction: the build has -ffp-contract=off), bit for bit the Python step's. The
numpy reference spent ~100 us on a [1, 32, 1, 1] -> [1, 2, 2, 32] resize (MobileViT, SegFormer's
decoder). tf_crop_and_resize (its extrapolated fill), other dtypes and dynamic shapes keep the
reference.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..codegen.kernels import KernelSource
from ..lowering import Kernel, LowerContext, reference_kernel

_CODE = r"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    (void)d; (void)nt;
    static const int64_t G[PASSES][6] = {GEOMETRY};  /* outer, n_in, n_out, inner, taps, table offset */
    const int64_t *const idx = (const int64_t *)p[2];
    const float *const w = (const float *)p[3];
    float *tmp[2] = {NULL, NULL};
    if (PASSES > 1) { tmp[0] = (float *)malloc(sizeof(float) * TMP); tmp[1] = (float *)malloc(sizeof(float) * TMP); }
    for (int s = 0; s < PASSES; s++) {
        const int64_t outer = G[s][0], n_in = G[s][1], n_out = G[s][2], inner = G[s][3], K = G[s][4];
        const float *in = s == 0 ? (const float *)p[1] : tmp[(s - 1) & 1];
        float *out = s == PASSES - 1 ? (float *)p[0] : tmp[s & 1];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < n_out; j++) {
                const int64_t *ix = idx + G[s][5] + j * K;
                const float *ww = w + G[s][5] + j * K;
                const float *src = in + o * n_in * inner;
                float *dst = out + (o * n_out + j) * inner;
                for (int64_t i = 0; i < inner; i++) dst[i] = ww[0] * src[ix[0] * inner + i];
                for (int64_t k = 1; k < K; k++)
                    for (int64_t i = 0; i < inner; i++) dst[i] = dst[i] + ww[k] * src[ix[k] * inner + i];
            }
    }
    free(tmp[0]);
    free(tmp[1]);
}
"""


def interpolation(ins: Instruction, ctx: LowerContext) -> Kernel:
    """The reference's resize, with the C form above where it applies."""
    run = reference_kernel(ins, ctx)
    op, x = ins.op, ins.inputs[0].shape
    if (op.mode == "nearest" or op.coordinate_transformation_mode == "tf_crop_and_resize" or not isinstance(x, Shape)
            or x.is_dynamic or x.dtype != DType.float32 or x.elements == 0 or ins.shape.elements == 0):
        return run
    passes, tables = [], []
    lens = list(x.lens)
    offset = 0
    r = x.ndim
    for axis, (n_in, n_out) in enumerate(zip(x.lens, ins.shape.lens)):
        roi = (op.roi[axis], op.roi[axis + r]) if op.roi else (0.0, 1.0)
        if math.isclose(op.scales[axis], 1.0) and n_in == n_out and roi == (0.0, 1.0):
            continue  # identity along this axis (the reference's rule)
        src, _ = op._source(axis, n_in, n_out, roi)
        idx, w = op.taps(n_in, axis, src)
        k = idx.shape[1]
        passes.append((math.prod(lens[:axis]), n_in, n_out, math.prod(lens[axis + 1:]), k, offset))
        tables.append((idx.astype(np.int64).ravel(), w.astype(np.float32).ravel()))
        offset += n_out * k
        lens[axis] = n_out
    if not passes:
        return run
    idx_table = np.ascontiguousarray(np.concatenate([t[0] for t in tables]))
    w_table = np.ascontiguousarray(np.concatenate([t[1] for t in tables]))
    sizes = [g[0] * g[2] * g[3] for g in passes[:-1]]
    code = (_CODE.replace("PASSES", str(len(passes))).replace("TMP", str(max(sizes, default=1)))
            .replace("GEOMETRY", ", ".join("{" + ", ".join(map(str, g)) + "}" for g in passes)))
    name = "fg_resample_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    source = KernelSource(name=name, code=code.replace("KNAME", name), helpers=(),
                          in_dtypes=(DType.float32, DType.int64, DType.float32), out_dtype=DType.float32)
    ctx.kernel_sources.append(source)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[source.name]))

    def native(args, out):
        from ..native_program import kernel_call

        if not (args[0].flags.c_contiguous and out.flags.c_contiguous):
            return None
        kernel = cell["kernel"]
        record, keep = kernel_call(kernel._fn, out.ctypes.data, [args[0].ctypes.data, idx_table.ctypes.data,
                                                                  w_table.ctypes.data], [0], 1)
        return [(record, (*keep, idx_table, w_table))]

    run.native = native  # type: ignore[attr-defined]
    return run

"""int8_dynamic_dot (ops_int8_dynamic.py) as oneDNN's u8 x s8 matmul with an f32 destination: the
weights packed once, the run-time zero point and scales passed with every call (onednn/quant.py's
`runtime` Quant), the bias added by the primitive.

Bit for bit the op's reference where oneDNN's integer sums are exact here (exact_here: VNNI, or
weights whose int16 pairs cannot saturate); elsewhere the reference runs (numpy, exact, slow). An
int8 source without VNNI is fed as uint8 (x ^ 0x80 is x + 128, its zero point + 128), as int8.py does.
"""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from .int8 import DNNL


@lowering("int8_dynamic_dot")
def int8_dynamic_dot(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn
    from ..onednn.quant import Quant, exact_here, has_vnni

    x, w = ins.inputs[0], ctx.const(ins.inputs[2])
    bias = ctx.const(ins.inputs[4]) if ins.op.has_bias else None
    if w is None or (ins.op.has_bias and bias is None) or not exact_here(w):
        return reference_kernel(ins, ctx)
    shift = x.shape.dtype == DType.int8 and not has_vnni()
    n_scales = ins.inputs[3].shape.elements
    quant = Quant("u8" if shift else DNNL[x.shape.dtype], 1.0, 0, np.ones(n_scales, np.float32), "f32",
                  runtime=True)
    m, k = x.shape.lens
    prim = onednn.MatMul((m, k), w, bias, quant=quant, threads=ctx.threads_for(2.0 * m * k * w.shape[1]))
    lens, product = ins.shape.lens, prim.out_shape
    offset = 128 if shift else 0

    def run(args, out):
        xq, zp, _, scale = args[:4]
        if shift:
            xq = xq.view(np.uint8) ^ np.uint8(0x80)
        xq = np.ascontiguousarray(xq)  # the primitive reads rows of K bytes (a no-op for the usual input)
        zero = np.array([int(np.asarray(zp).reshape(())) + offset], np.int32)  # per call: thread-safe
        scales = np.ascontiguousarray(scale, np.float32).reshape(n_scales)
        if out is None or not out.flags.c_contiguous:  # a strided destination: written through a copy
            y = prim(xq, scales, zero, out=np.empty(product, np.float32)).reshape(lens)
            return y if out is None else np.copyto(out, y) or out
        prim(xq, scales, zero, out=out.reshape(product))
        return out

    return run

"""int8_dynamic_dot (ops_int8_dynamic.py) as oneDNN's u8 x s8 matmul with an f32 destination: the
weights packed once, the run-time zero point and scales passed with every call (onednn/quant.py's
`runtime` Quant), the bias added by the primitive.

Bit for bit the op's reference where oneDNN's integer sums are exact here (exact_here: VNNI, or
weights whose int16 pairs cannot saturate); elsewhere the reference runs (numpy, exact, slow). An
int8 source without VNNI is fed as uint8 (x ^ 0x80 is x + 128, its zero point + 128), as int8.py does.
"""

from __future__ import annotations

import hashlib

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..codegen.kernels import KernelSource
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

    if not shift:  # (a shifted int8 source would need its bytes flipped first: those stay Python steps)
        widen = _zero_point_kernel(x.shape.dtype)
        ctx.kernel_sources.append(widen)
        cell: dict = {}
        ctx.deferred.append(lambda: cell.update(kernel=ctx.library[widen.name]))

        def native(args, out):
            """The zero point widened to int32 by a generated line of C into a scratch of this
            thread's, then the primitive: both over fixed buffers."""
            from ..native_program import kernel_call, primitive_call

            xq, zp, _, scale = args[:4]
            if (not xq.flags.c_contiguous or not out.flags.c_contiguous or scale.dtype != np.float32
                    or not scale.flags.c_contiguous or zp.size != 1):
                return None
            zero = np.zeros(1, np.int32)
            kernel = cell["kernel"]
            return [kernel_call(kernel._fn, zero.ctypes.data, [zp.ctypes.data], [0], 1),
                    primitive_call(prim, xq, scale.reshape(n_scales), zero, out=out.reshape(product))]

        run.native = native  # type: ignore[attr-defined]
    return run


def _zero_point_kernel(dtype: DType) -> KernelSource:
    """int32 out[0] = the uint8/int8 zero point p[1][0]."""
    ct = {DType.uint8: "uint8_t", DType.int8: "int8_t"}[dtype]
    code = ("FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {\n"
            f"    (void)d; (void)nt; *(int32_t *)p[0] = (int32_t)*(const {ct} *)p[1];\n}}\n")
    name = "fg_zero_point_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    return KernelSource(name=name, code=code.replace("KNAME", name), helpers=(), in_dtypes=(dtype,),
                        out_dtype=DType.int32)

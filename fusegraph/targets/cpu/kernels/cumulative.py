"""CumSum and CumProd as generated C in native programs: numpy's accumulate along the axis, in order
(the first result is the first element; exclusive: the identity, then the running results shifted
by one), in the input's type (integers wrap: -fwrapv). A transformer's position ids are a cumsum of
its attention mask (RoBERTa, OPT, BLOOM, Speech2Text): numpy's step split their one C call in two.
A run-time axis that is not a constant, dynamic shapes and other dtypes keep the reference."""

from __future__ import annotations

import hashlib
import math

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..codegen.c_expr import c_type
from ..codegen.kernels import KernelSource
from ..lowering import Kernel, LowerContext, lowering, reference_kernel

_CODE = r"""
FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {
    (void)d; (void)nt;
    T *const out = (T *)p[0];
    const T *const x = (const T *)p[1];
    for (int64_t o = 0; o < OUTER; o++)
        for (int64_t i = 0; i < INNER; i++) {
            const int64_t first = (o * N + (REVERSE ? N - 1 : 0)) * INNER + i;
            T acc = x[first];
            out[first] = EXCLUSIVE ? (T)IDENTITY : acc;
            for (int64_t s = 1; s < N; s++) {
                const int64_t at = (o * N + (REVERSE ? N - 1 - s : s)) * INNER + i;
                if (EXCLUSIVE) { out[at] = acc; acc = acc OP x[at]; }
                else { acc = acc OP x[at]; out[at] = acc; }
            }
        }
}
"""
_OPS = {"cumsum": ("+", 0), "cumprod": ("*", 1)}
_DTYPES = (DType.float32, DType.float64, DType.int32, DType.int64)


@lowering("cumsum", "cumprod")
def cumulative(ins: Instruction, ctx: LowerContext) -> Kernel:
    run = reference_kernel(ins, ctx)
    op, x = ins.op, ins.inputs[0].shape
    axis = op.axis
    if axis is None:  # the second input: a constant one fixes it
        given = ctx.const(ins.inputs[1])
        axis = None if given is None else int(np.asarray(given).reshape(-1)[0])
    if (axis is None or not isinstance(x, Shape) or x.is_dynamic or x.dtype not in _DTYPES or x.elements == 0
            or not -x.ndim <= axis < x.ndim):
        return run
    axis %= x.ndim
    sign, identity = _OPS[op.name]
    consts = {"T": c_type(x.dtype), "OUTER": math.prod(x.lens[:axis]), "INNER": math.prod(x.lens[axis + 1:]),
              "N": x.lens[axis], "REVERSE": int(op.reverse), "EXCLUSIVE": int(op.exclusive), "OP": sign,
              "IDENTITY": identity}
    code = "\n".join([*(f"#define {k} {v}" for k, v in consts.items()), _CODE, *(f"#undef {k}" for k in consts)])
    name = "fg_cumulative_" + hashlib.sha256(code.encode()).hexdigest()[:16]
    src = KernelSource(name=name, code=code.replace("KNAME", name), helpers=(), in_dtypes=(x.dtype,),
                       out_dtype=x.dtype)
    ctx.kernel_sources.append(src)
    cell: dict = {}
    ctx.deferred.append(lambda: cell.update(kernel=ctx.library[src.name]))

    def native(args, out):
        from ..native_program import kernel_call

        if not (args[0].flags.c_contiguous and out.flags.c_contiguous and args[0].dtype == out.dtype):
            return None
        kernel = cell["kernel"]
        return [kernel_call(kernel._fn, out.ctypes.data, [args[0].ctypes.data], [0], 1)]

    run.native = native  # type: ignore[attr-defined]
    return run

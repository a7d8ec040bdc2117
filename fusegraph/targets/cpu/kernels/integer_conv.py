"""An int32 convolution (ConvInteger, as dynamic quantization writes it: uint8 activations minus
their zero point, times constant integer weights) through oneDNN's float32 convolution where that
is exact, as quant_dot does for MatMulInteger (kernels/int8.py): every partial sum is bounded by
K * max|x| * max|w| (K: the taps of one output), and below 2**24 float32 holds each exactly, in any
order. The bound is checked every call (x's magnitude is known only then); past it, the op's
reference. It was always the reference's im2col in numpy: depthwise_cnn_dynamic's seven
convolutions were 3.4 of its 3.6 ms."""

from __future__ import annotations

import numpy as np

from ....errors import CompileError
from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.shape import Shape
from ..lowering import Kernel, LowerContext, reference_kernel
from .int8 import FLOAT_EXACT

FLOAT32_EXACT = dict(FLOAT_EXACT)[np.float32]  # integers below this are float32 values


def integer_convolution(ins: Instruction, w: np.ndarray, ctx: LowerContext) -> Kernel:
    from .. import onednn

    x, op = ins.inputs[0].shape, ins.op
    if (op.name != "convolution" or x.dtype != DType.int32 or ins.shape.dtype != DType.int32
            or not isinstance(x, Shape) or x.is_dynamic or w.size == 0):
        return reference_kernel(ins, ctx)
    w_max = int(np.abs(w.astype(np.int64)).max())
    taps = w.size // w.shape[0]  # input channels of a group times the window
    try:
        prim = onednn.Convolution(x.lens, w.astype(np.float32), None, stride=op.stride, padding=op.padding,
                                  dilation=op.dilation, groups=op.group,
                                  threads=ctx.threads_for(2.0 * ins.shape.elements * taps))
    except CompileError:
        return reference_kernel(ins, ctx)
    reference = reference_kernel(ins, ctx)
    lens = ins.shape.lens

    def run(args, out):
        a = args[0]
        x_max = max(abs(int(a.min())), abs(int(a.max()))) if a.size else 0
        if taps * x_max * w_max >= FLOAT32_EXACT:
            return reference(args, out)
        y = prim(np.ascontiguousarray(a, np.float32))
        if out is None:
            out = np.empty(lens, np.int32)
        np.copyto(out, y, casting="unsafe")  # integer-valued floats: exact
        return out

    return run

"""Why a half-precision program is slow on the cpu target, said once at compile.

float16 programs compute in float32, as ONNX Runtime's CPU provider computes them (passes/widen_half.py:
float32 speed). bfloat16 ones keep each op's rounding: products, convolutions with constant weights
and average poolings (static shapes) run widened to float32 through oneDNN, each result rounded to
bfloat16 (kernels/widened.py); pointwise and reduction kernels are generated C. The rest of the heavy
ops left in a half type (recurrent layers, transposed and run-time-weight convolutions, dynamic
shapes) run as the ops' numpy references, 16-24x slower than float32 (ResNet-50 `--fp16` on the 2-core AVX2 VM, before the widening: 1.67-2.07
s against 71-129 ms). A deployment engineer asking for `--fp16` on a CPU expects speed or a reason,
so the compile warns, naming those ops and the float32 alternative; the program still runs, in the
precision it was asked for.
"""

from __future__ import annotations

import warnings
from collections import Counter

from ...ir.dtypes import DType
from ...ir.module import Module
from ...ir.op import OpKind
from ...ir.shape import Shape

HALF = (DType.float16, DType.bfloat16)
_HEAVY_KINDS = (OpKind.GEMM, OpKind.CONV)
_HEAVY_OPAQUE = frozenset({"lstm", "gru", "rnn"})
# products whose cpu kernels take half-precision inputs into float32 themselves (kernels/nbits.py)
_HALF_IN_FLOAT32 = frozenset({"matmul_nbits", "matmul_bnb4"})


class HalfPrecisionWarning(UserWarning):
    """A cpu program computes products or convolutions in float16/bfloat16, which it has no fast kernels for."""


def half_precision_ops(module: Module) -> Counter:
    """Op name -> count of the products, convolutions and recurrent layers that compute in a half type."""
    found: Counter = Counter()
    for ins in module.instructions:
        heavy = (ins.op.kind in _HEAVY_KINDS or ins.op.name in _HEAVY_OPAQUE) and ins.op.name not in _HALF_IN_FLOAT32
        dtype = ins.inputs[0].shape.dtype if ins.inputs and isinstance(ins.inputs[0].shape, Shape) else None
        static = isinstance(ins.shape, Shape) and not ins.shape.is_dynamic
        widened = static and (ins.op.name == "dot" or (ins.op.name == "convolution" and ins.inputs[1].is_literal)
                              or (ins.op.name == "pooling" and ins.op.mode == "average"))
        if heavy and dtype in HALF and not widened:
            found[ins.op.name] += 1
    return found


def warn_half_precision(module: Module, fp16_option: bool) -> None:
    found = half_precision_ops(module)
    if not found:
        return
    ops = ", ".join(f"{n} x{c}" for n, c in sorted(found.items()))
    cause = "compiled with fp16" if fp16_option else "the model computes in float16/bfloat16"
    warnings.warn(f"target 'cpu': {sum(found.values())} product/convolution step(s) in half precision ({ops}; "
                  f"{cause}) run as numpy reference kernels, typically 16-24x slower than float32: this target "
                  "has float32 kernels only (and without AVX-512 FP16/BF16 oneDNN would emulate them). For speed "
                  "compile without --fp16 (float32), or use the gpu target.", HalfPrecisionWarning, stacklevel=4)

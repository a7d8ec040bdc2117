"""Convolution, pooling and matrix products: oneDNN primitives built once at compile time
(weights packed, epilogues as post-ops), numpy's BLAS for products with run-time operands."""

from __future__ import annotations

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..lowering import Kernel, LowerContext, lowering, reference_kernel


def _f32(ins: Instruction) -> bool:
    return ins.shape.dtype == DType.float32


def plain(a: np.ndarray) -> np.ndarray:
    """oneDNN reads plain row-major buffers: strided views are copied first."""
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


@lowering("convolution", "conv_epilogue")
def conv(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    w = ctx.const(ins.inputs[1])
    if w is None or not _f32(ins) or ins.shape.ndim not in (3, 4, 5):
        return reference_kernel(ins, ctx)
    op = ins.op
    post, bias, n_res = [], None, 0
    if op.name == "conv_epilogue":
        bias = ctx.const(ins.inputs[2]) if op.has_bias else None
        n_res = op.n_residual
        # a residual is accumulated in place (oneDNN's sum post-op): oneDNN's binary-add post-op on
        # plain layouts falls back to its reference kernel, hundreds of times slower
        if n_res > 1:
            return reference_kernel(ins, ctx)
        if n_res:
            post.append(onednn.Sum())
        if op.activation:
            post.append(onednn.Eltwise(_ELTWISE[op.activation], *_alpha_beta(op)))
    prim = onednn.Convolution(ins.inputs[0].shape.lens, w, bias, stride=op.stride, padding=op.padding,
                              dilation=op.dilation, groups=op.group, post_ops=post, threads=ctx.threads)
    lens, dtype = ins.shape.lens, ins.shape.dtype.np

    if not n_res:
        return lambda args, out: prim(plain(args[0]), out=out)

    def run(args, out):
        if out is None:
            out = np.empty(lens, dtype)
        np.copyto(out, args[-1])
        return prim(plain(args[0]), out=out)

    return run


# conv_epilogue activation -> oneDNN eltwise kind (see onednn.postops.ELTWISE_KINDS)
_ELTWISE = {"relu": "relu", "leaky_relu": "relu", "clip": "clip", "sigmoid": "logistic", "tanh": "tanh",
            "silu": "swish", "hard_sigmoid": "hardsigmoid", "hard_swish": "hardswish", "gelu_erf": "gelu_erf"}


def _alpha_beta(op) -> tuple[float | None, float | None]:
    if op.activation == "leaky_relu":
        return op.alpha, None
    if op.activation in ("clip", "hard_sigmoid"):
        return op.alpha, op.beta
    return None, None


@lowering("pooling")
def pooling(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    op = ins.op
    if not _f32(ins) or op.mode not in ("max", "average") or ins.shape.ndim not in (3, 4, 5):
        return reference_kernel(ins, ctx)
    x = ins.inputs[0].shape.lens
    if op.global_pool:
        kernel, stride, padding = x[2:], (1,) * (len(x) - 2), (0,) * (2 * (len(x) - 2))
    else:
        kernel, stride, padding = op.lengths, op.stride, op.padding
    prim = onednn.Pooling(x, op.mode, kernel, stride=stride, padding=padding, dilation=() if op.global_pool else op.dilation,
                          ceil_mode=op.ceil_mode and not op.global_pool, count_include_pad=op.count_include_pad,
                          threads=ctx.threads)
    return lambda args, out: prim(plain(args[0]), out=out)


@lowering("dot")
def dot(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    if ins.shape.dtype in (DType.float16, DType.bfloat16):
        return reference_kernel(ins, ctx)  # accumulates in float32, as the reference defines
    a, b = ins.inputs
    w = ctx.const(b)
    if _f32(ins) and w is not None and a.shape.ndim >= 2:
        # constant weights: packed once into oneDNN's layout; its threads are the same OpenMP pool
        # as the generated kernels', where numpy's BLAS would bring a second, competing pool
        prim = onednn.MatMul(a.shape.lens, w, threads=ctx.threads)
        return lambda args, out: prim(plain(args[0]), out=out)
    if _f32(ins) and a.shape.ndim == b.shape.ndim >= 2:
        prim = onednn.MatMul(a.shape.lens, b.shape.lens, threads=ctx.threads)
        return lambda args, out: prim(plain(args[0]), plain(args[1]), out=out)

    def run(args, out):
        return np.matmul(args[0], args[1], out=out) if out is not None else np.matmul(args[0], args[1])

    return run

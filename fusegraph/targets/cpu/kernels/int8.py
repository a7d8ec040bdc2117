"""The int8 ops (ops_int8.py) as oneDNN u8 x s8 convolutions and matmuls: weights packed once,
scales and zero points as runtime-scale arguments bound once, requantization (or the float result)
written by the primitive itself.

Where oneDNN's integer sums would not be exact here (onednn/quant.py: weights whose int16 pairs may
saturate without VNNI, e.g. a compiled file made on a VNNI machine and loaded on another) the op's
numpy reference runs instead: slower, never wrong. An int8 source without VNNI is fed as uint8
(bits ^ 0x80 is x + 128; the zero point moves with it), oneDNN's own s8 x s8 path there halves the
weights.
"""

from __future__ import annotations

import functools

import numpy as np

from ....errors import CompileError
from ....ir.dtypes import DType
from ....ir.module import Instruction
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from .dense import Operand

DNNL = {DType.uint8: "u8", DType.int8: "s8", DType.float32: "f32", DType.int32: "s32"}


def _numbers(ins: Instruction, ctx: LowerContext):
    """(weights, scales, bias, Quant, feed-as-uint8) or None when the reference must run."""
    from ..onednn.quant import Quant, exact_here, has_vnni

    op = ins.op
    wq, scales = ctx.const(ins.inputs[1]), ctx.const(ins.inputs[2])
    bias = ctx.const(ins.inputs[3]) if op.has_bias else None
    if wq is None or scales is None or (op.has_bias and bias is None) or ins.shape.is_dynamic:
        return None
    if not exact_here(wq) or any(a != "relu" for a, _, _ in op.activations):
        return None
    shift = ins.inputs[0].shape.dtype == DType.int8 and not has_vnni()
    src, zp = ("u8", op.x_zero_point + 128) if shift else (DNNL[ins.inputs[0].shape.dtype], op.x_zero_point)
    quant = Quant(src, op.x_scale, zp, np.asarray(scales, np.float32), DNNL[op.out_type], op.y_scale, op.y_zero_point)
    return wq, bias, quant, shift


def _post_ops(op):
    from .. import onednn

    return [onednn.Eltwise(name) for name, _, _ in op.activations]


def _feed(shift: bool):
    if not shift:
        return lambda a: a
    return lambda a: a.view(np.uint8) ^ np.uint8(0x80)  # int8 x as uint8 x + 128, same strides


@lowering("int8_conv")
def int8_conv(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    got = _numbers(ins, ctx)
    op = ins.op
    if got is None or ins.shape.ndim not in (3, 4, 5):
        return reference_kernel(ins, ctx)
    wq, bias, quant, shift = got
    src = Operand(ins.inputs[0].shape, op.channels_last, standard=True)
    dst = Operand(ins.shape, op.channels_last)
    flops = 2.0 * ins.shape.elements * wq.size / wq.shape[0]
    kw = dict(stride=op.stride, padding=op.padding, dilation=op.dilation, groups=op.group, post_ops=_post_ops(op),
              threads=ctx.threads_for(flops))
    try:
        prim = onednn.Convolution(src.desc(quant.src), wq, bias, dst_layout=dst.desc(quant.dst), quant=quant, **kw)
    except CompileError:  # no int8 kernel but the reference one (few channels per group): in float
        if op.out_type == DType.int32:  # an integer sum has no float formulation that stays exact
            return reference_kernel(ins, ctx)
        wf = wq.astype(np.float32) * quant.weight_scales.reshape((-1,) + (1,) * (wq.ndim - 1))
        f32 = DType.float32
        fsrc = Operand(ins.inputs[0].shape.with_dtype(f32), op.channels_last, standard=True)
        fdst = Operand(ins.shape.with_dtype(f32), op.channels_last)
        return _in_float(op, onednn.Convolution(fsrc.desc(), wf, bias, dst_layout=fdst.desc(), **kw), fsrc, fdst,
                         ins.shape)
    return _kernel(prim, src.view, dst.view, ins.shape, shift)


def _kernel(prim, read, write, shape, shift: bool) -> Kernel:
    """Run `prim` on x as `read` sees it (fed as uint8 with `shift`), into the output as `write` sees it."""
    lens, dtype, feed = shape.lens, shape.dtype.np, _feed(shift)

    def run(args, out):
        if out is None:
            out = np.empty(lens, dtype)
        prim(read(feed(args[0])), out=write(out))
        return out

    return run


def _in_float(op, prim, src: Operand, dst: Operand, shape) -> Kernel:
    """Dequantize x, the float primitive (bias and activations fused), requantize: the region as the
    model wrote it, at float speed."""
    lens = shape.lens

    def run(args, out):
        y = np.empty(lens, np.float32)
        prim(src.view(op._dequantize_x(args[0])), out=dst.view(y))
        q = op.requantize(y)
        if out is None:
            return q
        np.copyto(out, q)
        return out

    return run


@lowering("int8_dot")
def int8_dot(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    got = _numbers(ins, ctx)
    if got is None or ins.inputs[0].shape.ndim < 2:
        return reference_kernel(ins, ctx)
    wq, bias, quant, shift = got
    a = Operand(ins.inputs[0].shape, standard=True)
    flops = 2.0 * ins.shape.elements * wq.shape[0]
    prim = onednn.MatMul(a.desc(quant.src), wq, bias, post_ops=_post_ops(ins.op), threads=ctx.threads_for(flops),
                         quant=quant)
    product = prim.out_shape  # the output is its reshape (out_lens): the same bytes
    run = _kernel(prim, a.view, lambda out: out.reshape(product), ins.shape, shift)
    if not shift:  # (a shifted int8 source is flipped by numpy per call: a Python step)
        run.native = functools.partial(_product_call, prim, a, product)  # type: ignore[attr-defined]
    return run


def _product_call(prim, a, product: tuple[int, ...], args, out):
    """int8_dot's C form: the oneDNN call over x as the primitive reads it and the planned output
    seen as the product it writes (a reshape, the same bytes); QDQ BERT's int8 products were Python
    steps between native programs. None where either would need a copy."""
    from ..native_program import primitive_call

    x, y = a.exact(args[0]), out.reshape(product)
    if x is None or not out.flags.c_contiguous or y.ctypes.data != out.ctypes.data:
        return None
    return [primitive_call(prim, x, out=y)]


# MatMulInteger's integer product (quant_dot) through float BLAS where that is exact: every partial
# sum is bounded by K * max|a| * max|b|; float32 holds integers exactly below 2**24, float64 below
# 2**53, and below 2**31 int32 cannot wrap either (the op wraps like the hardware).
FLOAT_EXACT = ((np.float32, 2**24), (np.float64, 2**31))


def _magnitude(x: np.ndarray) -> int:
    return max(abs(int(x.min())), abs(int(x.max()))) if x.size else 0


@lowering("quant_dot")
def quant_dot(ins: Instruction, ctx: LowerContext) -> Kernel:
    """The exact product in float32 or float64 BLAS, chosen per call from the operands' largest
    magnitudes (a constant b's once); numpy's int32 product past both bounds."""
    b_const = ctx.const(ins.inputs[1])
    k = ins.inputs[0].shape.lens[-1] if ins.inputs[0].shape.ndim else 1
    fixed = None if b_const is None else (_magnitude(b_const), {t: b_const.astype(t) for t, _ in FLOAT_EXACT})
    reference = ins.op.compute

    def run(args, out):
        a, b = args
        bound = k * _magnitude(a) * (fixed[0] if fixed else _magnitude(b))
        r = None
        for t, limit in FLOAT_EXACT:
            if bound < limit:
                r = np.matmul(a.astype(t), fixed[1][t] if fixed else b.astype(t)).astype(np.int32)
                break
        if r is None:
            r = reference(args)
        if out is None:
            return r
        np.copyto(out, r)
        return out

    return run

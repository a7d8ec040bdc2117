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
                         ins.shape, ins.inputs[0].shape, ctx)
    return _kernel(prim, src.view, dst.view, ins.shape, shift, exact=(src, dst))


def _kernel(prim, read, write, shape, shift: bool, exact=None) -> Kernel:
    """Run `prim` on x as `read` sees it (fed as uint8 with `shift`), into the output as `write` sees it.
    `exact` (src, dst): the Operands whose `exact` views give a native program's call, with no copy
    (se_cnn_qdq's five int8 convolutions were Python steps between native programs)."""
    lens, dtype, feed = shape.lens, shape.dtype.np, _feed(shift)

    def run(args, out):
        if out is None:
            out = np.empty(lens, dtype)
        prim(read(feed(args[0])), out=write(out))
        return out

    if exact is not None and not shift:  # (fed as uint8, x needs a flipped copy every run)
        def native(args, out):
            from ..native_program import primitive_call

            a, o = exact[0].exact(args[0]), exact[1].exact(out)
            return None if a is None or o is None else [primitive_call(prim, a, out=o)]

        run.native = native  # type: ignore[attr-defined]
    return run


def _in_float(op, prim, src: Operand, dst: Operand, shape, x_shape, ctx: LowerContext) -> Kernel:
    """Dequantize x, the float primitive (bias and activations fused), requantize: the region as the
    model wrote it, at float speed. In a native program the two conversions are generated C (the
    DequantizeLinear and QuantizeLinear bodies) around the primitive's call: an SE block's few-channel
    1x1 convolutions were Python steps of three numpy passes."""
    lens = shape.lens

    def run(args, out):
        y = np.empty(lens, np.float32)
        prim(src.view(op._dequantize_x(args[0])), out=dst.view(y))
        q = op.requantize(y)
        if out is None:
            return q
        np.copyto(out, q)
        return out

    conversions = _conversions(op, x_shape, shape, ctx)
    if conversions is None:
        return run
    (dequantize, x_numbers), (requantize, y_numbers) = conversions

    def native(args, out):
        from ..native_program import primitive_call

        xf, yf = np.empty(x_shape.lens, np.float32), np.empty(lens, np.float32)  # this thread's, kept by the call
        a, o = src.exact(xf), dst.exact(yf)
        first, last = dequantize.native([args[0], *x_numbers], xf), requantize.native([yf, *y_numbers], out)
        if a is None or o is None or first is None or last is None:
            return None
        return [*first, primitive_call(prim, a, out=o), *last]

    run.native = native  # type: ignore[attr-defined]
    return run


def _conversions(op, x_shape, shape, ctx: LowerContext):
    """((dequantize step, its scale and zero point), (requantize step, ...)) as generated pointwise
    kernels, or None (a float result: no requantization; a layout they do not take)."""
    from types import SimpleNamespace

    from ....ir.shape import Shape
    from ....ops.quantize import DequantizeLinear, QuantizeLinear
    from ..codegen import CodegenUnsupported, pointwise_kernel_for
    from .pointwise import compiled_kernel

    if op.out_type == DType.float32 or not x_shape.standard:
        return None
    f32 = DType.float32

    def numbers(scale: float, zero_point: int, lens) -> tuple[np.ndarray, np.ndarray]:  # broadcast views
        return tuple(np.broadcast_to(np.float32(v), lens) for v in (scale, zero_point))  # type: ignore[return-value]

    x_numbers, y_numbers = numbers(op.x_scale, op.x_zero_point, x_shape.lens), numbers(op.y_scale, op.y_zero_point, shape.lens)
    steps = []
    for expr, src_shape, out_shape in ((DequantizeLinear().expr, x_shape, x_shape.with_dtype(f32)),
                                       (QuantizeLinear(to=op.out_type).expr, shape.with_dtype(f32), shape)):
        if not out_shape.standard:
            return None
        scalar = Shape.of(f32, out_shape.lens, [0] * out_shape.ndim)
        ins = [src_shape, scalar, scalar]
        try:
            source, layout = pointwise_kernel_for(expr, ins, out_shape)
        except CodegenUnsupported:
            return None
        step = SimpleNamespace(shape=out_shape, inputs=[SimpleNamespace(shape=s) for s in ins])
        steps.append(compiled_kernel(step, ctx, source, layout.dims()))
    return (steps[0], x_numbers), (steps[1], y_numbers)


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

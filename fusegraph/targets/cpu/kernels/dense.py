"""Convolution, deconvolution, pooling and matrix products: oneDNN primitives built once at compile
time (weights packed, epilogues as post-ops, operands read where the IR says they lie); tiny
convolutions in numpy (small.py); numpy's matmul for the dtypes oneDNN lacks."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Instruction
from ....ir.shape import Shape, same_steps, standard_strides
from ..lowering import Kernel, LowerContext, lowering, reference_kernel
from ..ops import to_channels_first
from .epilogue import Chain, finite, native_form, pick_form
from .small import SMALL_CONV, c_small_conv, small_conv, small_max_pool
from .widened import widened_convolution, widened_dot, widened_pooling


def _f32(ins: Instruction) -> bool:
    return ins.shape.dtype == DType.float32


class Operand:
    """How a kernel's input or output is seen by oneDNN: with the strides the IR gives it (a strided
    view costs no copy), or `standard` ones. A channels-last op's tensors (N, *spatial, C in the IR)
    are seen as N, C, *spatial: the same bytes through a transpose."""

    def __init__(self, shape: Shape, channels_last: bool = False, standard: bool = False):
        self.perm = to_channels_first(shape.ndim) if channels_last else None
        order = self.perm or range(shape.ndim)
        self.lens = tuple(shape.lens[p] for p in order)
        strides = standard_strides(shape.lens) if standard else shape.strides  # standard: dense as the IR's lens
        self.strides = tuple(strides[p] for p in order)  # in elements, for oneDNN
        self.byte_strides = tuple(s * shape.dtype.itemsize for s in self.strides)  # numpy's

    def desc(self, dtype: str = "f32"):
        from .. import onednn

        return onednn.MemDesc.plain(self.lens, dtype, strides=self.strides)

    def view(self, a: np.ndarray) -> np.ndarray:
        """`a` as described, copied into that layout if it is laid out otherwise."""
        v = a.transpose(self.perm) if self.perm is not None else a
        if same_steps(v.strides, self.byte_strides, self.lens):
            return v
        fixed = np.lib.stride_tricks.as_strided(np.empty(max(np.prod(self.lens), 1), v.dtype), self.lens,
                                                self.byte_strides)
        np.copyto(fixed, v)
        return fixed

    def exact(self, a: np.ndarray) -> np.ndarray | None:
        """`a` as described where it is laid out so (no copy), else None."""
        v = a.transpose(self.perm) if self.perm is not None else a
        return v if same_steps(v.strides, self.byte_strides, self.lens) else None


def _dynamic(ins: Instruction) -> bool:
    """Whether `ins` or one of its inputs has dims known only at run time."""
    return any(not isinstance(s, Shape) or s.is_dynamic for s in (ins.shape, *(x.shape for x in ins.inputs)))


@lowering("convolution", "conv_epilogue", "deconvolution", "deconv_epilogue")
def window(ins: Instruction, ctx: LowerContext) -> Kernel:
    """(De)convolutions with constant weights, their epilogues as bias + post-ops."""
    from ....errors import CompileError
    from .. import onednn

    w = ctx.const(ins.inputs[1])
    if w is None or ins.shape.ndim not in (3, 4, 5) or _dynamic(ins):  # (oneDNN's primitives take fixed shapes)
        return reference_kernel(ins, ctx)
    if ins.shape.dtype in (DType.float16, DType.bfloat16) and ins.op.name == "convolution":
        return widened_convolution(ins, w, ctx) or reference_kernel(ins, ctx)
    if ins.shape.dtype == DType.int32:
        from .integer_conv import integer_convolution

        return integer_convolution(ins, w, ctx)
    if not _f32(ins):
        return reference_kernel(ins, ctx)
    op = ins.op
    fused = hasattr(op, "activations")
    n_res = op.n_residual if fused else 0
    if n_res > 1:  # oneDNN sums one residual in place; its binary add on plain layouts is its reference kernel
        return reference_kernel(ins, ctx)
    # multiply-adds: w.size / w.shape[0] per output value of a convolution, per input value of a deconvolution
    per = ins.inputs[0].shape if op.name.startswith("deconv") else ins.shape
    kw = dict(stride=op.stride, padding=op.padding, dilation=op.dilation, groups=op.group,
              threads=ctx.threads_for(2.0 * per.elements * w.size / w.shape[0]))
    cls = onednn.Convolution
    if op.name.startswith("deconv"):
        cls, kw["output_padding"] = onednn.Deconvolution, op.output_padding
    bias = ctx.const(ins.inputs[2]) if fused and op.has_bias else None
    channels_last = getattr(op, "channels_last", False)
    dst = Operand(ins.shape, channels_last)
    activations = op.activations if fused else ()
    conv = not op.name.startswith("deconv")
    if conv and not channels_last and ins.shape.elements * w.size / w.shape[0] < SMALL_CONV:
        return c_small_conv(ins, w, bias, activations, ctx)

    def make(standard: bool, post: bool, finite_input: bool = True):
        src = Operand(ins.inputs[0].shape, channels_last, standard=standard)
        post_ops = Chain(activations, post, finite_input).post_ops
        prim = cls(src.desc(), w, bias, dst_layout=dst.desc(), post_ops=post_ops, **kw)
        if "ref:" in prim.impl:  # e.g. "conv:any+ref:any": a deconvolution over a reference convolution
            raise CompileError(f"oneDNN has only its reference kernel ({prim.impl}) for {ins.op}")
        return src, prim

    # the input where it lies, else a copy in the standard layout; oneDNN's gemm-based kernels (few
    # output channels) apply eltwise post-ops at reference speed (a sigmoid over 100K outputs: 10 ms)
    # and sometimes not at all: numpy applies the chain afterwards there
    src = prim = None
    for standard, post in ((False, True), (True, True)) + (((True, False),) if not n_res else ()):
        try:
            src, prim = make(standard, post)
        except CompileError:
            continue
        if post and "gemm" in prim.impl and activations and not n_res:
            src, prim, post = *make(standard, False), False
        break
    if prim is None:  # numpy's im2col + BLAS where oneDNN has only its reference kernel
        return _small(ins, w, bias, activations) if conv and not channels_last else reference_kernel(ins, ctx)
    pick = pick_form(activations, post, prim, lambda: make(standard, post, False)[1], (w, bias), n_res)
    lens, dtype = ins.shape.lens, ins.shape.dtype.np

    def run(args, out):
        chain, p = pick(args)
        out, residuals = chain.destination(out, lens, dtype, args)
        p(src.view(args[0]), out=dst.view(out))
        chain.finish(out, residuals)
        return out

    run.native = lambda args, out: native_form(pick, src.exact(args[0]), dst.exact(out), args, out, n_res)  # type: ignore[attr-defined]
    if getattr(op, "winograd", 0):
        from .winograd import winograd_conv

        return winograd_conv(ins, w, bias, ctx, direct=run)
    return run


def _small(ins: Instruction, w: np.ndarray, bias: np.ndarray | None, activations) -> Kernel:
    fn = small_conv(ins.inputs[0].shape.lens, w, bias, ins.op, activations, ins.shape.lens)
    k = 2 + (bias is not None)
    lens, dtype = ins.shape.lens, ins.shape.dtype.np

    def run(args, out):
        residuals = args[k:]
        # plan_memory may give the output its dying residual's buffer (oneDNN's Sum adds onto it);
        # this kernel writes the product first and adds the residual after, so it needs its own
        if out is None or any(np.may_share_memory(r, out) for r in residuals):
            dest = fn(np.ascontiguousarray(args[0]), np.empty(lens, dtype), residuals)
            if out is None:
                return dest
            np.copyto(out, dest)
            return out
        return fn(np.ascontiguousarray(args[0]), out, residuals)

    return run


def pooling_work(outputs: int, spatial, kernel, padding) -> int:
    """Values a pooling reads: each output's window as far as it overlaps the padded input (a
    [1, 320, 1, 1] average over a 320 x 320 window, as an exported adaptive pool writes it, reads
    one value per output, not 102400: counted whole, its 33 "MFLOP" forked a team for 320 adds)."""
    n = len(spatial)
    return outputs * math.prod(min(k, s + padding[d] + padding[d + n]) for d, (k, s) in enumerate(zip(kernel, spatial)))


@lowering("pooling", "pooling_channels_last")
def pooling(ins: Instruction, ctx: LowerContext) -> Kernel:
    from .. import onednn

    op = ins.op
    if _dynamic(ins):  # (a window over the boxes a detector kept)
        return reference_kernel(ins, ctx)
    if ins.shape.dtype in (DType.float16, DType.bfloat16) and op.mode == "average" and op.name == "pooling":
        return widened_pooling(ins, ctx) or reference_kernel(ins, ctx)
    if not _f32(ins) or op.mode not in ("max", "average") or ins.shape.ndim not in (3, 4, 5):
        return reference_kernel(ins, ctx)
    channels_last = op.name == "pooling_channels_last"
    src, dst = Operand(ins.inputs[0].shape, channels_last), Operand(ins.shape, channels_last)
    x = src.lens
    if op.global_pool:
        kernel, stride, padding = x[2:], (1,) * (len(x) - 2), (0,) * (2 * (len(x) - 2))
    else:
        kernel, stride, padding = op.lengths, op.stride, op.padding
    threads = ctx.threads_for(pooling_work(ins.shape.elements, x[2:], kernel, padding))
    prim = onednn.Pooling(src.desc(), op.mode, kernel, stride=stride, padding=padding,
                          dilation=() if op.global_pool else op.dilation, ceil_mode=op.ceil_mode and not op.global_pool,
                          count_include_pad=op.count_include_pad, dst_layout=dst.desc(), threads=threads)
    if ("simple" in prim.impl and op.mode == "max" and not channels_last and not op.global_pool
            and ins.inputs[0].shape.standard and ins.shape.elements * math.prod(kernel) < SMALL_CONV):
        return small_max_pool(ins, kernel, ctx)  # oneDNN's plain C loop on N, C, *spatial: 67 us for 4000 values
    lens, dtype = ins.shape.lens, ins.shape.dtype.np
    # oneDNN's max pooling skips a NaN (its max is vmaxps), where the reference's max is NaN: an input
    # that is not all finite goes to the reference kernel (natively: oneDNN's, then the NaN put back).
    # Average pooling sums, so it keeps NaN itself.
    exact = reference_kernel(ins, ctx) if op.mode == "max" else None
    if op.global_pool:
        window = (kernel, stride, (0,) * len(kernel), (1,) * len(kernel))
    else:
        g = op.geometry(x[2:])
        window = (g.lengths, g.strides, g.begins, g.dilations)

    def run(args, out):
        if exact is not None and not finite(args[0]):
            return exact(args, out)
        if out is None:
            out = np.empty(lens, dtype)
        prim(src.view(args[0]), out=dst.view(out))
        return out

    def native(args, out):
        from ..native_finite import guarded, nan_max_pool
        from ..native_program import guard, primitive_call

        a, o = src.exact(args[0]), dst.exact(out)
        if a is None or o is None:
            return None
        call = primitive_call(prim, a, out=o)
        if exact is None:
            return [call]
        fix = nan_max_pool(o, a, *window, threads)
        both = guarded([args[0]], [call], [call, fix]) if fix is not None else None
        if both is not None:
            return [both]
        checks = guard(args[0])
        return None if checks is None else [*checks, call]

    run.native = native  # type: ignore[attr-defined]
    return run


def _matmul(ins: Instruction, ctx: LowerContext, b, **kw):
    """A oneDNN MatMul reading a (and a run-time b) where they lie; if oneDNN has no fast kernel for
    those strides, from standard copies."""
    from ....errors import CompileError
    from .. import onednn

    def make(standard: bool):
        a = Operand(ins.inputs[0].shape, standard=standard)
        bb = b if isinstance(b, np.ndarray) else Operand(b, standard=standard)
        flops = 2.0 * ins.shape.elements * ins.inputs[0].shape.lens[-1]
        prim = onednn.MatMul(a.desc(), bb if isinstance(b, np.ndarray) else bb.desc(), threads=ctx.threads_for(flops),
                             **kw)
        return prim, a, bb

    try:
        return make(False)
    except CompileError:
        return make(True)


@lowering("dot")
def dot(ins: Instruction, ctx: LowerContext) -> Kernel:
    if ins.shape.dtype in (DType.float16, DType.bfloat16):  # accumulates in float32, as the reference defines
        return widened_dot(ins, ctx) or reference_kernel(ins, ctx)
    a, b = ins.inputs
    if any(x.shape.is_dynamic for x in (ins, a, b)):
        return reference_kernel(ins, ctx)  # oneDNN primitives are made for fixed shapes
    w = ctx.const(b)
    if _f32(ins) and w is not None and a.shape.ndim >= 2:
        # constant weights: packed once into oneDNN's layout; its threads are the same OpenMP pool
        # as the generated kernels', where numpy's BLAS would bring a second, competing pool
        prim, av, _ = _matmul(ins, ctx, w)

        def dense(args, out):
            return prim(av.view(args[0]), out=out)

        dense.native = lambda args, out: _native_product(prim, [av.exact(args[0])], out)  # type: ignore[attr-defined]

        from .sparse import sparse_dot  # mostly-zero weights: a sparse product where it times faster

        return sparse_dot(ins, ctx, w, dense) or dense
    if _f32(ins) and a.shape.ndim == b.shape.ndim >= 2:
        prim, av, bv = _matmul(ins, ctx, b.shape)
        operands = _Operands((av, bv))

        def product(args, out):
            return prim(*operands.python(args), out=out)

        def native(args, out):
            calls, ops = operands.native(args)
            return None if ops is None else [*calls, *_native_product(prim, ops, out)]

        product.native = native  # type: ignore[attr-defined]
        return product

    def run(args, out):
        return np.matmul(args[0], args[1], out=out) if out is not None else np.matmul(args[0], args[1])

    return run


@lowering("dot_epilogue")
def dot_epilogue(ins: Instruction, ctx: LowerContext) -> Kernel:
    op, w = ins.op, ctx.const(ins.inputs[1])
    if not _f32(ins) or w is None or ins.shape.is_dynamic or op.n_residual > 1:
        return reference_kernel(ins, ctx)  # oneDNN sums one residual in place
    from ....errors import CompileError

    bias = ctx.const(ins.inputs[2]) if op.has_bias else None
    lens, dtype = ins.shape.lens, ins.shape.dtype.np
    try:
        prim, av, _ = _matmul(ins, ctx, w, bias=bias, post_ops=Chain(op.activations, finite_input=True).post_ops)
    except CompileError:
        # oneDNN has only its reference kernel for some chains (a linear step before the Sum: OPT's
        # and Whisper's scaled query projections): the product there, the whole chain after it in numpy
        prim, av, _ = _matmul(ins, ctx, w, bias=bias)
        plain = Chain(op.activations, post=False)

        def pick(args):
            return plain, prim
    else:
        pick = pick_form(op.activations, True, prim,
                        lambda: _matmul(ins, ctx, w, bias=bias, post_ops=Chain(op.activations).post_ops)[0],
                        (w, bias), op.n_residual)
    product = prim.out_shape  # a @ b's lens; the output is its reshape (`out_lens`), same bytes

    def run(args, out):
        chain, p = pick(args)
        out, residuals = chain.destination(out, lens, dtype, args)
        p(av.view(args[0]), out=out.reshape(product))
        chain.finish(out, residuals)
        return out

    from .sparse import sparse_dot_epilogue  # mostly-zero weights: a sparse product where it times faster

    sparse = sparse_dot_epilogue(ins, ctx, w, bias, run)
    if sparse is not None:  # (no C form: a native program ends before it)
        return sparse
    if hasattr(pick, "native"):
        run.native = lambda args, out: native_form(pick, av.exact(args[0]), out.reshape(product), args, out, op.n_residual)  # type: ignore[attr-defined]
    return run


class _Operands:
    """A primitive's run-time operands as it reads them: where they lie, or (a broadcast key shared
    by the heads of multi-query attention, which oneDNN reads from standard copies) copied into this
    thread's scratch, the same buffer in a step and in a native program (a primitive's memory objects
    stay bound to the buffers it last ran on)."""

    def __init__(self, views: Sequence[Operand]):
        self.views = views
        self.local = threading.local()

    def _scratch(self, k: int, a: np.ndarray) -> np.ndarray | None:
        v = self.views[k]
        if v.strides != standard_strides(v.lens) or v.perm is not None:
            return None
        buffers = self.local.__dict__.setdefault("buffers", {})
        if k not in buffers:
            buffers[k] = np.empty(v.lens, a.dtype)
        return buffers[k]

    def python(self, args) -> list[np.ndarray]:
        out = []
        for k, (v, a) in enumerate(zip(self.views, args)):
            x = v.exact(a)
            if x is None and (s := self._scratch(k, a)) is not None:
                np.copyto(s, a)
                x = s
            out.append(v.view(a) if x is None else x)
        return out

    def native(self, args) -> tuple[list, list | None]:
        from ..native_program import copy_any

        calls, out = [], []
        for k, (v, a) in enumerate(zip(self.views, args)):
            x = v.exact(a)
            if x is None and (s := self._scratch(k, a)) is not None and (c := copy_any(s, a)) is not None:
                calls += c
                x = s
            if x is None:
                return [], None
            out.append(x)
        return calls, out


def _native_product(prim, operands: list, out: np.ndarray):
    """A plain oneDNN product's C call, or None where an operand is not laid out as it reads it."""
    from ..native_program import primitive_call

    return None if any(a is None for a in operands) else [primitive_call(prim, *operands, out=out)]

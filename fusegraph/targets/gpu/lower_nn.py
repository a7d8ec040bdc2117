"""Lowerings of the heavy ops to the vendor libraries through torch: matmuls to cuBLAS(Lt) (attention:
lower_attention.py), convolutions and pooling to cuDNN in channels-last, the matmuls with a bias or
any other fused epilogue to the faster (autotuned: gemm_runner.py) of the Triton GEMM template and
the library path."""

from __future__ import annotations

import math

import numpy as np

from ...errors import CompileError
from ...ops.conv import window_attrs
from . import kernels
from .device import torch
from .gemm_runner import BiasGemm, EpilogueGemm, epilogue_runner, nhwc
from .lowering import lowering
from .patterns import FLOATS


# -- matmul -----------------------------------------------------------------------------------------
@lowering("dot", mode="into", note="cuBLAS", cublas=True)
def dot(ctx, step):
    t = torch()

    def run(out, a, b):
        if a.dtype.is_floating_point:
            t.matmul(a, b, out=out)
        else:  # integer matmuls are exact in float64 (cuBLAS has no integer path here)
            out.copy_(t.matmul(a.to(t.float64), b.to(t.float64)))
    return run


@lowering("gemm_bias", mode="into",
          note="cuBLASLt addmm with the bias epilogue, or the Triton template with it: autotuned")
def gemm_bias(ctx, step):
    return epilogue_runner(ctx, step, BiasGemm)


@lowering("quant_dot", mode="into", note="int8 x int8 weights: torch._int_mm; else exact in float64", cublas=True)
def quant_dot(ctx, step):
    from .patterns_quant import quant_product

    if quant_product(step.ins):  # int8 x constant int8 weights: cuBLASLt's int8 GEMM
        from .lower_quant import packed_dot

        return packed_dot(ctx, step)
    t = torch()

    def run(out, a, b, *zero_points):
        af, bf = a.to(t.float64), b.to(t.float64)
        if zero_points:
            af = af - zero_points[0].to(t.float64)
            if len(zero_points) > 1:
                bf = bf - zero_points[1].to(t.float64)
        out.copy_(t.matmul(af, bf))
    return run


@lowering("einsum", mode="into", cublas=True)
def einsum(ctx, step):
    t = torch()
    eq = step.ins.op.equation

    def run(out, *xs):
        out.copy_(t.einsum(eq, *xs))
    return run


@lowering("conv_gemm", mode="into",
          note="1x1 convolution as a matmul over channels-last rows with its bias (ReLU) epilogue: one "
               "cuBLASLt call or the Triton template, autotuned")
def conv_gemm(ctx, step):
    return epilogue_runner(ctx, step, BiasGemm)


# -- convolution ------------------------------------------------------------------------------------
def _conv_setup(step, transposed: bool):
    """The torch (transposed) convolution of `step`'s spatial rank, that rank, and the op's window:
    pad begins, pad ends, strides, dilations."""
    op = step.ins.op
    nsp = step.inputs[0].shape.ndim - 2
    if nsp not in (1, 2, 3):
        raise CompileError(f"target 'gpu': {op} has {nsp} spatial dims (1 to 3 supported)")
    F = torch().nn.functional
    fns = (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d) if transposed else (F.conv1d, F.conv2d, F.conv3d)
    return (fns[nsp - 1], nsp, *window_attrs(op, nsp))


def _pad_args(pb, pe):
    """torch.nn.functional.pad's argument (last axis first) for begins `pb` and ends `pe`."""
    out = []
    for b, e in zip(reversed(pb), reversed(pe)):
        out += [b, e]
    return out


def tiles_the_input(step) -> bool:
    """Whether the convolution `step` runs as a permuted copy and one cuBLAS matmul (_patch_matmul)."""
    nsp = step.inputs[0].shape.ndim - 2
    if nsp not in (1, 2, 3):
        return False
    pb, pe, strides, dils = window_attrs(step.ins.op, nsp)
    return _tiles_the_input(step.ins.op, step.inputs[0].shape, step.inputs[1].shape, pb, pe, strides, dils)


@lowering("convolution", mode="into", cublas=tiles_the_input,
          note="cuDNN writing the arena buffer, channels-last; windows that tile the input: a permuted copy and a matmul; "
               "small depthwise ones: a Triton window kernel")
def convolution(ctx, step):
    op = step.ins.op
    conv, nsp, pb, pe, strides, dils = _conv_setup(step, transposed=False)
    t = torch()
    symmetric = tuple(pb) == tuple(pe)
    pads = _pad_args(pb, pe)
    padding = list(pb) if symmetric else [0] * nsp  # asymmetric pads are applied before, by F.pad
    if tiles_the_input(step):
        return _patch_matmul
    rows = depthwise_rows(step)
    if rows:
        return _triton_depthwise(ctx, step, pb, strides, dils, rows)
    into = CudnnInto(strides, padding, dils, op.group)

    def run(out, x, w):
        if kernels.compiling_all():  # cuDNN's plan for these shapes built after the walk (kernels.after_walk)
            kernels.after_walk(lambda: run(out, x, w), library=True)
            return
        if not symmetric:
            x = t.nn.functional.pad(x, pads)
        if not x.dtype.is_floating_point:  # integer convolutions: exact in float64, then back
            # rounded, not truncated: cuDNN may pick an FFT or Winograd algorithm, whose float64
            # result is within 1e-9 of the integer sum but on either side of it
            y = conv(x.to(t.float64), w.to(t.float64), None, strides, padding, dils, op.group)
            out.copy_(y.round().to(x.dtype))
        elif not into(out, x, w):
            out.copy_(conv(x, w, None, strides, padding, dils, op.group))
    return run


class CudnnInto:
    """A convolution written by cuDNN straight into the step's arena buffer (aten's
    cudnn_convolution.out), where torch would run it with cuDNN and the input, weights and output
    share one memory format (so cuDNN copies nothing): the output then lives in the planned arena,
    not in a tensor of its own beside it (issue 23: such outputs, kept until their last reader, were
    up to 50 MiB outside the arena at batch 32, twice: in the warm-up run and in the graph's pool).
    A 1-D convolution runs as the 2-D one of height 1, as torch runs it. Decided at the first call
    (the warm-up, before the capture); a call it does not take returns False."""

    def __init__(self, strides, padding, dils, groups):
        self.args = (list(strides), list(padding), list(dils), groups)
        self.ok: bool | None = None

    def __call__(self, out, x, w) -> bool:
        strides, padding, dils, groups = self.args
        if x.dim() == 3:  # [N, C, L] as [N, C, 1, L]
            x, w, out = x.unsqueeze(2), w.unsqueeze(2), out.unsqueeze(2)
            strides, padding, dils = [1, *strides], [0, *padding], [1, *dils]
        if self.ok is None:
            self.ok = self._takes(out, x, w, strides, padding, dils, groups)
        if not self.ok:
            return False
        t = torch()
        cudnn = t.backends.cudnn
        t.ops.aten.cudnn_convolution.out(x, w, padding, strides, dils, groups, cudnn.benchmark,
                                         cudnn.deterministic, cudnn.allow_tf32, out=out)
        return True

    @staticmethod
    def _takes(out, x, w, strides, padding, dils, groups) -> bool:
        t = torch()
        if not x.is_cuda or getattr(t.version, "hip", None) or not t.backends.cudnn.is_available():
            return False
        backend = t._C._select_conv_backend(x, w, None, strides, padding, dils, False, [0] * len(strides), groups)
        if backend != t._C._ConvBackend.Cudnn:
            return False
        last = t.channels_last if x.dim() == 4 else t.channels_last_3d
        return any(all(v.is_contiguous(memory_format=f) for v in (out, x, w)) for f in (last, t.contiguous_format))


DEPTHWISE_MAX_OUTPUTS = 1 << 19  # depthwise convolutions up to this many outputs run as Triton's kernels
DEPTHWISE_MAX_TAPS = 9  # and larger 2-D ones with windows of up to this many taps (3x3), ...
DEPTHWISE_LARGE_ROWS = 4  # ... in the tiled form, this many output rows a program


def triton_depthwise_rows(window: tuple[int, ...], outputs: int) -> int:
    """The output rows a program of Triton's window kernel (triton_pool.py) for a depthwise convolution
    of `window` (its spatial dims) and `outputs` elements, or 0 where cuDNN runs it: Triton's with at
    most DEPTHWISE_MAX_OUTPUTS outputs (triton_depthwise.ROWS rows), or in 2 spatial dims with a window
    of at most DEPTHWISE_MAX_TAPS (DEPTHWISE_LARGE_ROWS rows). cuDNN's plan for each new shape costs the
    compile 0.2-1.3 s. On the H200 in fp16 (`benchmarks/gpu_depthwise.py`): at batch 1 the kernel, one
    row a program, beat cuDNN (MobileNetV3-Large's 12: 36 against 46 us, ConvNeXt-T's 7x7s 33 against
    49); at batch 32 one row lost (MobileNetV3-Large 317 against 141 us), four rows matched cuDNN on
    3x3 windows (MobileNetV3-Large's 8: 102 against 92 us, EfficientNet-B0's 6: 118 against 116) but
    not on larger ones (a 5x5 / 2 of EfficientNet-B0: 558 against 30 us; ConvNeXt-T's 7x7s 389
    against 153). With its 3x3s on Triton MobileNetV3-Large's batch-32 compile took 5.1-5.9 s instead
    of 6.3-7.5, EfficientNet-B0's 6.3 instead of 8.5, their runs 0.5-0.7 % longer."""
    from .triton_depthwise import ROWS

    if outputs <= DEPTHWISE_MAX_OUTPUTS:
        return ROWS
    return DEPTHWISE_LARGE_ROWS if len(window) == 2 and math.prod(window) <= DEPTHWISE_MAX_TAPS else 0


def depthwise_rows(step) -> int:
    """triton_depthwise_rows for the convolution `step` if it is depthwise (one input and one output
    channel a group, 1 to 3 float spatial dims), else 0."""
    x, w = step.inputs[0].shape, step.inputs[1].shape
    if not (x.ndim in (3, 4, 5) and x.dtype.value in FLOATS and step.ins.op.group == x.lens[1] > 1
            and w.lens[0] == x.lens[1] and w.lens[1] == 1):
        return 0
    return triton_depthwise_rows(tuple(w.lens[2:]), step.ins.shape.elements)


def _triton_depthwise(ctx, step, begins, strides, dils, rows: int):
    from .triton_pool import PoolLauncher

    lengths = step.inputs[1].shape.lens[2:]
    launcher = PoolLauncher("depthwise", step.inputs[0].shape.dtype, lengths, strides, begins, dils,
                            ctx.constant(np.ones(1, dtype=np.float32)), ctx.scratch, rows=rows)  # (no counts)
    ctx.kernels.append(launcher)
    return launcher


PATCH_MAX_CHANNELS = 16  # tiling convolutions of fewer input channels run as a permuted copy and a matmul


def _tiles_the_input(op, x_shape, w_shape, pb, pe, strides, dils) -> bool:
    """Whether the 2-D convolution's windows tile its input (stride == kernel, unpadded, undilated,
    ungrouped, float) and it has few input channels: a patch embedding of an image, an im2col that is
    one permuted copy and then one matmul. cuDNN's channels-last kernels ran ViT-B/16's (3 input
    channels, 16x16 / 16) at 2 % of the H200's fp16 rate (405 us at batch 32, issue 23); the matmul is
    cuBLAS's. With many channels cuDNN is the faster: ConvNeXt's 2x2 / 2 downsampling (96 to 384
    channels) took it 12-23 us each at batch 32, the copy and matmul 30-40."""
    k = tuple(w_shape.lens[2:])
    return (len(k) == 2 and op.group == 1 and tuple(strides) == k and math.prod(k) > 1 and not any(pb)
            and not any(pe) and all(d == 1 for d in dils) and x_shape.dtype.is_float
            and x_shape.lens[1] < PATCH_MAX_CHANNELS)


def _patch_matmul(out, x, w):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    oh, ow = h // kh, wd // kw
    patches = x[:, :, :oh * kh, :ow * kw].reshape(n, c, oh, kh, ow, kw)  # a view (rows past the last window dropped)
    if w.is_contiguous():  # reduce over (c, kh, kw): the weights as they are
        a, wm = patches.permute(0, 2, 4, 1, 3, 5), w.reshape(m, -1)
    else:  # channels-last weights: reduce over (kh, kw, c), reading runs of channels
        a, wm = patches.permute(0, 2, 4, 3, 5, 1), w.permute(0, 2, 3, 1).reshape(m, -1)
    rows = nhwc(out)  # [N, OH, OW, M]: the matmul's rows where the output is channels-last
    if rows.is_contiguous():
        torch().mm(a.reshape(n * oh * ow, -1), wm.t(), out=rows.view(-1, m))  # the one copy: the patches as rows
    else:
        out.copy_((a.reshape(n * oh * ow, -1) @ wm.t()).view(n, oh, ow, m).permute(0, 3, 1, 2))


@lowering("deconvolution", mode="value", note="cuDNN transposed convolution")
def deconvolution(ctx, step):
    op = step.ins.op
    conv, nsp, pb, pe, strides, dils = _conv_setup(step, transposed=True)
    out_sp = step.ins.shape.lens[2:]

    def run(x, w):
        # no padding, then crop the begins: ends and output_padding follow from the IR's out lens
        y = conv(x, w, None, strides, 0, 0, op.group, dils)
        index = [slice(None), slice(None)]
        for i, (b, n, have) in enumerate(zip(pb, out_sp, y.shape[2:])):
            if b + n > have:  # output_padding past the full result: zeros
                y = torch().nn.functional.pad(y, [0, 0] * (nsp - 1 - i) + [0, b + n - have])
            index.append(slice(b, b + n))
        return y[tuple(index)]
    return run


@lowering("pooling", mode="into", note="Triton window kernels (max / average), else torch pooling")
def pooling(ctx, step):
    op = step.ins.op
    x_shape = step.inputs[0].shape
    kernel_type = x_shape.dtype.value in FLOATS or (op.mode == "max" and x_shape.dtype.is_int)
    if op.mode != "lpnorm" and kernel_type and x_shape.elements < 2**31 and x_shape.ndim in (3, 4, 5):
        return _triton_pooling(ctx, op, x_shape)
    fn = _torch_pooling(ctx, op, x_shape)

    def run(out, x):
        out.copy_(fn(x))
    return run


def _triton_pooling(ctx, op, x_shape):
    from .triton_pool import PoolLauncher

    sp = x_shape.lens[2:]
    if op.global_pool:  # one window over the whole plane
        nsp = len(sp)
        window = (sp, (1,) * nsp, (0,) * nsp, (1,) * nsp)
        counts = np.asarray([math.prod(sp)], dtype=np.float32)
    else:
        g = op.geometry(sp)
        window = (g.lengths, g.strides, g.begins, g.dilations)
        counts = np.asarray(op._counts(sp, g), dtype=np.float32).reshape(-1)
    launcher = PoolLauncher(op.mode, x_shape.dtype, *window, ctx.constant(counts), ctx.scratch)
    ctx.kernels.append(launcher)
    return launcher


def _torch_pooling(ctx, op, x_shape):
    """torch's pooling (Lp norms, average of integers): a function of the input returning a new tensor."""
    t = torch()
    F = t.nn.functional
    nd = x_shape.ndim
    axes = tuple(range(2, nd))
    if op.global_pool:
        if op.mode == "max":
            return lambda x: t.amax(x, dim=axes, keepdim=True)
        if op.mode == "average":
            return lambda x: t.mean(x, dim=axes, keepdim=True)
        p = float(op.lp_order)
        return lambda x: (x.abs() ** p).sum(dim=axes, keepdim=True) ** (1.0 / p)
    if nd - 2 not in (1, 2, 3):
        raise CompileError(f"target 'gpu': {op} has {nd - 2} spatial dims (1 to 3 supported)")
    g = op.geometry(x_shape.lens[2:])
    out_sp = list(g.out)
    crop = (slice(None), slice(None), *[slice(0, n) for n in out_sp])
    pads = _pad_args(g.begins, g.ends)
    ks, st, dil = list(g.lengths), list(g.strides), list(g.dilations)
    if op.mode == "max":
        fn = {3: F.max_pool1d, 4: F.max_pool2d, 5: F.max_pool3d}[nd]
        simple = tuple(g.begins) == tuple(g.ends) and all(2 * b <= k for b, k in zip(g.begins, ks))

        def run_max(x):
            if simple:
                return fn(x, ks, st, list(g.begins), dil, ceil_mode=op.ceil_mode)[crop]
            xp = F.pad(x, pads, value=-math.inf) if x.dtype.is_floating_point else F.pad(x, pads, value=int(
                t.iinfo(x.dtype).min))
            return fn(xp, ks, st, 0, dil, ceil_mode=op.ceil_mode)[crop]
        return run_max
    if any(d != 1 for d in dil):
        raise CompileError(f"target 'gpu': {op}: dilated average pooling has no lowering")
    fn = {3: F.avg_pool1d, 4: F.avg_pool2d, 5: F.avg_pool3d}[nd]
    # sums of the zero-padded input over each window, divided by the reference's own counts
    counts = ctx.constant(np.asarray(op._counts(x_shape.lens[2:], g), dtype=np.float32))
    p = float(op.lp_order)
    kwargs = {"divisor_override": 1} if nd != 3 else {}
    window = math.prod(ks)

    def run_avg(x):
        xf = x.float() if x.dtype in (t.float16, t.bfloat16) else x
        if op.mode == "lpnorm":
            xf = xf.abs() ** p
        s = fn(F.pad(xf, pads), ks, st, 0, ceil_mode=op.ceil_mode, **kwargs)[crop]
        if nd == 3:  # avg_pool1d has no divisor_override
            s = s * window
        y = s / counts if op.mode == "average" else s ** (1.0 / p)
        return y.to(x.dtype)
    return run_avg


# -- matmul with a fused epilogue (autotuned) --------------------------------------------------------
@lowering("gemm_epilogue", "conv_gemm_epilogue", mode="into",
          note="Triton GEMM template with the fused epilogue, or cuBLAS then the pointwise kernel: autotuned")
def gemm_epilogue(ctx, step):
    return epilogue_runner(ctx, step, EpilogueGemm)

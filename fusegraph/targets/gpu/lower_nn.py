"""Lowerings of the heavy ops to the vendor libraries through torch: matmuls to cuBLAS(Lt) (with the
bias epilogue for gemm_bias; attention: lower_attention.py), convolutions and pooling to cuDNN in channels-last; matmuls with any other fused epilogue to the
faster (autotuned) of the Triton GEMM template and cuBLAS + the epilogue's pointwise kernel."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ops.conv import window_attrs
from ...ops.scalar import Var
from .device import torch
from .lowering import lowering
from .patterns import FLOATS
from .triton_expr import literal_exponents


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


def nhwc(v):
    """An N, C, H, W tensor laid out channels-last as N, H, W, C: a view."""
    return v.permute(0, 2, 3, 1)


def weight_matrix(w):
    """A 1x1 convolution's weights [M, C, 1, 1] as the matmul's right operand [C, M]: a view."""
    return w.reshape(w.shape[0], -1).t()


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
          note="cuDNN writing the arena buffer, channels-last; windows that tile the input: a permuted copy and a matmul")
def convolution(ctx, step):
    op = step.ins.op
    conv, nsp, pb, pe, strides, dils = _conv_setup(step, transposed=False)
    t = torch()
    symmetric = tuple(pb) == tuple(pe)
    pads = _pad_args(pb, pe)
    padding = list(pb) if symmetric else [0] * nsp  # asymmetric pads are applied before, by F.pad
    if tiles_the_input(step):
        return _patch_matmul
    into = CudnnInto(strides, padding, dils, op.group)

    def run(out, x, w):
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


def _tiles_the_input(op, x_shape, w_shape, pb, pe, strides, dils) -> bool:
    """Whether the 2-D convolution's windows tile its input (stride == kernel, unpadded, undilated,
    ungrouped, float): a patch embedding, an im2col that is one permuted copy and then one matmul.
    cuDNN's channels-last kernels ran ViT-B/16's (3 input channels, 16x16 / 16) at 2 % of the H200's
    fp16 rate (405 us at batch 32, issue 23); the matmul is cuBLAS's."""
    k = tuple(w_shape.lens[2:])
    return (len(k) == 2 and op.group == 1 and tuple(strides) == k and math.prod(k) > 1 and not any(pb)
            and not any(pe) and all(d == 1 for d in dils) and x_shape.dtype.is_float)


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


def epilogue_runner(ctx, step, cls):
    """The autotuned runner `cls` (an EpilogueGemm) of `step`, its sources kept with the program."""
    if ctx.tuner is None:
        from .autotune import Tuner

        ctx.tuner = Tuner.for_device(ctx.device)
    runner = cls(ctx, step)
    ctx.kernels.append(runner)
    return runner


class EpilogueGemm:
    """C = epilogue(A @ B) for one gemm_epilogue / conv_gemm_epilogue step. The first call (made
    while compiling, before graph capture) asks the tuner for the fastest candidate on these very
    tensors; later calls run the chosen one."""

    def __init__(self, ctx, step):
        self.ctx, self.conv = ctx, step.kind.startswith("conv_gemm")
        self.body, self.acc, self.roles, self.split = self.epilogue(step)
        mm = step.members[-1]  # the matmul (members: reader [, reshape], matmul)
        self.in_type, self.mm_shape = mm.inputs[0].shape.dtype, mm.shape.lens
        user = step.ins
        self.body = literal_exponents(self.body, user.inputs)
        self.var_types = [mm.shape.dtype if r == "acc" else x.shape.dtype for r, x in zip(self.roles, user.inputs)]
        self.out_type = user.shape.dtype
        self.tuning: dict[str, dict] = {}
        self.run = None
        self.chosen = None  # the chosen candidate's launcher

    def epilogue(self, step) -> tuple:
        """(body, acc, roles, split): the epilogue's scalar body over the reader's inputs, which of
        them are the matmul, each one's role, whether the matmul's rows are split."""
        d = step.data
        return d["body"], d["acc"], d["roles"], d["split"]

    @property
    def sources(self) -> dict[str, str]:
        # read when the executable is built, after the warm-up ran the chosen kernel (a launcher
        # generates its source at its first call; a choice taken from the cache was never timed)
        return dict(self.chosen.sources) if self.chosen is not None else {}

    @property
    def gemm_kernels(self) -> list[Any]:
        """The chosen template's compiled kernel (none when the library won): the one a saved file
        keeps of the candidates that share its source (binaries.export_binaries)."""
        kernel = getattr(self.chosen, "kernel", None)
        return [kernel] if kernel is not None else []

    def rows(self, out, a, w, ops):
        """The template's row form: a [*rows, K], b [K, N], out and operands [*rows, N] (views)."""
        if self.conv:
            return nhwc(out), nhwc(a), weight_matrix(w), [nhwc(x) for x in ops]
        if self.split:  # dot [M, N] read as [d0, .., N]: A's rows split the same way
            a = a.reshape(*out.shape[:-1], a.shape[-1])
        return out, a, w, list(ops)

    def __call__(self, out, a, w, *ops):
        if self.run is None:
            self._choose(out, a, w, ops)
        self.run(out, a, w, *ops)

    def _choose(self, out, a, w, ops) -> None:
        from .autotune import LIBRARY, Candidate

        ro, ra, rb, rops = self.rows(out, a, w, ops)
        m, (k, n) = math.prod(ro.shape[:-1]), rb.shape
        layout = (ra.stride()[-1] == 1, rb.stride()[-1] == 1, ro.stride()[-1] == 1, ro.dim() > 2)
        key = (f"{'conv' if self.conv else 'dot'} {m}x{n}x{k} {self.in_type.value}->{self.out_type.value} "
               f"{self.body} {','.join(self.roles)} {layout}")
        launchers = {}
        candidates = [Candidate(LIBRARY, lambda: self._library(launchers))]
        for cfg in self.ctx.tuner.configs(m, n, k, ro.element_size()):
            candidates.append(Candidate(cfg.name(), lambda cfg=cfg: self._triton(cfg, launchers)))
        name, self.run = self.ctx.tuner.choose(key, candidates, (out, a, w, *ops))
        self.chosen = launchers[name]
        self.tuning[key] = {"name": name}

    def _triton(self, cfg, launchers):
        from .triton_gemm import GemmLauncher

        launcher = GemmLauncher(self.body, self.var_types, self.acc, self.in_type, self.out_type, cfg)
        launchers[cfg.name()] = launcher

        def run(out, a, w, *ops):
            ro, ra, rb, rops = self.rows(out, a, w, ops)
            launcher(ro, ra, rb, *rops)

        def compile(out, a, w, *ops):
            ro, ra, rb, rops = self.rows(out, a, w, ops)
            launcher.compile(ro, ra, rb, *rops)
        run.compile = compile  # autotune.precompile: every config's kernel compiled at once
        return run

    def _library(self, launchers):
        """cuBLAS, then the epilogue's pointwise kernel: in place over the output where the matmul's
        result has the output's type and layout, else over a scratch matrix. (In place, the
        epilogue reads each element before it writes it; the output shares no memory with the
        step's other inputs, which are live at this step too. A scratch matrix is as large as the
        output: 74 MiB at EfficientNet-B0's batch 32, kept for the executable's life.)"""
        from .autotune import LIBRARY
        from .device import torch_dtype
        from .launch import PointwiseLauncher

        t = torch()
        pw = PointwiseLauncher(self.body, self.var_types, self.out_type)
        launchers[LIBRARY] = pw
        lens = (self.mm_shape[0], *self.mm_shape[2:], self.mm_shape[1]) if self.conv else tuple(self.mm_shape)
        dtype = torch_dtype(self.var_types[self.acc[0]])

        def run(out, a, w, *ops):
            if self.conv:  # the matmul over channels-last rows: [N, H, W, C]
                ro, ra, rb, _ = self.rows(out, a, w, ())
                direct = out.dtype == dtype and ro.is_contiguous()
                s = ro if direct else self.ctx.scratch(lens, dtype)
                t.mm(ra.reshape(-1, ra.shape[-1]), rb, out=s.view(-1, s.shape[-1]))
                y = out if direct else s.permute(0, 3, 1, 2)
            else:
                direct = out.dtype == dtype and out.is_contiguous()
                s = out.view(lens) if direct else self.ctx.scratch(lens, dtype)
                t.matmul(a, w, out=s)
                y = s.reshape(out.shape)
            it = iter(ops)
            pw(out, *[y if r == "acc" else next(it) for r in self.roles])
        return run


class BiasGemm(EpilogueGemm):
    """A gemm_bias or conv_gemm step: the matmul with its bias add (and ReLU) as the epilogue. The
    library candidate is one cuBLASLt call with the bias (ReLU) epilogue; the template candidates
    render the add's own expression. Autotuned as every epilogue GEMM is, so a program can leave
    cuBLAS out altogether (its workspace: 33 MiB on the H200; workspace.py)."""

    def __init__(self, ctx, step):
        super().__init__(ctx, step)
        self.relu = step.data.get("relu", False)

    def epilogue(self, step) -> tuple:
        user, mm = step.ins, step.members[-1]  # members: [add, [reshape,] matmul], or [convolution]
        if user is mm:  # a bare 1x1 convolution: the matmul is the value
            return Var(0), (0,), ("acc",), False
        read = step.members[1]  # the add reads the matmul directly or through its row split
        acc = tuple(k for k, x in enumerate(user.inputs) if x is read)
        return user.op.expr, acc, tuple("acc" if k in acc else "col" for k in range(len(user.inputs))), \
            len(step.members) == 3

    def rows(self, out, a, w, ops):
        # the bias as its [M] / [1.., M] source: broadcast over the output (a stride-0 view)
        shape = (1, -1, 1, 1) if self.conv else (-1,)
        return super().rows(out, a, w, [b.reshape(shape).expand(out.shape) for b in ops])

    def _library(self, launchers):
        from .autotune import LIBRARY

        t = torch()
        launchers[LIBRARY] = LibraryCall()
        m = self.mm_shape[1] if self.conv else self.mm_shape[-1]

        def run(out, a, w, bias=None):
            if self.conv:
                a, wm, dst = nhwc(a).reshape(-1, a.shape[1]), weight_matrix(w), nhwc(out)  # [N*H*W, C]: views
            else:
                wm, dst = w, out
            # rows for an output that is not dense (a concat's slice) go through the scratch buffer
            flat = dst.view(-1, m) if dst.is_contiguous() else self.ctx.scratch((a.shape[0], m), out.dtype)
            if bias is None:
                t.mm(a, wm, out=flat)
            elif self.relu:
                t._addmm_activation(bias.reshape(m), a, wm, use_gelu=False, out=flat)
            else:
                t.addmm(bias.reshape(m), a, wm, out=flat)
            if flat.data_ptr() != dst.data_ptr():
                dst.copy_(flat.view(dst.shape))
        return run


class LibraryCall:
    """The chosen candidate when the library won: no generated source, no compiled kernel."""

    sources: dict[str, str] = {}

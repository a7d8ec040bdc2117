"""The runners of the autotuned matmul steps (lower_nn.py's gemm_epilogue, gemm_bias and conv_gemm;
lower_quant.py's and lower_sparse.py's subclasses): at the first call, the tuner times cuBLAS (with
the epilogue's pointwise kernel after it, or cuBLASLt's own bias epilogue) against the Triton GEMM
template configs on the step's own tensors; later calls run the chosen one."""

from __future__ import annotations

import functools
import math
from typing import Any

from ...ir.dtypes import DType
from ...ops.scalar import Var
from . import kernels
from .compile_queue import urgent
from .device import torch
from .triton_expr import literal_exponents


def nhwc(v):
    """An N, C, H, W tensor laid out channels-last as N, H, W, C: a view."""
    return v.permute(0, 2, 3, 1)


def weight_matrix(w):
    """A 1x1 convolution's weights [M, C, 1, 1] as the matmul's right operand [C, M]: a view."""
    return w.reshape(w.shape[0], -1).t()



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
        # the depth of the sums: a 1x1 convolution's input channels (weights [M, C, 1, 1]), a dot's last dim
        self.k = mm.inputs[1].shape.lens[1] if self.conv else mm.inputs[0].shape.lens[-1]
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
        if self.run is None and kernels.compiling_all():  # the choice, once the walk has submitted every compile
            kernels.after_walk(lambda: self._choose(out, a, w, ops))
        (self.run or self._choose(out, a, w, ops))(out, a, w, *ops)

    def _choose(self, out, a, w, ops):
        """The run for this call; the chosen candidate's is kept for later calls (none is kept in
        autotune's compile_all pass). Templates are timed in their generic form (one kernel per config
        for every K). In a static program's warm-up the chosen config then runs its K-constant kernel,
        compiled in the background of the warm-up's run (kernels.compile_async), which goes on with the
        timed one meanwhile; elsewhere (the dynamic mode's runs) the generic kernel stays, as a
        recorded choice's does there. A problem with one config to consider (latency-bound) times
        that config's K-constant kernel in a static program's warm-up: no generic one."""
        from .autotune import GENERIC_MACS, LIBRARY, Candidate, candidate_errors

        ro, ra, rb, rops = self.rows(out, a, w, ops)
        m, (k, n) = math.prod(ro.shape[:-1]), rb.shape
        layout = (ra.stride()[-1] == 1, rb.stride()[-1] == 1, ro.stride()[-1] == 1, ro.dim() > 2)
        key = (f"{'conv' if self.conv else 'dot'} {m}x{n}x{k} {self.in_type.value}->{self.out_type.value} "
               f"{self.body} {','.join(self.roles)} {layout}")
        args = (out, a, w, *ops)
        tuner, launchers = self.ctx.tuner, {}
        configs = {cfg.name(): cfg for cfg in tuner.configs(m, n, k, ro.element_size())}
        background = kernels.async_compiling()  # a static program's warm-up: K-constant kernels compile there
        to_time = tuner.to_time(m, n, k, ro.element_size())
        # one config to consider (a latency-bound problem) leaves nothing to choose among the templates,
        # and a generic kernel no other problem would share saves no compile (up to GENERIC_MACS): a
        # static program's warm-up then compiles the K-constant kernels at once, times them against
        # the library, and keeps the chosen one, with no generic kernel (LR-ASPP b1: 86 GEMM kernels
        # for 34 problems) and no second compile after the choice
        alone = m * n * k <= GENERIC_MACS and not self.shares_kernels
        final_only = background and (len(to_time) == 1 or alone)
        known = tuner.decided(key)
        if known in configs:  # chosen before (recorded with the program, or cached): its kernel alone
            try:
                chosen = self._triton(configs[known], launchers, generic=not background)
                chosen.compile(*args)
                run = self._keep(key, known, chosen, launchers)
                if background and not kernels.compiling_all() and not final_only:
                    # the warm-up's run meets a problem timed earlier in it, whose kernel may still be
                    # compiling: this call runs the timed generic kernel (compile_all built it) instead
                    # of waiting (ResNet-50 b32 repeats 8 of its 18 problems: 1.8 s of waits)
                    return self._triton(configs[known], {}, generic=True)
                return run
            except candidate_errors():
                pass  # it no longer builds here: choose again
        candidates = [Candidate(LIBRARY, lambda: self._library(launchers))]
        candidates += [Candidate(cfg.name(), lambda cfg=cfg: self._triton(cfg, launchers, generic=not final_only))
                       for cfg in to_time]
        name, run = tuner.choose(key, candidates, args, library_first=self.library_first)
        if name is None or name == LIBRARY:  # compile_all's pass, or the library's run
            return run if name is None else self._keep(key, name, run, launchers)
        if not background or final_only:  # the timed kernel stays (a dynamic program's run, the interpreter)
            return self._keep(key, name, run, launchers)
        final = self._triton(configs[name], launchers)
        with urgent():  # in the background of the warm-up's run (before the compiles no choice waits
            final.compile(*args)  # for); the timed kernel runs this call
        self._keep(key, name, final, launchers)
        return run if name in tuner.timings.get(key, {}) else final

    def family(self) -> tuple:
        """What the template's source depends on besides K and the operands' layouts: runners of one
        family with different K share each config's generic kernel."""
        return (type(self), self.conv, self.split, self.body, tuple(self.var_types), tuple(self.roles),
                tuple(self.acc), self.in_type, self.out_type)

    @functools.cached_property
    def library_first(self) -> bool:
        """Whether the tuner's "auto" mode takes the library without timing templates, unless it cannot
        run the problem: a float32 GEMM, a large float16 product (autotune.library_alone)."""
        from .autotune import library_alone

        m = math.prod(self.mm_shape[:-1])  # (a dot's rows; a convolution is never the library's alone)
        return self.in_type == DType.float32 or library_alone(m, self.mm_shape[-1], self.k, self.conv, self.in_type)

    @functools.cached_property
    def shares_kernels(self) -> bool:
        """Whether another GEMM of the program, of this runner's family, sums over another K (and times
        templates): only then does timing the generic form (one kernel per config for every K) save
        compiles. The layers of a transformer repeat one K per family (GPT-2 b1 on the H200 waited
        0.8 s after its last choice for the chosen K-constant kernels' compiles and launchers). Asked
        once the program is lowered (at the warm-up), when ctx.kernels holds every runner."""
        family, tuner = self.family(), self.ctx.tuner
        return any(isinstance(r, EpilogueGemm) and r.k != self.k and r.family() == family
                   and not tuner.takes_library(r.library_first) for r in self.ctx.kernels)

    def _keep(self, key, name, run, launchers):
        self.run, self.chosen = run, launchers[name]
        self.tuning[key] = {"name": name}
        return run

    def _triton(self, cfg, launchers, generic=False):
        from .triton_gemm import GemmLauncher

        launcher = GemmLauncher(self.body, self.var_types, self.acc, self.in_type, self.out_type, cfg, generic)
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

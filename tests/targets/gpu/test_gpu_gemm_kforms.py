"""The two forms of the GEMM template in tuning (gpu target): the generic kernel (K an argument, one
per config for every K) that the tuner times where problems of one epilogue share it, and the
K-constant kernel a static program runs, compiled after the choice or, where no other problem would
share the generic one (or one config is all there is to time), timed and kept at once."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.targets.gpu.test_gpu_gemm import compile_check, gelu_residual_model, k_form, randn
from tests.util import make_model


def test_the_generic_template_takes_k_as_an_argument(target_of):
    """Tuning's form of the template: one kernel per config for every K, right at each K."""
    import torch

    from fusegraph.ir.dtypes import DType
    from fusegraph.ops.scalar import Var, call
    from fusegraph.targets.gpu.triton_gemm import GemmConfig, GemmLauncher

    device = "cuda" if torch.cuda.is_available() else "cpu"
    body = call("max", Var(0), 0.0)
    launcher = GemmLauncher(body, [DType.float32], (0,), DType.float32, DType.float32, GemmConfig(16, 16, 16), generic=True)
    for k in (32, 48, 40):
        a, b = torch.randn(20, k, device=device), torch.randn(k, 24, device=device)
        out = torch.empty(20, 24, device=device)
        launcher(out, a, b)
        np.testing.assert_allclose(out.cpu().numpy(), np.maximum(a.cpu().numpy() @ b.cpu().numpy(), 0), rtol=1e-4, atol=1e-4)
    assert len(launcher.sources) == 2  # K a multiple of the block, and one with a masked tail
    assert all(k_form(source) == "argument" for source in launcher.sources.values())


def ffn_chain(widths: list[int], residual: bool) -> tuple:
    """Blocks y = gelu(x @ w + b) [+ x] over [8, 512, widths[0]], block i widths[i] -> widths[i + 1] (the
    last writes the float32 output), each problem past autotune.SMALL_MACS: several configs timed."""
    nodes, inits = [], {}
    names = ["h"] + [f"y{i}" for i in range(1, len(widths) - 1)] + ["y"]
    for i, (src, dst) in enumerate(zip(names, names[1:])):
        gelu = f"g{i}" if residual else dst
        nodes += [helper.make_node("MatMul", [src, f"w{i}"], [f"m{i}"]), helper.make_node("Add", [f"m{i}", f"b{i}"], [f"mb{i}"]),
                  helper.make_node("Gelu", [f"mb{i}"], [gelu])]
        nodes += [helper.make_node("Add", [gelu, src], [dst])] if residual else []
        inits |= {f"w{i}": randn(widths[i], widths[i + 1]) * 0.06, f"b{i}": randn(widths[i + 1])}
    x = {"h": randn(8, 512, widths[0])}
    return make_model(nodes, x, ["y"], initializers=inits, opset=20), x


def spy_launches(monkeypatch) -> tuple[list[bool], list[bool]]:
    """(generic? of each GemmLauncher made, of each launch after the walk: the timings, the first run)."""
    from fusegraph.targets.gpu import kernels
    from fusegraph.targets.gpu.triton_gemm import GemmLauncher

    built, ran = [], []
    init, call = GemmLauncher.__init__, GemmLauncher.__call__

    def made(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self.generic)

    def launched(self, *args):
        if kernels.async_compiling() and not kernels.compiling_all():
            ran.append(self.generic)
        return call(self, *args)

    monkeypatch.setattr(GemmLauncher, "__init__", made)
    monkeypatch.setattr(GemmLauncher, "__call__", launched)
    return built, ran


def choice_times(p, problem: str) -> list[float]:
    """Where the tunings of `problem` began, each checked to lie in the choices after the walk."""
    log = p.executable.compile_log
    choices = next((t0, t1) for name, lane, t0, t1 in log if name == "choices while compiling")
    tunes = [t0 for name, lane, t0, t1 in log if name.startswith(f"tune dot {problem}")]
    assert all(choices[0] <= t0 <= choices[1] for t0 in tunes)
    return tunes


@pytest.mark.gpu
def test_tuning_times_generic_kernels_after_the_walk_and_the_first_run_runs_k_constant_ones(target_of, monkeypatch,
                                                                                                tmp_path):
    """GEMMs of one epilogue over two K (256 and 512: each config's generic kernel serves both),
    two blocks of one problem among them, and the block that writes the graph's float32 output: the choices made after the compile-all walk time the
    generic kernels and submit the chosen K-constant kernels, which compile with the others and the
    second block of the problem takes too; the warm-up's first run then runs K-constant kernels
    only, waiting for none."""
    from fusegraph.targets.gpu import kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)  # no choice cached by another test: timed here
    model, x = ffn_chain([256, 256, 256, 512, 256, 256], residual=False)
    built, ran = spy_launches(monkeypatch)
    p = compile_check(target_of("triton"), model, x, fp16=True)
    assert len(p.executable.tuning) == 4  # blocks 0 and 1 share one problem
    assert len(choice_times(p, "4096x256x256")) == 2  # theirs, and the output's (float16 -> float32)
    assert any(built) and any(ran[:-5]) and ran[-5:] == [False] * 5  # timed generic; the first run's K-constant
    sources = [s for n, s in p.executable.sources.items() if n.startswith("mm_")]
    assert sources and all(k_form(source) == "constant" for source in sources)


@pytest.mark.gpu
def test_gemms_of_one_k_in_their_epilogue_time_and_keep_k_constant_kernels(target_of, monkeypatch, tmp_path):
    """A transformer's layers repeat one K for each epilogue: a generic kernel would serve no other
    problem, so tuning builds none; it times the K-constant kernels after the walk and keeps the
    chosen one (no compile after the choice), which the first run runs."""
    from fusegraph.targets.gpu import kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    model, x = ffn_chain([256, 256, 256, 256], residual=True)
    built, ran = spy_launches(monkeypatch)
    p = compile_check(target_of("triton"), model, x, fp16=True)
    assert len(p.executable.tuning) == 2  # blocks 0 and 1 share one problem; the last writes float32
    assert len(choice_times(p, "4096x256x256")) == 2
    assert built and ran and not any(built) and not any(ran)
    sources = [s for n, s in p.executable.sources.items() if n.startswith("mm_")]
    assert len(sources) == 2 and all(k_form(source) == "constant" for source in sources)


@pytest.mark.gpu
def test_a_latency_bound_problem_times_and_keeps_its_k_constant_kernel(target_of, monkeypatch, tmp_path):
    """A problem of at most SMALL_MACS multiply-adds has one config to consider: a static program's
    warm-up builds no generic kernel for it; it times the K-constant one (against the library, in
    "auto" mode) and runs it."""
    from fusegraph.targets.gpu import kernels
    from fusegraph.targets.gpu.triton_gemm import GemmLauncher

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    built: list[bool] = []
    init = GemmLauncher.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self.generic)

    monkeypatch.setattr(GemmLauncher, "__init__", spy)
    model, x = gelu_residual_model()
    for mode in ("triton", "auto"):
        built.clear()
        p = compile_check(target_of(mode), model, x, fp16=True)
        assert built and not any(built)
        sources = [s for n, s in p.executable.sources.items() if n.startswith("mm_")]
        assert all(k_form(source) == "constant" for source in sources) and (sources or mode == "auto")

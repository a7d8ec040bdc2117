"""kernels.compile_all: a first pass over a program's steps in which launches only compile, all at
once, before its real first run. The tuner there chooses nothing and submits the compiles of the
candidates its choice will time; generated kernels are compiled and not launched."""

from __future__ import annotations

import numpy as np
import pytest

H200 = {"device": "NVIDIA H200", "torch": "2.x", "triton": "3.x"}


@pytest.fixture()
def compile_all(gpu_target, tmp_path, monkeypatch):
    """kernels.compile_all, its tuning cache under tmp_path; skipped where Triton cannot compile asynchronously."""
    from fusegraph.targets.gpu import kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    with kernels.compile_all() as able:
        if not able:
            pytest.skip("this Triton has no asynchronous compiles (Triton < 3.4)")
    return kernels.compile_all


def candidates(log: list[str]):
    """A library candidate and three template configs whose compile hooks log what they compile (the
    second cannot be built)."""
    from fusegraph.targets.gpu.autotune import Candidate

    def template(name):
        def make():
            def run(*args):
                log.append(f"run {name}")
            run.compile = lambda *args: log.append(f"compile {name}")
            return run
        return Candidate(name, make)

    def broken():
        raise RuntimeError("out of shared memory")

    return [Candidate("library", lambda: lambda *args: log.append("run library")), template("64x64x32"),
            Candidate("fast_but_broken", broken), template("128x128x32")]


def test_inside_compile_all_nothing_is_chosen_or_timed(compile_all):
    from fusegraph.targets.gpu.autotune import Tuner

    def measure(run):
        run()
        return {"run library": 2.0, "run 64x64x32": 1.0, "run 128x128x32": 3.0}[log[-1]]

    log: list[str] = []
    tuner = Tuner(H200, measure=measure)
    with compile_all():
        name, run = tuner.choose("dot 64x64x64", candidates(log), (1, 2))
        run()
    assert name is None and log == ["compile 64x64x32", "compile 128x128x32", "run library"]
    assert tuner.timed == 0 and tuner.cache.load() == {}
    log.clear()
    assert tuner.choose("dot 64x64x64", candidates(log))[0] == "64x64x32"  # after it: timed as ever
    assert tuner.timed == 1


def test_a_known_choice_or_a_forced_mode_compiles_only_what_it_will_run(compile_all):
    from fusegraph.targets.gpu.autotune import Tuner

    def no_timing(run):
        raise AssertionError("not timed")

    for tuner, compiled, ran in (
            (Tuner(H200, recorded={"k": {"name": "128x128x32"}}, measure=no_timing), ["compile 128x128x32"], "128x128x32"),
            (Tuner(H200, mode="library", measure=no_timing), [], "library"),
            (Tuner(H200, mode="triton", measure=no_timing), ["compile 64x64x32", "compile 128x128x32"], "64x64x32")):
        log: list[str] = []
        with compile_all():
            name, run = tuner.choose("k", candidates(log))
            run()
        assert name is None and log == [*compiled, f"run {ran}"]
    log = []
    with compile_all():  # a float32 GEMM: the library alone, no template compiled
        name, run = Tuner(H200, measure=no_timing).choose("k", candidates(log), library_first=True)
        run()
    assert name is None and log == ["run library"]
    log = []
    with compile_all():  # "triton" mode where no template builds: the library's run, as outside the pass
        broken = [c for c in candidates(log) if c.name in ("library", "fast_but_broken")]
        name, run = Tuner(H200, mode="triton", measure=no_timing).choose("k", broken)
        run()
    assert name is None and log == ["run library"]


@pytest.mark.gpu
def test_a_launch_inside_compile_all_compiles_and_does_not_run(compile_all):
    import torch

    from fusegraph.ir.dtypes import DType
    from fusegraph.ops.scalar import Var, call
    from fusegraph.targets.gpu.launch import PointwiseLauncher

    body = call("add", Var(0), Var(0))  # x + x, a kernel no other test generates with this launch form
    launcher = PointwiseLauncher(body, [DType.float32], DType.float32)
    x = torch.arange(3 * 77, dtype=torch.float32, device="cuda").reshape(3, 77)
    out = torch.zeros_like(x)
    with compile_all():
        launcher(out, x)
    torch.cuda.synchronize()
    assert not out.any()  # compiled, not launched
    launcher(out, x)
    np.testing.assert_array_equal(out.cpu().numpy(), 2 * x.cpu().numpy())

"""Tiered compiles (tiered.py, GpuTarget(tiered=True)): a warm-up's GEMM choice keeps the timed generic
kernel and defers the chosen K-constant one (kernels.defer), swapped in after the compile returns."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

H200 = {"device": "NVIDIA H200", "torch": "2.x", "triton": "3.x"}


def gelu_residual_model():
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("MatMul", ["h", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Gelu", ["mb"], ["g"]), helper.make_node("Add", ["g", "h"], ["y"])]
    x = {"h": rng.standard_normal((2, 9, 48)).astype(np.float32)}
    inits = {"w": rng.standard_normal((48, 48)).astype(np.float32) * 0.2,
             "b": rng.standard_normal(48).astype(np.float32)}
    return make_model(nodes, x, ["y"], initializers=inits, opset=20), x


@pytest.fixture()
def cache_root(tmp_path, monkeypatch):
    from fusegraph.targets.gpu import kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)


def test_deferring_keeps_the_compiles_only_when_on():
    from fusegraph.targets.gpu import kernels

    log = []
    assert not kernels.defer(lambda: log.append("compile"), lambda: log.append("apply"))  # no scope: declined
    with kernels.deferring(False) as later:
        assert not kernels.defer(lambda: log.append("compile"), lambda: log.append("apply"))
    assert later == [] and log == []
    with kernels.deferring(True) as later:
        assert kernels.defer(lambda: log.append("compile"), lambda: log.append("apply"))
    assert len(later) == 1 and log == []  # kept, not made
    assert not kernels.defer(lambda: None, lambda: None)  # the scope is closed


def test_a_tiered_choice_runs_the_timed_kernel_until_the_k_constant_one_is_applied(target_of, cache_root,
                                                                                    monkeypatch):
    """A new choice in a static warm-up's background scope (faked here: the interpreter has none) for
    a problem whose templates are timed generic: tiered, the timed generic kernel stays and the
    chosen config's K-constant kernel is deferred; applied, it runs, with the same result. Untiered,
    the K-constant kernel is kept at once."""
    from fusegraph.targets.gpu import autotune, kernels
    from fusegraph.targets.gpu.autotune import Tuner
    from fusegraph.targets.gpu.gemm_runner import EpilogueGemm

    model, x = gelu_residual_model()
    p = fusegraph.parse_onnx(model)
    p.compile(target_of("triton"))
    exe = p.executable
    (runner,) = [k for k in exe.built_by.kernels if isinstance(k, EpilogueGemm)]
    want = run_ort(model, x)
    monkeypatch.setattr(kernels, "async_compiling", lambda: True)  # a static warm-up's scope
    monkeypatch.setattr(autotune, "GENERIC_MACS", 0)  # past it: templates timed in their generic form

    def fresh_choice(tiered: bool):
        seconds = iter([2.0, 1.0])  # the second config timed faster
        tuner = Tuner(H200, mode="triton", measure=lambda run: next(seconds))
        monkeypatch.setattr(tuner, "to_time", lambda m, n, k, size: tuner.configs(m, n, k, size)[:2])
        exe.built_by.tuner, runner.run = tuner, None
        with kernels.deferring(tiered) as later:
            exe._run_steps()
        return tuner, later

    tuner, later = fresh_choice(tiered=True)
    (key,) = tuner.timings
    second = list(tuner.timings[key])[1]
    assert runner.tuning[key] == {"name": second} and runner.chosen.generic  # the timed kernel runs
    assert len(later) == 1
    generic = exe.run(x)
    assert_close(generic, want, rtol=1e-4, atol=1e-4)
    compile, apply = later[0]
    compile()
    apply()
    assert runner.tuning[key] == {"name": second} and not runner.chosen.generic
    assert [g.tobytes() for g in exe.run(x)] == [g.tobytes() for g in generic]  # one config, one sum order

    tuner, later = fresh_choice(tiered=False)
    assert later == [] and not runner.chosen.generic


@pytest.mark.gpu
def test_a_tiered_compile_captures_its_graph_once_the_k_constant_kernels_are_in(cache_root, monkeypatch):
    """On CUDA: compile returns with the timed generic kernel and no graph; runs meanwhile are right;
    finish_compile swaps the K-constant kernel in and captures the graph; the saved file holds the
    K-constant kernel's source."""
    from fusegraph.targets.gpu import GpuTarget, autotune
    from fusegraph.targets.gpu.gemm_runner import EpilogueGemm

    monkeypatch.setattr(autotune, "GENERIC_MACS", 0)  # templates timed generic, two of them
    monkeypatch.setattr(autotune.Tuner, "to_time", lambda self, m, n, k, size: self.configs(m, n, k, size)[:2])
    model, x = gelu_residual_model()
    want = run_ort(model, x)
    p = fusegraph.parse_onnx(model)
    p.compile(GpuTarget(gemm="triton", tiered=True))
    exe = p.executable
    (runner,) = [k for k in exe.built_by.kernels if isinstance(k, EpilogueGemm)]
    assert exe._upgrades is not None and exe.graph is None and runner.chosen.generic
    assert_close(exe.run(x), want, rtol=1e-4, atol=1e-4)  # eager, or upgraded already if built
    exe.finish_compile()
    assert exe._upgrades is None and exe.graph is not None and not runner.chosen.generic
    assert_close(exe.run(x), want, rtol=1e-4, atol=1e-4)
    sources = GpuTarget().export_artifacts(exe)
    assert any(", K: tl.constexpr," in v.decode() for k, v in sources.items() if k.startswith("triton/mm_"))

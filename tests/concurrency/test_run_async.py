"""`Program.run_async` and `Program.context()` on the host targets (ref, cpu): results equal `run`'s,
errors come back through the handle, `after` orders runs, and the cpu target never runs more at once
than its threads leave cores for."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest
from onnx import helper as h

import fusegraph
from fusegraph.errors import ArgumentError, FusegraphError, InputError
from fusegraph.targets.asynchronous import cores
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(0)


def _model():
    x = rng.standard_normal((2, 8)).astype(np.float32)
    w = rng.standard_normal((8, 4)).astype(np.float32)
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Relu", ["y"], ["z"])]
    return make_model(nodes, {"x": x}, ["z"], {"w": w}), x


def _compiled(target: str, **options) -> fusegraph.Program:
    model, _ = _model()
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip(target), fusegraph.CompileOptions(**options))
    return p


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_run_async_gives_what_run_gives(target):
    p = _compiled(target)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(6)]
    handles = [p.run_async(f) for f in feeds]
    for f, handle in zip(feeds, handles):
        np.testing.assert_array_equal(handle.result()[0], p.run(f)[0])
        assert handle.done()


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_a_bad_input_fails_its_own_handle_only(target):
    p = _compiled(target)
    good = {"x": np.ones((2, 8), np.float32)}
    bad = p.run_async({"x": np.ones((3, 8), np.float32)})
    ok = p.run_async(good)
    with pytest.raises(InputError):
        bad.result()
    np.testing.assert_array_equal(ok.result()[0], p.run(good)[0])


def test_after_waits_and_passes_an_earlier_error_on():
    p = _compiled("ref")
    gate = threading.Event()
    first: concurrent.futures.Future = concurrent.futures.Future()
    second = p.run_async({"x": np.ones((2, 8), np.float32)}, after=[first])
    assert not gate.wait(0.05) and not second.done()  # still waiting for `first`
    first.set_exception(InputError("the first stage failed"))
    with pytest.raises(InputError, match="first stage"):
        second.result()


def test_streams_are_the_gpu_targets():
    p = _compiled("ref")
    with pytest.raises(ArgumentError, match="gpu"):
        p.run_async({"x": np.ones((2, 8), np.float32)}, stream=object())


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_a_host_targets_context_is_the_program(target):
    p = _compiled(target)
    assert p.context() is p


def test_uncompiled_programs_say_so():
    model, x = _model()
    p = fusegraph.parse_onnx(model)
    for call in (lambda: p.run_async({"x": x}), p.context):
        with pytest.raises(FusegraphError, match="not compiled"):
            call()


def test_cpu_async_runs_leave_each_run_its_threads():
    # a run uses `threads` cores: no more runs at once than the cores hold them
    assert _compiled("cpu").executable.async_workers() == 1
    assert _compiled("cpu", threads=1).executable.async_workers() == cores()

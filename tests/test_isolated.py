"""fusegraph.driver.isolated: engines timed each in its own process, stopped between its rounds."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from fusegraph.driver.isolated import EngineError, engines, measure_rounds, round_summary
from fusegraph.driver.ort import OrtConfig, tuned_configs


@pytest.fixture(scope="module")
def relu_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states from /proc")
def test_engines_run_alone_and_agree(relu_model, tmp_path):
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    specs = {"fusegraph": {"engine": "fusegraph", "model": relu_model},
             "onnxruntime": {"engine": "onnxruntime", "model": relu_model, "ort": OrtConfig(spinning=False).to_json()}}
    with engines(specs, {"x": x}) as procs:
        for p in procs.values():  # idle engines are stopped: none of their threads can run
            assert _state(p._proc.pid) == "T"
        assert procs["onnxruntime"].settings["label"] == "no spinning"
        for p in procs.values():
            np.testing.assert_array_equal(p.outputs(tmp_path / f"{p.name}.npz")[0], np.maximum(x, 0))
        times = measure_rounds(procs, rounds=3, runs=4, warmup=1)
        assert all(len(r) == 3 and all(len(t) == 4 for t in r) for r in times.values())
        assert all(_state(p._proc.pid) == "T" for p in procs.values())
    s = round_summary(times["fusegraph"])
    assert s["rounds"] == 3 and s["runs_per_round"] == 4 and s["median_ms"] > 0


def test_engine_failure_is_a_typed_error_naming_the_engine(relu_model):
    with pytest.raises(EngineError, match="broken:"):
        with engines({"broken": {"engine": "onnxruntime", "model": relu_model}}, {"wrong_name": np.zeros(1)}) as p:
            p["broken"].times(1)


def test_measure_rounds_alternates_who_goes_first():
    calls: list[str] = []

    class Fake:
        def __init__(self, name):
            self.name = name

        def request(self, command):
            calls.append(f"{self.name}:{command}")

        def times(self, runs):
            calls.append(self.name)
            return [0.001] * runs

    times = measure_rounds({"a": Fake("a"), "b": Fake("b")}, rounds=3, runs=2, warmup=4)
    assert calls == ["a:warmup 4", "b:warmup 4", "a", "b", "b", "a", "a", "b"]
    assert times["a"] == [[0.001, 0.001]] * 3  # each round's first (untimed) run dropped


def test_tuned_configs_start_at_the_defaults_and_differ():
    configs = tuned_configs(2)
    assert configs[0] == OrtConfig() and configs[0].label == "defaults"
    assert len(set(configs)) == len(configs) and any(c.parallel for c in configs)
    assert {c.intra_op_threads for c in configs} == {0, 1, 2}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_stopped_engine_dies_with_its_parent(relu_model, tmp_path):
    import os
    import subprocess
    import time

    model = tmp_path / "relu.onnx"
    onnx.save(relu_model, model)
    script = ("import os, signal, numpy as np\n"
              "from fusegraph.driver.isolated import engines\n"
              f"with engines({{'e': {{'engine': 'onnxruntime', 'model': {str(model)!r}}}}}, "
              "{'x': np.zeros((2, 3), np.float32)}) as p:\n"
              "    print(p['e']._proc.pid, flush=True)\n"
              "    os.kill(os.getpid(), signal.SIGKILL)  # no clean-up runs\n")
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": root})
    child = int(done.stdout.split()[0])
    for _ in range(100):
        if not Path(f"/proc/{child}").exists() or _state(child) == "Z":
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the engine outlived its parent")

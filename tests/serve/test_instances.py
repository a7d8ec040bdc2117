"""Thread instances are compiled on a passing thread, so the thread that loads a model keeps no OpenMP
team (libgomp would then manage more threads than cores and throttle every instance's spinning)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# a fresh interpreter: the test process's own threads (servers of other tests) would blur the count
_PROBE = """
import os, sys, time
from pathlib import Path
import numpy as np, onnx
from onnx import TensorProto, helper, numpy_helper
from fusegraph.serve import config as cfg
from fusegraph.serve.instances import load_instances
from fusegraph.serve.model import ServedModel

w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 32, 3, 3)).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 32, 32])], [w])
path = Path(sys.argv[1])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
config = cfg.pb().ModelConfig(name="conv")
config.instance_group.add(kind=cfg.pb().ModelInstanceGroup.KIND_CPU, count=1)
entry = cfg.ModelEntry("conv", config, {1: path}, True)

def threads():
    return len(os.listdir("/proc/self/task"))

def settled(n):  # a thread that ended leaves /proc a moment later, its team's workers too
    end = time.monotonic() + 10
    while threads() > n and time.monotonic() < end:
        time.sleep(0.05)
    return threads()

before = threads()
model, executors = load_instances(entry, 1, path, "cpu", 2, "thread")
passing = settled(before)
ServedModel(entry, 1, path, "cpu", 2)  # the same compile on this thread: its team stays
print(before, passing, settled(before), model.threads, len(executors))
"""


def test_thread_instances_leave_no_openmp_team_on_the_loading_thread(tmp_path):
    import fusegraph

    root = str(Path(fusegraph.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", _PROBE, str(tmp_path / "conv.onnx")], capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    before, passing, on_caller, threads, instances = map(int, done.stdout.split())
    assert (threads, instances) == (2, 1)
    assert on_caller > before, "the compile ran no parallel region: this probe no longer tests anything"
    assert passing == before, f"{passing - before} threads left behind by a load on a passing thread"

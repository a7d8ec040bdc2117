"""The cpu target lowers a program on a thread that ends with the lowering, so the compiling thread
keeps no OpenMP team (libgomp would then manage more threads than cores and throttle the spinning of
every team, those of the threads that run the program included: openmp.on_passing_thread)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fusegraph.errors import FusegraphError
from fusegraph.targets.cpu.openmp import on_passing_thread

# a fresh interpreter: the test process's own threads (servers of other tests) would blur the count
_PROBE = """
import os, time
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import fusegraph

w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 32, 3, 3)).astype(np.float32), "w")
graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 32, 32])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

def threads():
    return len(os.listdir("/proc/self/task"))

def settled(n):  # a thread that ended leaves /proc a moment later, its team's workers too
    end = time.monotonic() + 10
    while threads() > n and time.monotonic() < end:
        time.sleep(0.05)
    return threads()

before = threads()
program = fusegraph.parse_onnx(model)
program.compile("cpu", fusegraph.CompileOptions(threads=2))
compiled = settled(before)
program.run({"x": np.ones((1, 32, 32, 32), np.float32)})  # a run on this thread: its team stays
print(before, compiled, settled(before))
"""


def test_compiling_leaves_no_openmp_team_on_the_calling_thread():
    import fusegraph

    root = str(Path(fusegraph.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    before, compiled, ran = map(int, done.stdout.split())
    assert ran > before, "a run made no team: this probe no longer tests anything"
    assert compiled == before, f"{compiled - before} threads left behind by a compile"


def test_the_passing_thread_returns_and_raises_as_the_call():
    assert on_passing_thread(lambda a, b: a + b, 2, 3) == 5

    def fails():
        raise FusegraphError("bad model")
    with pytest.raises(FusegraphError, match="bad model"):
        on_passing_thread(fails)

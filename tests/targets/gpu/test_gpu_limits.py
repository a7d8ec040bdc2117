"""The run limits and the memory limit on the gpu target (static, dynamic and host steps alike)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import DeadlineExceeded, ExecutionError, ResourceError
from tests.targets.test_resources import mlp
from tests.targets.test_run_limits import feeds, loop_model
from tests.util import make_model


def test_a_loop_of_2_62_trips_and_a_deadline_on_the_gpu_target(gpu_target):
    p = fusegraph.parse_onnx(loop_model(data_cond=False)).compile(gpu_target)
    with pytest.raises(ExecutionError, match="would run 4611686018427387904 iterations"):
        p.run(feeds(2**62))
    q = fusegraph.parse_onnx(loop_model(data_cond=True)).compile(gpu_target)
    with pytest.raises(DeadlineExceeded):
        q.run(feeds(2**62), deadline=0.5)


def test_a_deadline_stops_the_static_mode(gpu_target):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["y"])]
    x = np.ones((4, 4), np.float32)
    p = fusegraph.parse_onnx(make_model(nodes, {"x": x}, ["y"])).compile(gpu_target)
    with pytest.raises(DeadlineExceeded):
        p.run({"x": x}, deadline=1e-9)
    np.testing.assert_allclose(p.run({"x": x}, deadline=60)[0], np.exp(x), rtol=1e-6)


def test_a_batch_past_the_devices_memory_is_refused_at_compile(gpu_target):
    p = fusegraph.parse_onnx(mlp(), map_input_dims={"x": [2**40, 8]})
    with pytest.raises(ResourceError, match="more than max_memory"):
        p.compile(gpu_target)

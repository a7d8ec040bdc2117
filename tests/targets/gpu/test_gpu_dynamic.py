"""Dynamic input dims on the gpu target: one static executable (one CUDA graph on a GPU) per input
shape, compiled on first use (targets/specialize.py), against ONNX Runtime. They run on the GPU when
there is one, else on the CPU through Triton's interpreter (see conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir import Dim
from fusegraph.models import get_model, sample_inputs
from fusegraph.targets.specialize import SpecializingExecutable
from tests.targets.test_dynamic_shapes import check_resnet50_dynamic_batch
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(3)


def test_dynamic_batch_compiles_one_static_executable_per_shape(gpu_target):
    from fusegraph.targets.gpu.executable import GpuExecutable

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    w = rng.standard_normal((8, 5)).astype(np.float32)
    model = make_model(nodes, {"x": np.zeros((2, 8), np.float32)}, ["y"], initializers={"w": w})
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 64), 8]}).compile(gpu_target)
    exe = p.executable
    assert isinstance(exe, SpecializingExecutable)
    for batch in (1, 23, 64, 23):
        x = {"x": rng.standard_normal((batch, 8)).astype(np.float32)}
        assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)
    assert len(exe.specializations) == 3
    for lens in exe.cached_shapes:
        static = exe.executable_for(lens)
        assert isinstance(static, GpuExecutable)  # the static mode: one arena, a CUDA graph on a GPU
        assert static.graph_mode == (static.device.type == "cuda")


@pytest.mark.gpu
def test_bert_small_dynamic_batch_and_sequence_on_the_gpu(gpu_target):
    model = get_model("bert_small")
    dyn = {k: [Dim(1, 4), Dim(8, 128)] for k in ("input_ids", "attention_mask", "token_type_ids")}
    p = fusegraph.parse_onnx(model, map_dyn_input_dims=dyn).compile(gpu_target)
    for batch, seq in ((1, 8), (3, 37), (2, 128)):
        x = sample_inputs("bert_small", batch=batch, seq=seq)
        assert_close(p.run(x), run_ort(model, x), rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_resnet50_dynamic_batch_on_the_gpu(gpu_target):
    check_resnet50_dynamic_batch(gpu_target, (1, 3, 8), atol=1e-3)

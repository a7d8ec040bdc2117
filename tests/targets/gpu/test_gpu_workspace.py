"""The default gemm mode leaves cuBLAS out of a static program that its workspace would outweigh
(workspace.py): the workspace's size as torch gives it, the rule, and a compile under it (on
Triton's interpreter the workspace is made to look large: off CUDA there is none)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

MIB = 2**20
n = helper.make_node
rng = np.random.default_rng(2)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


CUDA = types.SimpleNamespace(type="cuda")


@pytest.mark.parametrize("config, size", [(":4096:8", 32 * MIB), (":4096:2:16:8", 8 * MIB + 128 * 1024),
                                          (":0:0", 0)])
def test_the_workspace_as_cublas_workspace_config_sizes_it(config, size, monkeypatch):
    pytest.importorskip("torch")
    from fusegraph.targets.gpu.workspace import cublas_workspace_bytes

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", config)
    assert cublas_workspace_bytes(CUDA) == size
    assert cublas_workspace_bytes(types.SimpleNamespace(type="cpu")) == 0


def test_a_small_program_without_other_cublas_calls_leaves_it_out(monkeypatch):
    pytest.importorskip("torch")
    from fusegraph.targets.gpu.workspace import leaves_cublas_out

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    steps = [types.SimpleNamespace(kind=k) for k in ("conv_gemm", "gemm_epilogue", "fused_pointwise", "pooling")]
    assert leaves_cublas_out(steps, 31 * MIB, CUDA)
    assert not leaves_cublas_out(steps, 33 * MIB, CUDA)  # the workspace is the smaller part
    for other in ("dot", "attention", "non_max_suppression", "einsum"):  # their lowerings call cuBLAS: paid anyway
        assert not leaves_cublas_out([*steps, types.SimpleNamespace(kind=other)], MIB, CUDA), other
    assert not leaves_cublas_out(steps, MIB, types.SimpleNamespace(type="cpu"))


@pytest.mark.parametrize("tail, library", [("Relu", False), ("MatMul", True)])
def test_compiled_under_the_rule(tail, library, gpu_target, monkeypatch):
    # a 1x1 convolution (conv_gemm) and a Gemm (gemm_bias); a plain MatMul after them is a `dot` step,
    # which calls cuBLAS whatever the mode: then the tuned steps keep the library candidate
    from fusegraph.targets.gpu import GpuTarget, workspace
    from fusegraph.targets.gpu.interpreter import interpreted_target

    monkeypatch.setattr(workspace, "cublas_workspace_bytes", lambda device: 1 << 40)
    nodes = [n("Conv", ["x", "w", "b"], ["c"]), n("Flatten", ["c"], ["f"]), n("Gemm", ["f", "g", "gb"], ["h"]),
             n("Relu", ["h"], ["y"]) if tail == "Relu" else n("MatMul", ["h", "m"], ["y"])]
    inits = {"w": randn(8, 4, 1, 1), "b": randn(8), "g": randn(8 * 9, 16) * 0.2, "gb": randn(16), "m": randn(16, 5)}
    feeds = {"x": randn(2, 4, 3, 3)}
    model = make_model(nodes, feeds, ["y"], initializers=inits)
    p = fusegraph.parse_onnx(model)
    p.compile(interpreted_target() if gpu_target.device == "cpu" else GpuTarget())
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-4)
    names = [c["name"] for c in p.executable.tuning.values()]
    assert len(names) == 2
    if library:  # the interpreter's deterministic choice is the library; CUDA's is timed
        assert gpu_target.device != "cpu" or names == ["library", "library"]
    else:
        assert "library" not in names

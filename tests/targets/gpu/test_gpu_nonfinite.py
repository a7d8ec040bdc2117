"""NaN and +-inf on the gpu target as the reference computes them (tests/targets/test_nonfinite.py's
cases), and indices out of range as the op's ExecutionError.

Triton's interpreter models the GPU's NaN rules (tl.maximum's default is fmax, tl.max is nanmax),
so the generated kernels are checked here too; the `gpu`-marked tests cover what only CUDA runs:
cuBLASLt's ReLU epilogue of 1x1 convolutions and the kernels as compiled for the device."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ExecutionError
from tests.ops.test_index_range import ERROR, INDEXING, model_of
from tests.targets.test_nonfinite import CASES, X2, _model, special
from tests.util import make_model, run_fusegraph

n = helper.make_node
F = np.float32


def run_gpu(model, inputs, target):
    p = fusegraph.parse_onnx(model)
    p.compile(target)
    return p.run(inputs)


def assert_same_nonfinite(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    for sign in (1, -1):
        np.testing.assert_array_equal(np.isinf(got) & (got * sign > 0), np.isinf(want) & (want * sign > 0))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_gives_the_references_nan_and_inf(name, gpu_target):
    model, inputs = _model(name)
    assert_same_nonfinite(run_gpu(model, inputs, gpu_target)[0], run_fusegraph(model, inputs, "ref")[0])


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("cols", [8, 5000])  # one block of columns, and the looped kernel
def test_a_fused_reduction_keeps_a_nan(op, cols, gpu_target):
    # exp -> max -> mul is one fused_reduce kernel: its max must not be tl.max's NaN-skipping one
    x = special((10, cols), 9)
    nodes = [n("Exp", ["x"], ["e"]), n(op, ["e"], ["m"], axes=[1], keepdims=1), n("Mul", ["m", "two"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"two": np.array(2, F)})
    assert_same_nonfinite(run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_sums_the_references_taps(mode, gpu_target):
    # an interpolation matrix would multiply every far tap's inf by 0: NaN across the whole axis
    x = np.array([1, np.inf, np.inf, 2, -np.inf, 3, np.nan, 4], F).reshape(1, 1, 1, 8)
    model = make_model([n("Resize", ["x", "", "s"], ["y"], mode=mode)], {"x": x}, ["y"],
                       {"s": np.array([1, 1, 1, 2], F)})
    assert_same_nonfinite(run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0])


@pytest.mark.gpu
def test_a_1x1_convolution_with_bias_and_relu_keeps_a_nan(gpu_target):
    # the conv_gemm pattern: cuBLASLt's bias + ReLU epilogue on channels-last rows
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(F)
    x[0, 3, 2, 2] = np.nan
    x[0, 5, 4, 4] = -np.inf
    w = np.random.default_rng(1).standard_normal((32, 16, 1, 1)).astype(F)
    nodes = [n("Conv", ["x", "w", "b"], ["c"]), n("Relu", ["c"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w, "b": np.ones(32, F)})
    assert_same_nonfinite(run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0])


def test_arg_extrema_take_a_nan_as_the_reference_does(gpu_target):
    for op in ("ArgMax", "ArgMin"):
        model = make_model([n(op, ["x"], ["y"], axis=1)], {"x": X2}, ["y"])
        np.testing.assert_array_equal(run_gpu(model, {"x": X2}, gpu_target)[0],
                                      run_fusegraph(model, {"x": X2}, "ref")[0])


@pytest.mark.parametrize("index", [-4, 4, -5])
@pytest.mark.parametrize("op", sorted(INDEXING))
def test_indices_out_of_range_are_the_ops_execution_error(op, index, gpu_target):
    # in eager runs and the first (uncaptured) run; a CUDA graph's replays do not read the flag back
    model, inputs = model_of(op, index)
    if index == -4:  # -n is the first position
        np.testing.assert_array_equal(run_gpu(model, inputs, gpu_target)[0], run_fusegraph(model, inputs, "ref")[0])
        return
    with pytest.raises(ExecutionError, match=ERROR.format(index)):
        run_gpu(model, inputs, gpu_target)

"""Values made out of empty tensors, on every target against ONNX Runtime: a reduction over an axis of
length 0 gives what ONNX defines (a sum's 0, a product's 1, a max's lowest value, a min's highest),
a product or convolution over nothing gives zeros (then its bias and epilogue). The cpu target's
generated reductions left such outputs unwritten (the arena's old bytes) and its oneDNN products
refused K = 0; the reference's convolutions could not reshape an empty input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.util import check_on_every_target, make_model

N = helper.make_node


def i64(*v):
    return np.array(v, np.int64)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("shape, axes", [((2, 0), [1]), ((0, 3), [0]), ((2, 0, 3), [1]), ((2, 3, 0), [2])])
def test_a_reduction_over_nothing(op, shape, axes):
    x = {"x": np.zeros(shape, np.float32)}
    model = make_model([N(op, ["x", "a"], ["y"], keepdims=0)], x, ["y"], {"a": i64(*axes)}, opset=18)
    check_on_every_target(model, x)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin"])
def test_an_integer_reduction_over_nothing(op, dtype):
    x = {"x": np.zeros((2, 0), dtype)}
    check_on_every_target(make_model([N(op, ["x", "a"], ["y"], keepdims=0)], x, ["y"], {"a": i64(1)}, opset=18), x)


def test_a_fused_reduction_over_nothing():
    x = {"x": np.zeros((2, 0, 3), np.float32), "z": np.ones((2, 3), np.float32)}
    nodes = [N("ReduceSum", ["x", "a"], ["r"], keepdims=0), N("Exp", ["r"], ["e"]), N("Add", ["e", "z"], ["y"])]
    check_on_every_target(make_model(nodes, x, ["y"], {"a": i64(1)}, opset=18), x)


@pytest.mark.parametrize("case", ["matmul", "batched", "gemm-bias", "epilogue", "einsum"])
def test_a_product_over_nothing(case):
    a = {"a": np.zeros((2, 3, 0) if case == "batched" else (3, 0), np.float32)}
    b = np.zeros((2, 0, 4) if case == "batched" else (0, 4), np.float32)
    c = np.full(4, 2.0, np.float32)
    nodes = {
        "matmul": [N("MatMul", ["a", "b"], ["y"])],
        "batched": [N("MatMul", ["a", "b"], ["y"])],
        "gemm-bias": [N("Gemm", ["a", "b", "c"], ["y"])],
        "epilogue": [N("MatMul", ["a", "b"], ["m"]), N("Add", ["m", "c"], ["s"]), N("Relu", ["s"], ["y"])],
        "einsum": [N("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
    }[case]
    inits = {"b": b, "c": c} if case in ("gemm-bias", "epilogue") else {"b": b}
    check_on_every_target(make_model(nodes, a, ["y"], inits, opset=18), a)


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_a_convolution_of_no_channels(op):
    x = {"x": np.zeros((1, 0, 4, 4), np.float32)}
    w = np.zeros((2, 0, 3, 3) if op == "Conv" else (0, 2, 3, 3), np.float32)
    model = make_model([N(op, ["x", "w", "b"], ["y"])], x, ["y"], {"w": w, "b": np.ones(2, np.float32)}, opset=18)
    check_on_every_target(model, x)

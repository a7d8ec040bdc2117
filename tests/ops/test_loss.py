"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss against ONNX Runtime: every reduction,
with and without weights and ignore_index, N-D inputs, int32 targets, the optional log_prob output,
and the IR they decompose into."""

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ParseError
from tests.util import make_model, node_check

rng = np.random.default_rng(0)
C = 5
X = rng.standard_normal((3, C, 2, 4)).astype(np.float32)
TARGET = rng.integers(0, C, (3, 2, 4))
WEIGHT = rng.random(C).astype(np.float32) + 0.1
IGNORED = np.where(rng.random(TARGET.shape) < 0.3, -1, TARGET)  # about a third ignored (-1)


def log_probs(x):
    z = x - x.max(axis=1, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=1, keepdims=True))).astype(x.dtype)


def loss_inputs(weighted: bool, target=TARGET, x=X, tdtype=np.int64):
    ins = {"x": x, "t": target.astype(tdtype)}
    return ins | {"w": WEIGHT.astype(x.dtype)} if weighted else ins


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, -1])
def test_nll_loss(reduction, weighted, ignore_index):
    attrs = {"reduction": reduction} | ({} if ignore_index is None else {"ignore_index": ignore_index})
    target = TARGET if ignore_index is None else IGNORED
    node_check("NegativeLogLikelihoodLoss", loss_inputs(weighted, target, log_probs(X)), attrs, opset=22)


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_softmax_cross_entropy_with_log_prob(opset, reduction):
    node_check("SoftmaxCrossEntropyLoss", loss_inputs(True, IGNORED), {"reduction": reduction, "ignore_index": -1},
               n_outputs=2, opset=opset)


@pytest.mark.parametrize("shape", [(4, C), (2, C, 3, 2, 2)])
def test_softmax_cross_entropy_ranks(shape):
    x = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, C, shape[:1] + shape[2:])
    node_check("SoftmaxCrossEntropyLoss", loss_inputs(False, target, x), {"reduction": "sum"}, opset=13)


def test_int32_target_and_ignore_index_outside_classes():
    target = np.where(TARGET == 2, 10, TARGET)  # 10 is no class: only ignore_index may be one
    node_check("NegativeLogLikelihoodLoss", loss_inputs(True, target, log_probs(X), np.int32),
               {"ignore_index": 10}, opset=13)


def test_ignored_minus_infinity_gives_zero():
    x = log_probs(X)
    x[0, 0, 0, 0] = -np.inf  # log(0) at an ignored sample's (clamped) class 0
    target = TARGET.copy()
    target[0, 0, 0] = 7
    out = node_check("NegativeLogLikelihoodLoss", {"x": x, "t": target}, {"reduction": "none", "ignore_index": 7},
                     opset=13)[0]
    assert out[0, 0, 0] == 0


def test_float16():
    x = X.astype(np.float16)
    node_check("SoftmaxCrossEntropyLoss", loss_inputs(True, x=x), {}, n_outputs=2, opset=13, rtol=1e-2, atol=1e-2)


def test_decomposes_into_gathers_and_reductions():
    ins = loss_inputs(True, IGNORED)
    node = helper.make_node("SoftmaxCrossEntropyLoss", list(ins), ["loss"], ignore_index=-1)
    names = {i.op.name for i in fusegraph.parse_onnx(make_model([node], ins, ["loss"], opset=13)).main.instructions}
    assert {"log_softmax", "gather_elements", "gather", "where", "reduce_sum", "div"} <= names


def test_bad_reduction_and_target_rank():
    ins = loss_inputs(False)
    node = helper.make_node("NegativeLogLikelihoodLoss", list(ins), ["loss"], reduction="max")
    with pytest.raises(ParseError, match="unknown reduction"):
        fusegraph.parse_onnx(make_model([node], ins, ["loss"], opset=13))
    ins = {"x": X, "t": TARGET[:, 0]}
    node = helper.make_node("NegativeLogLikelihoodLoss", list(ins), ["loss"])
    with pytest.raises(ParseError, match="target"):
        fusegraph.parse_onnx(make_model([node], ins, ["loss"], opset=13))

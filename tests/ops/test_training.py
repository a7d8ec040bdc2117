"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum, Nesterov momentum), which ONNX
Runtime's inference build lacks: against the ONNX node cases and the ONNX reference.

The node cases all run the first step (T = 0); the reference covers later steps, where the bias
corrections, the decay and the momentum's gradient weight come in."""

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import fusegraph
from fusegraph.errors import ParseError
from tests.helpers.node_cases import check_node_case, node_cases
from tests.util import assert_close, make_model, run_fusegraph

rng = np.random.default_rng(0)
DOMAIN = "ai.onnx.preview.training"
CASES = node_cases("adagrad", "test_adagrad") | node_cases("adam", "test_adam") | node_cases("momentum", "test_momentum") | node_cases("momentum", "test_nesterov")
# op -> (attributes, the kinds of its tensor inputs, the kinds it updates)
OPTIMIZERS = {
    "Adagrad": ({"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}, "XGH", "XH"),
    "Adam": ({"alpha": 0.9, "beta": 0.8, "epsilon": 1e-5, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02},
             "XGVH", "XVH"),
    "Momentum": ({"alpha": 0.9, "beta": 0.3, "mode": "standard", "norm_coefficient": 0.01}, "XGV", "XV"),
    "Nesterov": ({"alpha": 0.9, "beta": 0.3, "mode": "nesterov", "norm_coefficient": 0.01}, "XGV", "XV"),
}


def optimizer_model(op, step: int, n: int = 2, attrs=None):
    attrs_default, kinds, updated = OPTIMIZERS[op]
    ins = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    ins |= {f"{k}{i}": rng.random((3, i + 1)).astype(np.float32) + 0.1 for k in kinds for i in range(n)}
    outs = [f"{k}{i}_new" for k in updated for i in range(n)]
    node = helper.make_node("Momentum" if op == "Nesterov" else op, list(ins), outs, domain=DOMAIN,
                            **(attrs_default if attrs is None else attrs))
    return make_model([node], ins, outs, extra_opsets={DOMAIN: 1}), ins


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_cases(name):
    check_node_case(CASES[name])


@pytest.mark.parametrize("op", sorted(OPTIMIZERS))
@pytest.mark.parametrize("step", [0, 3])
def test_against_reference(op, step):
    model, ins = optimizer_model(op, step)
    assert_close(run_fusegraph(model, ins), ReferenceEvaluator(model).run(None, ins), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,defaults", [
    ("Adagrad", {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}),
    ("Adam", {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0, "norm_coefficient_post": 0.0}),
])
def test_default_attributes(op, defaults):
    # the reference with the defaults spelled out (with its own defaults it returns float64)
    model, ins = optimizer_model(op, 2, attrs={})
    explicit = make_model([helper.make_node(op, list(ins), list(model.graph.node[0].output), domain=DOMAIN,
                                            **defaults)], ins, list(model.graph.node[0].output),
                          extra_opsets={DOMAIN: 1})
    assert_close(run_fusegraph(model, ins), ReferenceEvaluator(explicit).run(None, ins), rtol=1e-5, atol=1e-6)


def test_errors():
    model, _ = optimizer_model("Momentum", 1, attrs=OPTIMIZERS["Momentum"][0] | {"mode": "heavy"})
    with pytest.raises(ParseError, match="unknown mode"):
        fusegraph.parse_onnx(model)
    model, ins = optimizer_model("Adagrad", 1, n=1)
    del model.graph.node[0].input[-1]  # X, G and no H
    with pytest.raises(ParseError, match="groups"):
        fusegraph.parse_onnx(model)

import numpy as np
import pytest

from tests.util import node_check

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4)).astype(np.float32)
Y = rng.standard_normal((4,)).astype(np.float32)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Mean", "Pow"])
def test_binary_broadcast(op):
    x = np.abs(X) + 0.5 if op == "Pow" else X
    node_check(op, {"a": x, "b": Y})


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Floor", "Ceil", "Erf",
                                "Sin", "Cos", "Softplus", "Softsign", "Sign", "Round", "HardSwish", "Mish"])
def test_unary(op):
    node_check(op, {"x": X}, opset=18)


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal"])
def test_unary_positive(op):
    node_check(op, {"x": np.abs(X) + 0.1})


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.2}), ("Elu", {}), ("Selu", {}), ("Celu", {}),
                                      ("HardSigmoid", {"alpha": 0.3}), ("ThresholdedRelu", {"alpha": 0.1}),
                                      ("Shrink", {"lambd": 0.3, "bias": 0.1})])
def test_unary_attrs(op, attrs):
    node_check(op, {"x": X}, attrs)


@pytest.mark.parametrize("op", ["Less", "Greater", "Equal", "LessOrEqual", "GreaterOrEqual"])
def test_compare(op):
    node_check(op, {"a": np.round(X), "b": np.round(Y)})


def test_logic_and_where():
    a = rng.random((3, 4)) > 0.5
    b = rng.random((4,)) > 0.5
    node_check("And", {"a": a, "b": b})
    node_check("Xor", {"a": a, "b": b})
    node_check("Not", {"a": a})
    node_check("Where", {"c": a, "x": X, "y": Y})


def test_integer_div_truncates():
    node_check("Div", {"a": np.array([-7, 7, -8, 9], np.int64), "b": np.array([2, -2, 3, 3], np.int64)})


def test_clip_and_cast():
    node_check("Clip", {"x": X, "lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)})
    node_check("Clip", {"x": X})
    node_check("Cast", {"x": X * 10}, {"to": 6})
    node_check("PRelu", {"x": X, "s": np.abs(Y)})

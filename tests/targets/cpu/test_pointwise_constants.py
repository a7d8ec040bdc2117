"""A pointwise kernel's constant pow exponents written into its code (kernels/pointwise.py's
constant_exponents): GPT's tanh GELU, x^3 of every activation, then vectorizes; against the ref
target, and the inputs that must stay inputs (an exponent that varies, or is also an operand)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.kernels.pointwise import constant_exponents
from tests.util import assert_close, make_model, target_or_skip

rng = np.random.default_rng(6)


def _c(value):
    return np.array(value, np.float32)


def _gelu(exponent):
    """GPT-2's NewGELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^e)))."""
    x = rng.standard_normal((1, 16, 128)).astype(np.float32) * 3
    x.flat[:4] = [np.inf, -np.inf, np.nan, -0.0]
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]), helper.make_node("Mul", ["p", "k"], ["pk"]),
             helper.make_node("Add", ["x", "pk"], ["s"]), helper.make_node("Mul", ["s", "r"], ["sr"]),
             helper.make_node("Tanh", ["sr"], ["t"]), helper.make_node("Add", ["t", "one"], ["t1"]),
             helper.make_node("Mul", ["x", "half"], ["xh"]), helper.make_node("Mul", ["xh", "t1"], ["y"])]
    inits = {"e": exponent, "k": _c(0.044715), "r": _c(0.7978845608), "one": _c(1.0), "half": _c(0.5)}
    return make_model(nodes, {"x": x}, ["y"], inits, opset=17), {"x": x}


def _fused(p):
    (ins,) = [i for i in p.main if i.op.name == "fused_pointwise"]
    return ins


@pytest.mark.parametrize("exponent,inlined", [(_c(3.0), True), (_c(2.0), True), (_c(2.5), True),
                                              (rng.uniform(1, 3, 128).astype(np.float32), False)])
def test_a_constant_exponent_is_written_into_the_kernel(exponent, inlined):
    model, feeds = _gelu(exponent)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    expr, kept = constant_exponents(_fused(p))
    n = len(_fused(p).inputs)
    assert (len(kept) == n - 1) == inlined and ("pow(" in str(expr))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    with np.errstate(invalid="ignore"):
        assert_close(p.run(feeds), ref.run(feeds), 1e-5, 1e-6)


def test_an_exponent_that_is_also_an_operand_stays_an_input():
    x = rng.standard_normal((4, 8)).astype(np.float32)
    model = make_model([helper.make_node("Pow", ["x", "e"], ["p"]), helper.make_node("Add", ["p", "e"], ["y"])],
                       {"x": x}, ["y"], {"e": _c(3.0)}, opset=17)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    _, kept = constant_exponents(_fused(p))
    assert len(kept) == len(_fused(p).inputs)
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    assert_close(p.run({"x": x}), ref.run({"x": x}), 1e-5, 1e-6)



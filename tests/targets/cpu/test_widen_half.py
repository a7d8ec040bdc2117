"""widen_half (targets/cpu/passes/widen_half.py): float16 programs compute in float32 on the cpu,
converted at their edges, the model's own roundings to float16 kept."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto
from onnx import helper as h

import fusegraph
from fusegraph.ir import DType
from fusegraph.targets.cpu.passes import widen_half
from tests.util import make_model, run_fusegraph

rng = np.random.default_rng(11)
HALF = (DType.float16, DType.bfloat16)


def _dtypes(module) -> list[tuple[str, DType]]:
    return [(i.op.name, i.shape.dtype) for i in module.instructions if hasattr(i.shape, "dtype")]


def test_half_compute_becomes_float32_between_converts_at_the_edges():
    w = rng.standard_normal((8, 4)).astype(np.float16)
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Relu", ["m"], ["r"]),
             h.make_node("Add", ["r", "r"], ["y"])]
    p = fusegraph.parse_onnx(make_model(nodes, {"x": np.zeros((2, 8), np.float16)}, ["y"], {"w": w}))
    assert widen_half(p.main)
    computing = [(name, dt) for name, dt in _dtypes(p.main) if name not in ("@param", "@literal", "@return")]
    half = [(name, dt) for name, dt in computing if dt in HALF]
    assert half == [("convert", DType.float16)]  # the output's, on the way out
    assert ("dot", DType.float32) in computing and ("relu", DType.float32) in computing
    assert not widen_half(p.main)  # a fixpoint


def test_a_float32_program_is_left_alone():
    p = fusegraph.parse_onnx(make_model([h.make_node("Relu", ["x"], ["y"])], {"x": np.zeros(4, np.float32)}, ["y"]))
    assert not widen_half(p.main)


def test_the_models_own_rounding_to_half_is_kept():
    # Cast(float32 -> float16) asks for half values: x is rounded there, the product is computed
    # (exactly, in float32) from the rounded x and rounded once more at the output
    x = (1 + rng.random(256) * 1e-3).astype(np.float32)
    nodes = [h.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT16), h.make_node("Mul", ["c", "k"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"k": np.array(3, np.float16)})
    got = run_fusegraph(model, {"x": x}, "cpu")[0]
    want = (x.astype(np.float16).astype(np.float32) * 3).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    assert np.any((x * 3).astype(np.float16) != want)  # without the rounding the test would see it


def test_bfloat16_is_left_to_round_each_op():
    # (the ONNX backend suite's bfloat16 values round each op; 8 significant bits: a rounding taken
    # out moves results past its tolerance)
    from ml_dtypes import bfloat16

    p = fusegraph.parse_onnx(make_model([h.make_node("Mul", ["x", "x"], ["y"])], {"x": np.zeros(4, bfloat16)}, ["y"]))
    assert not widen_half(p.main)

"""CompileOptions(fp16=True, fp16_io=True): the float32 inputs and outputs of a program become float16
(ONNX Runtime's keep_io_types=False), on every target; other inputs and outputs stay as they are."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import CompileError, InputError
from fusegraph.ir import Dim
from fusegraph.ir.dtypes import DType
from fusegraph.quantize.fp16 import half_io
from tests.util import every_target, make_model, run_ort, target_or_skip

rng = np.random.default_rng(3)
HALF = fusegraph.CompileOptions(fp16=True, fp16_io=True)


def _model():
    """x (float32) through a MatMul and a Sigmoid, x itself, its shape (int64) and an int64 input's
    sum: four outputs, two of them float32."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["y"]),
             helper.make_node("Identity", ["x"], ["x_out"]), helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ReduceSum", ["ids"], ["n"], keepdims=0)]
    x = {"x": rng.standard_normal((2, 8)).astype(np.float32), "ids": np.arange(3, dtype=np.int64)}
    return make_model(nodes, x, ["y", "x_out", "s", "n"], initializers={"w": rng.standard_normal((8, 4)).astype(np.float32)}), x


def _target(t):
    return target_or_skip(t) if isinstance(t, str) else t


@pytest.mark.parametrize("target", every_target(), ids=str)
def test_float32_inputs_and_outputs_become_float16_and_agree_with_ort(target):
    model, x = _model()
    p = fusegraph.parse_onnx(model)
    p.compile(_target(target), HALF)
    specs = p.executable.input_specs
    assert specs["x"].dtype == DType.float16 and specs["ids"].dtype == DType.int64
    half = {"x": x["x"].astype(np.float16), "ids": x["ids"]}
    got = p.run(half)
    want = run_ort(model, {"x": half["x"].astype(np.float32), "ids": x["ids"]})  # the same values in float32
    assert [g.dtype for g in got] == [np.float16, np.float16, np.int64, np.int64]
    np.testing.assert_allclose(got[0].astype(np.float32), want[0], rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(got[1], half["x"])  # an input returned as it came in
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[3], want[3])


def test_a_float32_array_for_a_float16_input_is_refused_by_name():
    model, x = _model()
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("ref"), HALF)
    with pytest.raises(InputError, match="'x': expected dtype float16, got float32"):
        p.run(x)


def test_fp16_io_needs_fp16():
    model, _ = _model()
    with pytest.raises(CompileError, match="fp16_io .* needs fp16=True"):
        fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"), fusegraph.CompileOptions(fp16_io=True))


def test_half_io_alone_computes_as_the_float32_program_does():
    """Without the half conversion the converts stay: float32 inside, float16 at the edges."""
    model, x = _model()
    half = {"x": x["x"].astype(np.float16), "ids": x["ids"]}
    p = half_io(fusegraph.parse_onnx(model))
    p.verify()
    assert p.get_parameter_shapes()["x"].dtype == DType.float16
    assert [o.dtype for o in p.get_output_shapes()] == [DType.float16, DType.float16, DType.int64, DType.int64]
    got = p.compile(fusegraph.get_target("ref")).run(half)
    want = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref")).run(
        {"x": half["x"].astype(np.float32), "ids": x["ids"]})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(g.dtype))
    assert half_io(p) is p and p.get_parameter_shapes()["x"].dtype == DType.float16  # a second time: nothing


def test_saved_and_loaded_program_keeps_its_float16_io(tmp_path):
    model, x = _model()
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("ref"), HALF)
    path = tmp_path / "m.fgx"
    fusegraph.save(p, path)
    loaded = fusegraph.load(path)
    half = {"x": x["x"].astype(np.float16), "ids": x["ids"]}
    assert loaded.executable.input_specs["x"].dtype == DType.float16
    for a, b in zip(loaded.run(half), p.run(half)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["ref", "cpu"])
def test_a_dynamic_batch_takes_float16_at_every_size(name):
    """The cpu target compiles a static program per input shape (from the float16-input program)."""
    model, x = _model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 8), 8]})
    p.compile(target_or_skip(name), HALF)
    for n in (1, 5):
        xs = rng.standard_normal((n, 8)).astype(np.float16)
        got = p.run({"x": xs, "ids": x["ids"]})
        want = run_ort(model, {"x": xs.astype(np.float32), "ids": x["ids"]})
        assert got[0].dtype == np.float16 and got[0].shape == (n, 4)
        np.testing.assert_allclose(got[0].astype(np.float32), want[0], rtol=2e-3, atol=2e-3)

"""quantize_fp16 / quantize_bf16 (ins_names) and quantize_int8 / quantize_fp8 (wrapping fusegraph's
calibrated quantizer where this build has it)."""

from __future__ import annotations

import importlib.util
import sys
import types

import numpy as np
import pytest

import fusegraph.migraphx as migraphx
from fusegraph.errors import ArgumentError, CompileError, NotSupportedError

from .models import dense, dense_reference

HAS_INT8 = importlib.util.find_spec("fusegraph.quantize.int8") is not None


def _program(batch: int = 8) -> migraphx.program:
    return migraphx.parse_onnx_buffer(dense().SerializeToString(), default_dim_value=batch)


def _x(batch: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 4), dtype=np.float32)


def _dtypes_of(p: migraphx.program, op: str) -> set[str]:
    return {i.shape.dtype.value for i in p.fusegraph_program.main.instructions if i.op.name == op}


@pytest.mark.parametrize("fn, half, np_half", [(migraphx.quantize_fp16, "float16", np.float16),
                                               (migraphx.quantize_bf16, "bfloat16", None)])
def test_half_all(fn, half, np_half):
    p = _program()
    fn(p)
    assert _dtypes_of(p, "dot") == {half} and _dtypes_of(p, "relu") == {half}
    p.compile(migraphx.get_target("ref"))
    (out,) = p.run({"x": _x()})
    assert out.get_shape().type_string() == "float_type"  # callers keep feeding and reading float32
    tol = 1e-2 if np_half is not None else 4e-2
    np.testing.assert_allclose(np.array(out), dense_reference(_x()), rtol=tol, atol=tol)


def test_fp16_ins_names_keeps_the_other_ops_in_float32():
    p = _program()
    migraphx.quantize_fp16(p, ins_names=["dot"])
    assert _dtypes_of(p, "dot") == {"float16"}
    assert _dtypes_of(p, "relu") == {"float32"} and _dtypes_of(p, "add") == {"float32"}
    p.compile(migraphx.get_target("ref"))
    np.testing.assert_allclose(np.array(p.run({"x": _x()})[0]), dense_reference(_x()), rtol=1e-2, atol=1e-2)


def test_quantize_after_compile_and_bad_names_are_refused():
    p = _program()
    with pytest.raises(ArgumentError, match="list of op names"):
        migraphx.quantize_fp16(p, ins_names="dot")
    p.compile(migraphx.get_target("ref"))
    with pytest.raises(CompileError, match="before compile"):
        migraphx.quantize_fp16(p)


@pytest.mark.skipif(HAS_INT8, reason="this build has fusegraph/quantize/int8.py")
@pytest.mark.parametrize("fn", [migraphx.quantize_int8, migraphx.quantize_fp8])
def test_int8_and_fp8_say_they_are_missing(fn):
    with pytest.raises(NotSupportedError, match="not available in this build"):
        fn(_program(), migraphx.get_target("ref"), calibration=[{"x": migraphx.argument(_x())}])


@pytest.mark.skipif(not HAS_INT8, reason="int8 quantization (fusegraph/quantize/int8.py) is not in this build")
@pytest.mark.parametrize("fn, bound", [(migraphx.quantize_int8, 0.05), (migraphx.quantize_fp8, 0.1)])
def test_calibrated_quantization_runs_close_to_float(fn, bound):
    p = _program()
    # enough samples that the held-out input's range is covered: a min/max range from 4 saturated one
    # of seed 9's rows (0.7 off; rel L2 0.26), as min/max calibration does with too few samples
    calibration = [{"x": migraphx.argument(_x(seed=k))} for k in range(32)]
    fn(p, migraphx.get_target("ref"), calibration=calibration)
    narrow = {i.shape.dtype.value for i in p.fusegraph_program.main.instructions
              if not i.shape.is_tuple and ("int8" in i.shape.dtype.value or "float8" in i.shape.dtype.value)}
    assert narrow, "the dot was not quantized"
    p.compile(migraphx.get_target("ref"))
    got, expected = np.array(p.run({"x": _x(seed=9)})[0]), dense_reference(_x(seed=9))
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < bound


@pytest.mark.skipif(not HAS_INT8, reason="int8 quantization (fusegraph/quantize/int8.py) is not in this build")
def test_int8_without_calibration_uses_generated_data():
    p = _program()
    migraphx.quantize_int8(p, migraphx.get_target("ref"))
    p.compile(migraphx.get_target("ref"))
    assert np.isfinite(np.array(p.run({"x": _x()})[0])).all()


def test_calibration_must_be_a_list_of_dicts():
    with pytest.raises(ArgumentError, match="wrap it in a list"):
        migraphx.quantize_int8(_program(), migraphx.get_target("ref"), calibration={"x": _x()})


@pytest.mark.parametrize("fn", ["quantize_int8", "quantize_fp8"])
def test_calibrated_wrappers_hand_numpy_samples_and_op_names_to_the_quantizer(fn, monkeypatch):
    """What reaches fusegraph's quantizer: the fusegraph program, calibration as dicts of numpy
    arrays (arguments unwrapped), and MIGraphX's op names as fusegraph's."""
    calls = []
    fake = types.ModuleType("fusegraph.quantize.int8")
    setattr(fake, fn, lambda program, calibration, **kw: calls.append((program, calibration, kw)))
    monkeypatch.setitem(sys.modules, "fusegraph.quantize.int8", fake)
    p = _program()
    getattr(migraphx, fn)(p, migraphx.get_target("ref"), calibration=[{"x": migraphx.argument(_x())}],
                          ins_names=["dot", "quant_convolution"])
    ((program, calibration, kw),) = calls
    assert program is p.fusegraph_program
    assert type(calibration[0]["x"]) is np.ndarray and np.array_equal(calibration[0]["x"], _x())
    assert kw == {"quantize_ops": ("convolution", "dot"), "keep_heads": False}  # MIGraphX quantizes heads too

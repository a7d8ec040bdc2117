"""The public custom-op API (fusegraph/custom) through the worked example (examples/yolo_decode.py):
typed attributes and their errors, ONNX parsing, dynamic shapes, ref and cpu (its C kernel) against
the numpy reference, a Python cpu kernel, the fallback rules, .fgx save/load by name and version
(no code in the file), profiles and `fusegraph verify`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import fusegraph
from examples.yolo_decode import DOMAIN, NAME, YOLO_DECODE, decode_model, decode_reference
from fusegraph.custom import Attr, CustomOpAttributeError, CustomOpFallbackWarning, custom_op
from fusegraph.errors import CompileError, CustomOpError, ParseError, ShapeError
from fusegraph.ir import Dim, Shape
from tests.util import target_or_skip

ROOT = Path(__file__).resolve().parents[2]
DYN = {"raw": [(1, 2), (1, 40), (1, 40), 7]}
rng = np.random.default_rng(0)


def raw(b=1, h=5, w=6, k=7):
    return rng.standard_normal((b, h, w, k)).astype(np.float32)


# -- definition and attributes --------------------------------------------------------------------
def test_attributes_are_typed_defaulted_and_checked():
    op = YOLO_DECODE()
    assert op.stride == 8.0 and op.sigmoid_scores is True
    assert YOLO_DECODE(stride=16).stride == 16.0 and isinstance(YOLO_DECODE(stride=16).stride, float)
    with pytest.raises(CustomOpAttributeError, match=r"YoloDecode: attribute stride=-1.0 must be positive"):
        YOLO_DECODE(stride=-1.0)
    with pytest.raises(CustomOpAttributeError, match=r"attribute 'stride' must be a float, got 'x'"):
        YOLO_DECODE(stride="x")
    with pytest.raises(fusegraph.errors.ArgumentError, match="no attributes"):
        YOLO_DECODE(strid=2.0)


def test_a_bad_attribute_in_onnx_names_the_node_and_the_attribute():
    model = decode_model(stride=-2.0)
    with pytest.raises(fusegraph.FusegraphError, match=r"node 'decode'.*attribute stride=-2.0 must be positive"):
        fusegraph.parse_onnx(model)
    model = decode_model()
    model.graph.node[0].attribute.append(helper.make_attribute("anchor", 3))
    with pytest.raises(ParseError, match=r"node 'decode'.*has no attributes \['anchor'\]"):
        fusegraph.parse_onnx(model)


def test_the_shape_rule_takes_dynamic_dims_and_reports_bad_inputs():
    p = fusegraph.parse_onnx(decode_model(), map_dyn_input_dims=DYN)
    (out,) = p.get_output_shapes()
    assert out.dims == (Dim(1, 2), Dim(1, 1600), Dim.fixed(7))
    with pytest.raises(ShapeError, match="YoloDecode: expects"):
        YOLO_DECODE().infer_shape([Shape.of(fusegraph.DType.float32, [1, 4, 4, 3])])


def test_the_ir_text_names_the_op_and_parses_back():
    from fusegraph.ir.text import parse_program

    p = fusegraph.parse_onnx(decode_model(stride=32.0), map_dyn_input_dims=DYN)
    text = p.to_text()
    assert f"custom.{DOMAIN}.{NAME}[sigmoid_scores=True, stride=32.0]" in text or \
        f"custom.{DOMAIN}.{NAME}[stride=32.0, sigmoid_scores=True]" in text
    assert parse_program(text).to_text() == text


def test_domain_and_version_are_checked_and_redefinition_needs_a_new_version():
    with pytest.raises(fusegraph.errors.ArgumentError, match="ONNX's or ONNX Runtime's"):
        custom_op("Relu2", domain="ai.onnx", shape=lambda i: i[0], reference=lambda x: x)
    with pytest.raises(fusegraph.errors.ArgumentError, match="already registered"):
        custom_op(NAME, domain=DOMAIN, version=2, attributes=dict(YOLO_DECODE.attributes),
                  shape=lambda i, **a: i[0], reference=lambda x, **a: x)


# -- targets --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 5, 6, 7), (2, 13, 1, 7), (1, 40, 40, 7)])
def test_ref_and_cpu_match_the_reference_on_every_shape_of_one_compile(shape):
    cpu = target_or_skip("cpu")
    x = raw(*shape)
    want = decode_reference(x, stride=8.0, sigmoid_scores=True)
    ref = fusegraph.parse_onnx(decode_model(), map_dyn_input_dims=DYN).compile("ref")
    np.testing.assert_array_equal(ref.run({"raw": x})[0], want)
    p = fusegraph.parse_onnx(decode_model(), map_dyn_input_dims=DYN).compile(cpu)
    got = p.run({"raw": x})[0]
    assert got.dtype == np.float32 and got.shape == want.shape
    # the C kernel's expf against numpy's: a few float32 ulps
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_the_cpu_kernel_is_the_c_function():
    """The compiled step is the user's C (not the reference): its attribute macros are baked in, and
    a wrong answer from it would show (here: logits passed through, sigmoid_scores=0)."""
    cpu = target_or_skip("cpu")
    model = decode_model()
    model.graph.node[0].attribute.append(helper.make_attribute("sigmoid_scores", 0))
    x = raw()
    got = fusegraph.parse_onnx(model, map_input_dims={"raw": list(x.shape)}).compile(cpu).run({"raw": x})[0]
    np.testing.assert_array_equal(got[..., 4:], x.reshape(1, -1, 7)[..., 4:])
    from fusegraph.targets.cpu.kernels.custom import _c_source

    name, code = _c_source(YOLO_DECODE(sigmoid_scores=False), YOLO_DECODE.cpu)
    assert "#define ATTR_sigmoid_scores 0" in code and f"#define yolo_decode {name}" in code


def _scaled_op(name, **kernels):
    return custom_op(name, domain="test.fusegraph", attributes={"k": Attr(float, 2.0)},
                     shape=lambda inputs, k: inputs[0], reference=lambda x, k: x * np.float32(k), **kernels)


def _scaled_model(name):
    node = helper.make_node(name, ["x"], ["y"], domain="test.fusegraph", k=3.0)
    from tests.util import make_model

    return make_model([node], {"x": np.ones((2, 3), np.float32)}, ["y"], extra_opsets={"test.fusegraph": 1})


def test_a_python_cpu_kernel_runs_and_its_result_is_checked():
    cpu = target_or_skip("cpu")
    calls = []
    _scaled_op("ScalePy", cpu=lambda x, k: calls.append(k) or x * np.float32(k))
    x = rng.standard_normal((2, 3)).astype(np.float32)
    p = fusegraph.parse_onnx(_scaled_model("ScalePy")).compile(cpu)
    np.testing.assert_array_equal(p.run({"x": x})[0], x * np.float32(3))
    assert calls == [3.0]
    _scaled_op("ScaleBad", cpu=lambda x, k: x.astype(np.float64))
    p = fusegraph.parse_onnx(_scaled_model("ScaleBad")).compile(cpu)
    with pytest.raises(fusegraph.errors.ExecutionError, match="ScaleBad: output 0 is float64"):
        p.run({"x": x})


def test_no_cpu_kernel_falls_back_only_where_allowed_and_says_so():
    cpu = target_or_skip("cpu")
    _scaled_op("ScaleStrict")
    with pytest.raises(CompileError, match=r"test.fusegraph.ScaleStrict has no cpu kernel.*host_fallback=False"):
        fusegraph.parse_onnx(_scaled_model("ScaleStrict")).compile(cpu)
    _scaled_op("ScaleLoose", host_fallback=True)
    with pytest.warns(CustomOpFallbackWarning, match="ScaleLoose has no cpu kernel"):
        p = fusegraph.parse_onnx(_scaled_model("ScaleLoose")).compile(cpu)
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(p.run({"x": x})[0], x * 3)


# -- files, profiles, verify ----------------------------------------------------------------------
@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_fgx_round_trip_records_the_op_not_its_code(target, tmp_path, monkeypatch):
    t = target_or_skip(target)
    x = raw(1, 9, 4)
    p = fusegraph.parse_onnx(decode_model(), map_input_dims={"raw": list(x.shape)}).compile(t)
    want = p.run({"raw": x})[0]
    path = tmp_path / "decode.fgx"
    fusegraph.save(p, path)
    data = path.read_bytes()
    assert b"expf(" not in data and b"yolo_decode(" not in data and b"decode_reference" not in data
    assert f'"op":"custom.{DOMAIN}.{NAME}"'.encode() in data.replace(b" ", b"")
    np.testing.assert_array_equal(fusegraph.load(path).run({"raw": x})[0], want)
    from fusegraph.ir import op as op_registry

    monkeypatch.delitem(op_registry._OPS, YOLO_DECODE.op_name)
    with pytest.raises(CustomOpError, match=rf"custom op {DOMAIN}.{NAME} version 1, which is not registered"):
        fusegraph.load(path)


def test_loading_wants_the_version_the_file_was_saved_with(tmp_path, monkeypatch):
    import dataclasses

    p = fusegraph.parse_onnx(decode_model(), map_input_dims={"raw": [1, 3, 3, 7]}).compile("ref")
    fusegraph.save(p, tmp_path / "d.fgx")
    monkeypatch.setattr(YOLO_DECODE.op_class, "definition", dataclasses.replace(YOLO_DECODE, version=2))
    with pytest.raises(CustomOpError, match="version 1; this process registered version 2"):
        fusegraph.load(tmp_path / "d.fgx")


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_the_op_appears_in_profiles(target):
    t = target_or_skip(target)
    x = raw()
    p = fusegraph.parse_onnx(decode_model(), map_input_dims={"raw": list(x.shape)}).compile(t)
    prof = p.executable.profile({"raw": x}, runs=2)
    (step,) = [s for s in prof.steps if s.kernel == f"custom.{DOMAIN}.{NAME}"]
    assert step.onnx_op == NAME and len(prof.step_times()[step.uid]) == 2


def test_cli_verify_and_perf_profile_load_the_op(tmp_path):
    target_or_skip("cpu")
    model = tmp_path / "decode.onnx"
    import onnx

    onnx.save(decode_model(), model)
    base = [sys.executable, "-m", "fusegraph", "--custom-ops", str(ROOT / "examples" / "yolo_decode.py")]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(base + ["verify", str(model), "--target", "cpu", "--input-dim", "raw=1,8,8,7"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ref" in done.stdout and "ok" in done.stdout
    done = subprocess.run(base + ["perf", str(model), "--target", "cpu", "--input-dim", "raw=1,8,8,7", "--profile",
                                  "-n", "3"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "YoloDecode" in done.stdout
    done = subprocess.run([sys.executable, "-m", "fusegraph", "verify", str(model)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 2 and f"{DOMAIN}.{NAME}" in done.stderr

"""int8 on the cpu target: QDQ Conv / MatMul / Gemm regions lowered to oneDNN u8 x s8 primitives
(passes/fuse_int8.py, kernels/int8.py), checked against ONNX Runtime without graph optimizations
(which runs the Q/DQ nodes as written: the model's own semantics), one minimal model per pattern;
and each form the int8 kernels cannot compute exactly keeps its float path, still right."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import fusegraph
from fusegraph.ir.dtypes import DType
from fusegraph.passes import run_pipeline
from fusegraph.targets.cpu.passes import fuse_int8
from tests.corpus.compare import run_ort
from tests.targets.cpu.int8_models import conv_model, matmul_model
from tests.util import target_or_skip

Y_SCALE = {"conv": 0.08, "matmul": 0.1}  # the output scales int8_models writes


def _compile(model, target="cpu"):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip(target) if target == "cpu" else fusegraph.get_target(target))
    return p


def _int8_ops(p) -> list[str]:
    return [i.op.name for i in p.main if i.op.name.startswith("int8_")]


def _steps(got: np.ndarray, want: np.ndarray, scale: float) -> float:
    """The largest difference in quantization steps of the output."""
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))) / scale)


CASES = {
    "conv per-channel u8": (conv_model, {}),
    "conv per-tensor": (conv_model, {"per_channel": False}),
    "conv + relu": (conv_model, {"relu": True}),
    "conv int8 activations": (conv_model, {"act": "s8"}),
    "conv float result": (conv_model, {"out": "f"}),
    "conv grouped": (conv_model, {"groups": 4}),
    "conv depthwise": (conv_model, {"groups": 16, "c": 16, "m": 16}),
    "conv batch 1 stride-free 1x1": (conv_model, {"k": 1, "batch": 1}),
    "matmul batched": (matmul_model, {}),
    "matmul int8 activations, float result": (matmul_model, {"act": "s8", "out": "f"}),
    "gemm": (matmul_model, {"gemm": True}),
    "gemm transB": (matmul_model, {"gemm": True, "trans_b": True}),
    "gemm per-tensor": (matmul_model, {"gemm": True, "per_channel": False}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_int8_pattern_matches_ort(case):
    build, kw = CASES[case]
    model, feeds = build(np.random.default_rng(5), **kw)
    want = run_ort(model, feeds, optimize=False)[0]
    p = _compile(model)
    assert _int8_ops(p), "the QDQ region was not lowered to an int8 op"
    got = p.run(feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if kw.get("out") == "f":  # a float result: the exact integer sum vs ORT's float32 sum
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    else:  # at most one step where ORT's float sum lands on the other side of a rounding edge
        assert _steps(got, want, Y_SCALE[build.__name__.split("_")[0]]) <= 1.0


@pytest.mark.parametrize("case", list(CASES))
def test_int8_ops_keep_the_model_semantics_on_ref(case):
    """The rewritten program's numpy references are the QDQ region's float math: on the ref target
    it gives the original program's answer bit for bit."""
    build, kw = CASES[case]
    model, feeds = build(np.random.default_rng(5), **kw)
    target_or_skip("cpu")  # the pass asks oneDNN whether its sums are exact here
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, [fuse_int8])
    assert any(i.op.name.startswith("int8_") for i in p.main)
    p.compile(fusegraph.get_target("ref"))
    np.testing.assert_array_equal(p.run(feeds)[0], _compile(model, "ref").run(feeds)[0])


def _vnni() -> bool:
    target_or_skip("cpu")
    from fusegraph.targets.cpu.onednn.quant import has_vnni

    return has_vnni()


FALLBACKS = {
    # oneDNN takes one weight zero point per tensor: asymmetric per-channel weights stay in float
    "asymmetric weight zero points": (conv_model, {"asymmetric_weights": True}),
    "blocked weight scales": (conv_model, {"blocked": True}),
    "int4 weights": (conv_model, {"weight_type": "int4"}),
    "fp8 weights": (conv_model, {"weight_type": "fp8"}),
    "matmul asymmetric weights": (matmul_model, {"asymmetric_weights": True}),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_inexpressible_forms_keep_the_float_path(case):
    build, kw = FALLBACKS[case]
    model, feeds = build(np.random.default_rng(6), **kw)
    p = _compile(model)
    assert not _int8_ops(p)
    want = run_ort(model, feeds, optimize=False)[0]
    ref = _compile(model, "ref").run(feeds)[0]
    scale = Y_SCALE[build.__name__.split("_")[0]]
    assert _steps(p.run(feeds)[0], ref, scale) <= 1.0  # the existing float path, as before
    assert _steps(ref, want, scale) <= 1.0


def test_8bit_weights_without_vnni_keep_the_float_path():
    """Without VNNI, oneDNN (like ORT's MLAS) sums u8 x s8 pairs in saturating int16: 8-bit weights
    could overflow there, so they stay in float; 7-bit weights (ORT's reduce_range) go int8."""
    if _vnni():
        pytest.skip("this machine has VNNI: its int8 sums are exact for 8-bit weights")
    model, feeds = conv_model(np.random.default_rng(7), bits=8)
    p = _compile(model)
    assert not _int8_ops(p)
    assert _steps(p.run(feeds)[0], run_ort(model, feeds, optimize=False)[0], Y_SCALE["conv"]) <= 1.0


def test_int8_chain_keeps_integers_between_ops():
    """conv -> Q -> DQ -> conv: the first writes uint8 that the second reads; no float between."""
    from onnx import helper

    model, feeds = conv_model(np.random.default_rng(8), c=16, m=16)
    g = model.graph
    # a second conv reading the first's dequantized output, with its own weights and output QDQ
    out = g.output[0].name
    w2 = np.random.default_rng(9).integers(-60, 60, size=(16, 16, 3, 3)).astype(np.int8)
    for name, v in {"w2_q": w2, "w2_s": np.full(16, 0.004, np.float32), "w2_z": np.zeros(16, np.int8),
                    "y2_s": np.array(0.1, np.float32), "y2_z": np.array(7, np.uint8)}.items():
        g.initializer.append(onnx.numpy_helper.from_array(v, name))
    g.node.extend([helper.make_node("DequantizeLinear", ["w2_q", "w2_s", "w2_z"], ["w2"], axis=0),
                   helper.make_node("Conv", [out, "w2"], ["c2"], pads=[1] * 4),
                   helper.make_node("QuantizeLinear", ["c2", "y2_s", "y2_z"], ["q2"]),
                   helper.make_node("DequantizeLinear", ["q2", "y2_s", "y2_z"], ["y2"])])
    g.output[0].name = "y2"
    p = _compile(model)
    assert _int8_ops(p) == ["int8_conv", "int8_conv"]
    first = next(i for i in p.main if i.op.name == "int8_conv")
    assert first.shape.dtype == DType.uint8
    want = run_ort(model, feeds, optimize=False)[0]
    assert _steps(p.run(feeds)[0], want, 0.1) <= 1.0


def test_int8_program_saves_and_loads(tmp_path):
    model, feeds = conv_model(np.random.default_rng(10), relu=True)
    p = _compile(model)
    want = p.run(feeds)[0]
    fusegraph.save(p, tmp_path / "m.fgx")
    q = fusegraph.load(tmp_path / "m.fgx")
    assert _int8_ops(q) == ["int8_conv"]
    np.testing.assert_array_equal(q.run(feeds)[0], want)


@pytest.mark.parametrize("k, b_dtype", [(300, np.int8),     # K * 255 * 128 < 2**24: float32 is exact
                                         (600, np.int8),     # past 2**24: float64
                                         (40000, np.uint8)])  # K * 255 * 255 past 2**31: numpy's int32
def test_matmul_integer_product_is_exact(k, b_dtype):
    """quant_dot (MatMulInteger) through float BLAS only where floats hold every partial sum."""
    from onnx import helper

    from tests.util import make_model

    rng = np.random.default_rng(11)
    info = np.iinfo(b_dtype)
    a = rng.integers(0, 256, size=(6, k)).astype(np.uint8)
    b = rng.integers(info.min, info.max + 1, size=(k, 3)).astype(b_dtype)
    zps = {"az": np.array(3, np.uint8), "bz": np.array(info.min, b_dtype)}
    model = make_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a}, ["y"],
                       {"b": b, **zps})
    want = np.matmul(a.astype(np.int64) - 3, b.astype(np.int64) - int(info.min)).astype(np.int32)
    np.testing.assert_array_equal(_compile(model).run({"a": a})[0], want)

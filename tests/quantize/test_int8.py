"""quantize_int8 / quantize_fp8 on small models: ranges and scales against ONNX Runtime's
quantize_static on the same calibration data, the IR it writes, every target, .fgx round trips."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.errors import ArgumentError, CompileError
from fusegraph.quantize.int8 import make_plan
from fusegraph.quantize.qparams import Scheme
from fusegraph.quantize.ranges import TensorRange, entropy_threshold, select_range
from tests.helpers.ort_calibration import sample_reader
from tests.util import target_or_skip


def _conv_net(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> GlobalAveragePool -> Flatten -> Gemm: activations of both signs."""
    rng = np.random.default_rng(seed)
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), f"w{len(inits)}")  # noqa: E731
    inits: list = []
    for shape in ((8, 3, 3, 3), (8,), (16, 8, 3, 3), (16,), (10, 16), (10,)):
        inits.append(w(*shape))
    n = [t.name for t in inits]
    nodes = [
        helper.make_node("Conv", ["x", n[0], n[1]], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", n[2], n[3]], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["c2"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", n[4], n[5]], ["y"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _data(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((1, 3, 16, 16)) * rng.uniform(0.5, 2)).astype(np.float32)} for _ in range(n)]


def _ort_qdq(model: onnx.ModelProto, data, tmp_path, **kw) -> onnx.ModelProto:
    from onnxruntime.quantization import QuantFormat, quantize_static

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quantize_static(str(src), str(dst), sample_reader(data), quant_format=QuantFormat.QDQ, per_channel=True, **kw)
    return onnx.load(dst)


def _ort_scales(q: onnx.ModelProto) -> dict[str, tuple[float, int]]:
    """ORT's activation (scale, zero point) by the tensor its QuantizeLinear reads."""
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    return {n.input[0]: (float(inits[n.input[1]]), int(inits[n.input[2]])) for n in q.graph.node
            if n.op_type == "QuantizeLinear" and n.input[0] not in inits}


def _ort_weight_scales(q: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    return {n.input[0].removesuffix("_quantized"): inits[n.input[1]] for n in q.graph.node
            if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].dtype == np.int8}


def _fusegraph_scales(program) -> dict[str, tuple[float, int]]:
    """Activation (scale, zero point) by the tensor each quantize_linear of the program reads."""
    out = {}
    for ins in program.main.instructions:
        if ins.op.name == "quantize_linear" and not ins.inputs[0].is_literal:
            x, s, z = ins.inputs
            name = x.op.param_name if x.is_param else x.tensor
            out[name] = (float(s.inputs[0].literal), int(z.inputs[0].literal))
    return out


def test_minmax_scales_and_zero_points_equal_ort(tmp_path):
    pytest.importorskip("onnxruntime")
    model, data = _conv_net(), _data(6, 1)
    ort_scales = _ort_scales(_ort_qdq(model, data, tmp_path))
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(model), data, keep_heads=False)
    ours = _fusegraph_scales(p)
    assert set(ours) == {"x", "r1", "f"}  # the inputs of the conv / conv / gemm
    assert ours["x"] == ort_scales["x"]  # the same values: the same scale and zero point, exactly
    for name, (scale, zp) in ours.items():
        # activations inside come from kernels that sum in different orders: the max may move an ulp
        assert scale == pytest.approx(ort_scales[name][0], rel=1e-6), name
        assert zp == ort_scales[name][1], name


def test_weight_scales_equal_ort_per_channel(tmp_path):
    pytest.importorskip("onnxruntime")
    model, data = _conv_net(), _data(3, 1)
    ort_w = _ort_weight_scales(_ort_qdq(model, data, tmp_path))
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(model), data, keep_heads=False)
    dq = [i for i in p.main.instructions if i.op.name == "dequantize_linear" and i.inputs[0].is_literal]
    ours = sorted(tuple(np.ravel(i.inputs[1].inputs[0].inputs[0].literal)) for i in dq)
    theirs = sorted(tuple(np.ravel(v)) for v in ort_w.values())
    assert ours == theirs


@pytest.mark.parametrize("method", ["entropy", "percentile"])
def test_histogram_ranges_near_ort(tmp_path, method):
    """Our ranges against ORT's own calibrator, 2048 bins (128 quantized levels) on the same data."""
    pytest.importorskip("onnxruntime")
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    model, data = _conv_net(), _data(6, 2)
    onnx.save(model, tmp_path / "f.onnx")
    ort_method = {"entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile}[method]
    cal = create_calibrator(str(tmp_path / "f.onnx"), None, str(tmp_path / "aug.onnx"), calibrate_method=ort_method,
                            extra_options={"num_bins": 2048, "num_quantized_bins": 128, "percentile": 99.99})
    cal.collect_data(sample_reader(data))
    theirs = {k: tuple(float(v) for v in cal.compute_data()[k].range_value) for k in ("x", "r1", "f")}
    program = fusegraph.parse_onnx(model)
    ours = make_plan(program, data, Scheme(), method=method, keep_heads=False).named_ranges(program.main)
    for name, (lo, hi) in theirs.items():
        if method == "entropy":  # ORT keeps the symmetric [-t, t]; ours clips it to the values seen
            if name == "r1":
                # a ReLU output leaves half of p empty: ORT spreads each level's mass over those empty
                # bins too (TensorRT, and we, only over the bins p uses), so its threshold is larger
                assert 0 < ours[name][1] <= hi and ours[name][0] == 0.0
                continue
            if name == "f":  # 96 values in all: too few for two histograms to agree; within minmax
                assert data and ours[name][1] <= max(abs(lo), abs(hi)) * 2
                continue
            t = max(abs(v) for v in ours[name])
            assert t == pytest.approx(max(abs(lo), abs(hi)), rel=0.25), name
        else:
            assert ours[name] == pytest.approx((lo, hi), rel=0.05, abs=1e-3), name


def test_entropy_clips_a_long_tail():
    rng = np.random.default_rng(0)
    r = TensorRange(2048)
    x = rng.standard_normal(200_000).astype(np.float32)
    x[:20] = 60.0  # a few outliers stretch minmax 15x
    r.add(x)
    lo, hi = select_range(r, "entropy")
    assert 2.0 < hi < 20.0 and -20.0 < lo < -2.0
    assert select_range(r, "minmax") == (pytest.approx(float(x.min())), 60.0)
    # no tail: the threshold keeps every value (bins 1000..1047 of 2048 over [-1, 1] reach 24 / 1024)
    flat = np.zeros(2048, np.int64)
    flat[1000:1048] = 100
    assert 24 / 1024 <= entropy_threshold(flat, 1.0) <= 66 / 1024


def test_histogram_grows_keeping_earlier_counts():
    r = TensorRange(64)
    r.add(np.array([-1.0, 0.5, 1.0], np.float32))
    r.add(np.array([3.0], np.float32))
    assert r.hist.sum() == 4 and r.threshold >= 3.0
    assert select_range(r, "percentile", 100.0) == (-1.0, 3.0)


def test_rewrite_is_the_frontend_qdq_form():
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), _data(2, 0))
    convs = [i for i in p.main.instructions if i.op.name == "convolution"]
    for c in convs:
        x, w = c.inputs
        assert x.op.name == "dequantize_linear" and x.inputs[0].op.name == "quantize_linear"
        assert x.inputs[0].shape.dtype.name == "int8"
        assert w.op.name == "dequantize_linear" and w.inputs[0].is_literal and w.inputs[0].literal.dtype == np.int8
    dot = next(i for i in p.main.instructions if i.op.name == "dot")
    assert dot.inputs[0].op.name != "dequantize_linear"  # the fc head stays float by default
    assert "2 ops" in p.metadata["quantized"]


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_quantized_program_close_to_float_and_ort_like(target, tmp_path):
    model, data = _conv_net(), _data(6, 3)
    held = _data(4, 4)
    f = fusegraph.parse_onnx(model).compile("ref")
    q = fusegraph.quantize_int8(fusegraph.parse_onnx(model), data, keep_heads=False)
    q.compile(target_or_skip(target))
    for h in held:
        want, got = f.run(h)[0], q.run(h)[0]
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert 0 < err < 0.05
    path = tmp_path / "q.fgx"
    fusegraph.save(q, path)
    loaded = fusegraph.load(path)
    assert loaded.metadata["quantized"] == q.metadata["quantized"]
    np.testing.assert_array_equal(loaded.run(held[0])[0], q.run(held[0])[0])


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_fp8_runs_and_stays_close(target):
    model, data = _conv_net(), _data(4, 5)
    f = fusegraph.parse_onnx(model).compile("ref")
    q = fusegraph.quantize_fp8(fusegraph.parse_onnx(model), data, keep_heads=False)
    kinds = {i.inputs[0].shape.dtype.name for i in q.main.instructions if i.op.name == "dequantize_linear"}
    assert kinds == {"float8_e4m3fn"}
    q.compile(target_or_skip(target))
    h = _data(1, 6)[0]
    want, got = f.run(h)[0], q.run(h)[0]
    assert 0 < np.linalg.norm(got - want) / np.linalg.norm(want) < 0.1


def test_skip_names_and_ops():
    data = _data(2, 0)
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, skip_names=("conv2",), keep_heads=False)
    assert "2 ops" in p.metadata["quantized"]
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, skip_ops=("Gemm",), keep_heads=False)
    assert "2 ops" in p.metadata["quantized"]
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, quantize_ops=("MatMul",), keep_heads=False)
    assert "1 ops" in p.metadata["quantized"]
    with pytest.raises(ArgumentError, match="nosuchop"):
        fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, skip_ops=("nosuchop",))
    with pytest.raises(ArgumentError, match="method"):
        fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, method="kl")


def test_compiled_program_is_refused():
    p = fusegraph.parse_onnx(_conv_net()).compile("ref")
    with pytest.raises(CompileError, match="before compiling"):
        fusegraph.quantize_int8(p, _data(1, 0))


def test_sensitivity_ranks_layers():
    from fusegraph.quantize import sensitivity

    rows = sensitivity(fusegraph.parse_onnx(_conv_net()), _data(3, 0), _data(2, 1))
    assert rows[0].name == "(all)"
    assert {r.name for r in rows[1:]} == {"conv1", "conv2", "fc"}
    errs = [r.rel_l2 for r in rows[1:]]
    assert errs == sorted(errs, reverse=True) and all(e > 0 for e in errs)
    assert [r.head for r in rows if r.name == "fc"] == [True]


def test_cpu_calibration_runner_sees_the_ref_ranges():
    target_or_skip("cpu")
    data = _data(3, 7)
    ranges = {}
    for runner in ("ref", "cpu"):
        program = fusegraph.parse_onnx(_conv_net())
        ranges[runner] = make_plan(program, data, Scheme(), keep_heads=False, runner=runner).named_ranges(program.main)
    assert set(ranges["cpu"]) == set(ranges["ref"]) == {"x", "r1", "f"}
    for name, r in ranges["ref"].items():
        assert ranges["cpu"][name] == pytest.approx(r, rel=1e-5, abs=1e-6), name
    with pytest.raises(ArgumentError, match="runner"):
        make_plan(fusegraph.parse_onnx(_conv_net()), data, Scheme(), runner="gpu")


def _residual_net() -> onnx.ModelProto:
    """x -> mm1 -> r = x + h -> mm2 -> out = r + y, and a second head mm3 on r: a transformer-like
    residual stream where mm1's result reaches the output through adds alone, and also mm2 and mm3."""
    r = np.random.default_rng(3)
    w = {f"w{i}": numpy_helper.from_array(r.standard_normal((8, 8)).astype(np.float32), f"w{i}") for i in (1, 2, 3)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Add", ["x", "h"], ["r"], name="res1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
             helper.make_node("Add", ["r", "y"], ["out"], name="res2"),
             helper.make_node("MatMul", ["r", "w3"], ["cls"], name="mm3")]
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 8]),
                           helper.make_tensor_value_info("cls", TensorProto.FLOAT, [2, 8])], list(w.values()))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_heads_are_the_products_no_path_from_which_meets_another():
    """mm1 reaches `out` through the residual adds alone but also feeds mm2 and mm3: a hidden layer,
    quantized; mm2 and mm3 are the heads, kept float."""
    from fusegraph.quantize.select import DEFAULT_QUANTIZE_OPS, heads_of, select

    module = fusegraph.parse_onnx(_residual_net()).main
    picked = select(module, DEFAULT_QUANTIZE_OPS, keep_heads=False)
    names = {i.uid: {n.name for n in i.origin} for i in picked}
    assert sorted(min(names[i.uid]) for i in heads_of(module, picked)) == ["mm2", "mm3"]
    kept = {min(names[i.uid]) for i in picked} - {min(names[i.uid]) for i in select(module, DEFAULT_QUANTIZE_OPS)}
    assert kept == {"mm2", "mm3"}

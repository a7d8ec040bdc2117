"""Dynamically quantized products on the cpu target (ORT's quantize_dynamic: DynamicQuantizeLinear ->
MatMulInteger -> Cast -> Mul -> Add, written node by node as it writes them): one int8_dynamic_dot,
oneDNN's u8 x s8 matmul with the run-time zero point and scale (passes/fuse_dynamic_int8.py,
kernels/int8_dynamic.py), bit for bit the model's own float chain (ORT without graph optimizations,
and the ref target), at sums past float32's 2**24; forms it cannot take keep quant_dot, still exact."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import fusegraph
from fusegraph.passes import run_pipeline
from fusegraph.targets.cpu.passes import fuse_dynamic_int8
from tests.corpus.compare import run_ort
from tests.util import make_model, target_or_skip


def _model(rng, k=64, n=24, rows=(2, 5), w_type=np.int8, w_zp=0, per_channel=False, bias=True, scale=True,
           w=None, x=None):
    """x [*rows, k] float -> DynamicQuantizeLinear -> MatMulInteger(w [k, n], zero points) -> Cast
    [-> Mul(x_scale * w_scale)] [-> Add(bias)]."""
    info = np.iinfo(w_type)
    if w is None:
        w = rng.integers(info.min, info.max + 1, (k, n)).astype(w_type)
    w_scale = rng.uniform(0.001, 0.01, n if per_channel else ()).astype(np.float32)
    inits = {"w": w, "wz": np.array(w_zp, w_type), "ws": w_scale,
             "b": rng.standard_normal(n).astype(np.float32)}
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=1)]
    out = "accf"
    if scale:
        nodes += [helper.make_node("Mul", ["xs", "ws"], ["s"]), helper.make_node("Mul", [out, "s"], ["y0"])]
        out = "y0"
    if bias:
        nodes.append(helper.make_node("Add", [out, "b"], ["y"]))
        out = "y"
    if x is None:
        x = rng.standard_normal((*rows, k)).astype(np.float32) * 3 + 0.5  # zero point well inside (0, 255)
    return make_model(nodes, {"x": x}, [out], inits, opset=13), {"x": x}


def _compiled(model, target="cpu"):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip(target) if target == "cpu" else fusegraph.get_target(target))
    return p


def _ops(p) -> list[str]:
    return [i.op.name for i in p.main if i.op.name in ("int8_dynamic_dot", "quant_dot")]


@pytest.fixture()
def sums_exact():
    """Skip where oneDNN sums u8 x s8 pairs in saturating int16 (no VNNI): there the pass rightly keeps
    quant_dot for weights of the whole int8 range (onednn.quant.exact_here), which these tests use."""
    target_or_skip("cpu")
    from fusegraph.targets.cpu.onednn.quant import has_vnni

    if not has_vnni():
        pytest.skip("no VNNI here: oneDNN's int8 pair sums can saturate, so the rewrite is declined")


def _kernels(p) -> list[str]:
    """The kernel factory of each step (`reference_kernel` where numpy's reference runs)."""
    return [s.fn.__qualname__.split(".")[0] for s in p.executable.steps]


CASES = {
    "per-tensor s8 weights, bias": {},
    "batched rows": {"rows": (3, 4, 7)},
    "per-channel weight scales": {"per_channel": True},
    "u8 weights, zero point 128": {"w_type": np.uint8, "w_zp": 128},
    "s8 weights, zero point -3": {"w_zp": -3},
    "no bias": {"bias": False},
    "Cast alone": {"bias": False, "scale": False},
    "large K": {"k": 3072, "n": 16, "rows": (3,)},
}


@pytest.mark.parametrize("case", list(CASES))
def test_dynamic_product_is_the_models_arithmetic(case, sums_exact):
    kw = dict(CASES[case])
    rng = np.random.default_rng(3)
    if kw.get("w_zp") == -3:  # centred weights w + 3 must fit int8
        kw["w"] = rng.integers(-128, 125, (64, 24)).astype(np.int8)
    model, feeds = _model(rng, **kw)
    p = _compiled(model)
    assert _ops(p) == ["int8_dynamic_dot"], "not rewritten to the int8 op"
    assert "int8_dynamic_dot" in _kernels(p) and "min_max" in _kernels(p), "not oneDNN's int8 matmul"
    got = p.run(feeds)[0]
    np.testing.assert_array_equal(got, run_ort(model, feeds, optimize=False)[0])
    np.testing.assert_array_equal(got, _compiled(model, "ref").run(feeds)[0])
    want = run_ort(model, feeds)[0]  # ORT's MatMulIntegerToFloat: its own float rounding of the epilogue
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_sums_float32_cannot_hold_stay_exact(sums_exact):
    """All 255 x {-128, -127} over K = 3072: sums near 2**27 with odd low bits. The model's Cast rounds
    them to float32 once; oneDNN's f32 destination must round the exact int32 sum the same way."""
    rng = np.random.default_rng(4)
    k, n = 3072, 32
    x = np.full((1, 8, k), 7.0, np.float32)
    x[..., :5] = 0.0  # DynamicQuantizeLinear: zero point 0, every other value 255
    w = (-128 + rng.integers(0, 2, (k, n))).astype(np.int8)
    model, feeds = _model(rng, k=k, n=n, w=w, x=x, bias=False)
    p = _compiled(model)
    assert _ops(p) == ["int8_dynamic_dot"] and "int8_dynamic_dot" in _kernels(p)
    xq = np.full((8, k), 255, np.int64)
    xq[:, :5] = 0
    exact = xq @ w.astype(np.int64)
    assert np.abs(exact).max() > 2**26 and np.any(exact.astype(np.float32).astype(np.int64) != exact)
    got = p.run(feeds)[0]
    ws = next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "ws")
    scale = np.float32(np.float32(7.0) / np.float32(255.0)) * ws  # DynamicQuantizeLinear's scale x w's
    np.testing.assert_array_equal(got.reshape(8, n), exact.astype(np.float32) * scale)
    np.testing.assert_array_equal(got, run_ort(model, feeds, optimize=False)[0])
    np.testing.assert_array_equal(got, _compiled(model, "ref").run(feeds)[0])


FALLBACKS = {
    # centred weights w - (-128) reach 255: no int8 operand holds them
    "s8 weights, zero point -128": {"w_zp": -128},
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_forms_oneDNN_cannot_take_keep_quant_dot(case):
    """Kept as quant_dot, exact: the ref target's integer product bit for bit, and ONNX Runtime's where
    the CPU has VNNI. On a host without it (no AVX-512, no VNNI) ORT's result was 7.4 off (69 %) at 86
    of these 240 outputs, where fusegraph's cpu and ref targets and a numpy int64 product after the
    spec's DynamicQuantizeLinear agreed (likely its u8 x s8 kernel's saturating int16 pair sums, as
    oneDNN's there: onednn/quant.py)."""
    from fusegraph.targets.cpu.onednn.quant import has_vnni

    model, feeds = _model(np.random.default_rng(5), **FALLBACKS[case])
    p = _compiled(model)
    assert _ops(p) == ["quant_dot"]
    got = p.run(feeds)[0]
    np.testing.assert_array_equal(got, _compiled(model, "ref").run(feeds)[0])
    if has_vnni():
        np.testing.assert_array_equal(got, run_ort(model, feeds, optimize=False)[0])


def test_rewrite_keeps_the_model_semantics_on_ref(sums_exact):
    """The op's numpy reference is the chain it replaces: the rewritten program on ref is the original."""
    model, feeds = _model(np.random.default_rng(6), per_channel=True)
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, [fuse_dynamic_int8])
    assert [i.op.name for i in p.main if i.op.name == "int8_dynamic_dot"]
    p.compile(fusegraph.get_target("ref"))
    np.testing.assert_array_equal(p.run(feeds)[0], _compiled(model, "ref").run(feeds)[0])


def test_dynamic_product_saves_and_loads(tmp_path, sums_exact):
    model, feeds = _model(np.random.default_rng(7))
    p = _compiled(model)
    fusegraph.save(p, tmp_path / "m.fgx")
    q = fusegraph.load(tmp_path / "m.fgx")
    assert _ops(q) == ["int8_dynamic_dot"]
    np.testing.assert_array_equal(q.run(feeds)[0], p.run(feeds)[0])


def test_runs_from_many_threads():
    """The zero point and scale are per-call arguments: concurrent calls with different inputs (and so
    different run-time zero points and scales) each get their own answer."""
    from concurrent.futures import ThreadPoolExecutor

    model, _ = _model(np.random.default_rng(8), k=256, n=64, rows=(1, 16))
    p = _compiled(model)
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal((1, 16, 256)).astype(np.float32) * (i + 1) + i for i in range(6)]
    want = [p.run({"x": x})[0] for x in inputs]
    with ThreadPoolExecutor(3) as pool:
        for _ in range(3):
            got = list(pool.map(lambda x: p.run({"x": x})[0], inputs))
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)


def _min_max_model(shape):
    nodes = [helper.make_node("ReduceMax", ["x"], ["hi"], keepdims=0),
             helper.make_node("ReduceMin", ["x"], ["lo"], keepdims=0)]
    return make_model(nodes, {"x": np.zeros(shape, np.float32)}, ["hi", "lo"], opset=13)


@pytest.mark.parametrize("shape, poison", [((1, 128, 768), None), ((3, 170001), None), ((4, 150000), np.nan),
                                           ((7,), -np.inf), ((2, 9), np.nan)])
def test_min_and_max_of_one_tensor_are_one_pass(shape, poison):
    """DynamicQuantizeLinear's reduce_max and reduce_min of one tensor run as one min_max kernel, with
    numpy's answers: NaN anywhere (in any thread's share) makes both NaN."""
    p = _compiled(_min_max_model(shape))
    names = [i.op.name for i in p.main]
    assert "min_max" in names and "reduce_max" not in names and "reduce_min" not in names
    x = np.random.default_rng(10).standard_normal(shape).astype(np.float32)
    if poison is not None:
        x.flat[x.size * 3 // 4] = poison
    hi, lo = p.run({"x": x})
    np.testing.assert_array_equal(hi, x.max())
    np.testing.assert_array_equal(lo, x.min())


def test_products_of_one_quantized_input_merge(sums_exact):
    """A BERT layer's Q, K and V: three products of one DynamicQuantizeLinear become one matmul over
    the weights side by side, each column with its own product's run-time scale and bias."""
    rng = np.random.default_rng(12)
    k, n = 96, 40
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"])]
    inits, outs = {}, []
    for j, per_channel in enumerate((False, True, False)):
        inits |= {f"w{j}": rng.integers(-128, 128, (k, n)).astype(np.int8), f"wz{j}": np.array(0, np.int8),
                  f"ws{j}": rng.uniform(0.001, 0.01, n if per_channel else ()).astype(np.float32),
                  f"b{j}": rng.standard_normal(n).astype(np.float32)}
        nodes += [helper.make_node("MatMulInteger", ["xq", f"w{j}", "xz", f"wz{j}"], [f"acc{j}"]),
                  helper.make_node("Cast", [f"acc{j}"], [f"f{j}"], to=1),
                  helper.make_node("Mul", ["xs", f"ws{j}"], [f"s{j}"]),
                  helper.make_node("Mul", [f"f{j}", f"s{j}"], [f"m{j}"]),
                  helper.make_node("Add", [f"m{j}", f"b{j}"], [f"y{j}"])]
        outs.append(f"y{j}")
    x = rng.standard_normal((2, 9, k)).astype(np.float32)
    model = make_model(nodes, {"x": x}, outs, inits, opset=13)
    p = _compiled(model)
    products = [i for i in p.main if i.op.name == "int8_dynamic_dot"]
    assert len(products) == 1 and products[0].inputs[2].shape.lens == (k, 3 * n)
    for got, want in zip(p.run({"x": x}), run_ort(model, {"x": x}, optimize=False), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a_type, a_zp", [(np.uint8, 120), (np.int8, -3)])
def test_qlinear_matmul_product_takes_the_same_kernel(a_type, a_zp, sums_exact):
    """QLinearMatMul's integer sum and its scaling (constants here) are the same chain: one
    int8_dynamic_dot, its requantization after it, bit for bit ORT's."""
    rng = np.random.default_rng(13)
    info = np.iinfo(a_type)
    a = rng.integers(info.min, info.max + 1, (32, 700)).astype(a_type)
    inits = {"as": np.array(0.02, np.float32), "az": np.array(a_zp, a_type),
             "b": rng.integers(-128, 128, (700, 20)).astype(np.int8),
             "bs": rng.uniform(0.001, 0.01, 20).astype(np.float32), "bz": np.zeros(20, np.int8),
             "ys": np.array(0.5, np.float32), "yz": np.array(7, a_type)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = make_model([node], {"a": a}, ["y"], inits, opset=13)
    p = _compiled(model)
    assert _ops(p) == ["int8_dynamic_dot"] and "int8_dynamic_dot" in _kernels(p)
    np.testing.assert_array_equal(p.run({"a": a})[0], run_ort(model, {"a": a}, optimize=False)[0])


@pytest.mark.parametrize("case", ["per-tensor s8 weights, bias", "per-channel weight scales", "u8 weights, zero point 128",
                                  "Cast alone"])
def test_dynamic_product_runs_in_the_native_program(case, monkeypatch, sums_exact):
    """min_max, the scale and zero point, the zero point widened to int32 and the oneDNN product: one
    region, no Python step between them (a BERT layer had 16 regions split by them); the same bits
    as the steps run one by one."""
    from fusegraph.targets.cpu.native_program import KERNEL, PRIMITIVE, Region

    model, feeds = _model(np.random.default_rng(4), **CASES[case])
    p = _compiled(model)
    rows, _ = p.executable.main.thread_plan()
    assert len(rows) == 1 and isinstance(rows[0][0], Region)
    assert {KERNEL, PRIMITIVE} <= {c.kind for c in rows[0][0].table}
    got = p.run(feeds)[0]
    np.testing.assert_array_equal(got, _compiled(model, "ref").run(feeds)[0])
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    np.testing.assert_array_equal(got, _compiled(model).run(feeds)[0])


@pytest.mark.parametrize("poison", [None, np.nan])
def test_min_max_of_a_transposed_tensor_is_one_pass_over_its_buffer(poison):
    """A permutation of a dense buffer (an LSTM's output transposed before its quantized product):
    the order of the elements does not matter to min and max, so the kernel reads the buffer."""
    from fusegraph.targets.cpu.native_program import KERNEL, Region

    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("ReduceMax", ["t"], ["hi"], keepdims=0), helper.make_node("ReduceMin", ["t"], ["lo"], keepdims=0)]
    x = np.random.default_rng(12).standard_normal((5, 3, 8)).astype(np.float32)
    if poison is not None:
        x[4, 1, 2] = poison
    p = _compiled(make_model(nodes, {"x": x}, ["hi", "lo"], opset=13))
    assert "min_max" in [i.op.name for i in p.main]
    rows, _ = p.executable.main.thread_plan()
    assert any(isinstance(r[0], Region) and KERNEL in {c.kind for c in r[0].table} for r in rows)
    hi, lo = p.run({"x": x})
    np.testing.assert_array_equal(hi, x.max())
    np.testing.assert_array_equal(lo, x.min())

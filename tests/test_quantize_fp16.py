"""quantize_fp16 / quantize_bf16: the IR they leave (half tensors, float32 accumulation, float32 I/O),
the keep_fp32 option, and accuracy on the reference target against the float32 program."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import onnx
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir.dtypes import DType
from fusegraph.quantize import DEFAULT_KEEP_FP32
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(0)


def _model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Softmax", ["hb"], ["p"], axis=-1),
             helper.make_node("LayerNormalization", ["p", "g", "beta"], ["y"], axis=-1, epsilon=1e-5),
             helper.make_node("Cast", ["y"], ["z"], to=1)]
    inits = {"w": rng.standard_normal((16, 32)).astype(np.float32), "b": np.full(32, -1e30, np.float32),
             "g": rng.standard_normal(32).astype(np.float32), "beta": rng.standard_normal(32).astype(np.float32)}
    inits["b"][:16] = rng.standard_normal(16)  # half the logits masked with a value past fp16's range
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    return make_model(nodes, x, ["z"], initializers=inits), x


def _ins(p, name):
    return [i for i in p.main.instructions if i.op.name == name]


@pytest.mark.parametrize("quantize, half", [(fusegraph.quantize_fp16, DType.float16),
                                             (fusegraph.quantize_bf16, DType.bfloat16)])
def test_half_tensors_float32_accumulation_and_io(quantize, half):
    model, x = _model()
    p = quantize(fusegraph.parse_onnx(model))
    p.verify()
    assert p.get_parameter_shapes()["x"].dtype == DType.float32      # callers still feed float32
    assert [o.dtype for o in p.get_output_shapes()] == [DType.float32]
    (dot,) = _ins(p, "dot")
    assert dot.shape.dtype == half and all(i.shape.dtype == half for i in dot.inputs)
    for name in ("softmax", "moments"):                                # accumulation stays float32
        for ins in _ins(p, name):
            assert ins.inputs[0].shape.dtype == DType.float32
    for lit in p.main.instructions:
        if lit.is_literal and lit.shape.dtype.is_float:
            assert lit.shape.dtype == half and np.isfinite(lit.literal.astype(np.float32)).all()


def test_accuracy_against_float32_on_ref():
    model, x = _model()
    want = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref")).run(x)[0]
    got = fusegraph.quantize_fp16(fusegraph.parse_onnx(model)).compile(fusegraph.get_target("ref")).run(x)[0]
    assert got.dtype == np.float32
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3


def test_keep_fp32_lists_ops_left_in_float32():
    model, _ = _model()
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model), keep_fp32=DEFAULT_KEEP_FP32 | {"dot"})
    (dot,) = _ins(p, "dot")
    assert dot.shape.dtype == DType.float32 and all(i.shape.dtype == DType.float32 for i in dot.inputs)
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model), keep_fp32=())
    assert all(i.inputs[0].shape.dtype == DType.float16 for i in _ins(p, "softmax"))


def test_an_op_kept_in_float32_reads_its_constants_unrounded():
    model, _ = _model()
    w = next(np.asarray(onnx.numpy_helper.to_array(t)) for t in model.graph.initializer if t.name == "w")
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model), keep_fp32=DEFAULT_KEEP_FP32 | {"dot"})
    (dot,) = _ins(p, "dot")
    weight = dot.inputs[1]
    assert weight.is_literal and weight.literal.dtype == np.float32 and np.array_equal(weight.literal, w)
    assert not _ins(p, "convert") or all(not c.inputs[0].is_literal for c in _ins(p, "convert"))
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model))  # read in half: rounded once, at compile time
    (dot,) = _ins(p, "dot")
    assert dot.inputs[1].is_literal and dot.inputs[1].literal.dtype == np.float16


def test_compile_option_keep_fp32_adds_to_the_defaults_and_is_saved(tmp_path):
    from fusegraph.errors import CompileError

    model, x = _model()
    options = fusegraph.CompileOptions(fp16=True, keep_fp32=("dot",), optimize=True)
    p = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"), options)
    dots = [i for i in p.main.instructions if i.op.name == "dot"]
    assert dots and all(i.shape.dtype == DType.float32 for i in dots)  # kept as asked
    accumulating = [i for n in DEFAULT_KEEP_FP32 for i in _ins(p, n)]
    assert accumulating and all(i.inputs[0].shape.dtype == DType.float32 for i in accumulating)  # the defaults too
    assert any(i.shape.dtype == DType.float16 for i in p.main.instructions)  # the rest computes in half
    fusegraph.save(p, tmp_path / "m.fgx")
    loaded = fusegraph.load(tmp_path / "m.fgx")
    assert loaded.executable.options.keep_fp32 == ("dot",)
    assert loaded.run(x)[0].tobytes() == p.run(x)[0].tobytes()
    with pytest.raises(CompileError, match="no op named 'dott'"):
        fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"),
                                            fusegraph.CompileOptions(fp16=True, keep_fp32=("dott",)))
    with pytest.raises(CompileError, match="needs fp16=True"):
        fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"), fusegraph.CompileOptions(keep_fp32=("dot",)))


def test_resnet_on_ref_within_fp16_tolerance():
    from fusegraph.models import get_model, sample_inputs

    feeds = sample_inputs("resnet50", batch=1)
    dims = {"input": [1, 3, 64, 64]}
    feeds = {"input": feeds["input"][:, :, :64, :64].copy()}
    want = fusegraph.parse_onnx(get_model("resnet50"), map_input_dims=dims).compile(
        fusegraph.get_target("ref")).run(feeds)[0]
    p = fusegraph.parse_onnx(get_model("resnet50"), map_input_dims=dims)
    fusegraph.quantize_fp16(p)
    p.compile(fusegraph.get_target("ref"), fusegraph.CompileOptions(optimize=False))
    got = p.run(feeds)[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_constant_subexpressions_fold_in_float32_before_rounding():
    # a batch norm whose variance is past half's range (PP-OCRv4 det has 9.8e7) but whose folded
    # scale gamma / sqrt(var + eps) is 1: clipping the variance to 65504 first made the scale 39
    c = 3
    inits = {"g": np.full(c, 1e4, np.float32), "b": rng.standard_normal(c).astype(np.float32),
             "mean": rng.standard_normal(c).astype(np.float32), "var": np.full(c, 1e8, np.float32)}
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "b", "mean", "var"], ["y"], epsilon=1e-5)]
    x = {"x": rng.standard_normal((2, c, 4, 4)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits)
    want = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref")).run(x)[0]
    got = fusegraph.quantize_fp16(fusegraph.parse_onnx(model)).compile(fusegraph.get_target("ref")).run(x)[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3


def test_an_outputs_last_pointwise_op_computes_in_float32():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Sigmoid", ["h"], ["y"])]
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers={"w": rng.standard_normal((16, 8)).astype(np.float32)})
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model))
    (last,) = p.main.return_ins.inputs
    assert last.op.name == "sigmoid" and last.shape.dtype == DType.float32  # not rounded to half on the way out
    assert last.inputs[0].op.name == "convert" and last.inputs[0].inputs[0].shape.dtype == DType.float16


def test_zero_d_literals_stay_arrays():
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    x = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers={"k": np.array(1.5, np.float32)})
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model))
    assert all(isinstance(i.literal, np.ndarray) for i in p.main.instructions if i.is_literal)
    try:  # the cpu target's generated kernels took such a literal (a numpy scalar) and failed
        target = fusegraph.get_target("cpu")
    except fusegraph.errors.TargetError:
        target = fusegraph.get_target("ref")
    got = p.compile(target).run(x)[0]
    np.testing.assert_allclose(got, np.maximum(x["x"] * 1.5, 0), rtol=2e-3, atol=2e-3)



def _log1p_model():
    """x @ w (small values) -> log(1 + |h|): the corpus's speech front-end (conv, GELU, log1p, layer
    norm) was off by 1.2e-2 in fp16 because 1 + |h| was rounded to half before the log."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Abs", ["h"], ["a"]),
             helper.make_node("Add", ["a", "one"], ["s"]), helper.make_node("Log", ["s"], ["l"]),
             helper.make_node("Transpose", ["l"], ["y"])]
    x = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
    inits = {"w": rng.standard_normal((16, 32)).astype(np.float32) * 1e-3, "one": np.array(1.0, np.float32)}
    return make_model(nodes, x, ["y"], initializers=inits), x


def _fused_bodies(p):
    from fusegraph.passes import fuse_pointwise

    fuse_pointwise(p.main)
    return [i.op.body_text for i in _ins(p, "fused_pointwise")]


def test_a_fused_chain_of_a_half_program_rounds_only_its_result():
    model, x = _log1p_model()
    (body,) = _fused_bodies(fusegraph.quantize_fp16(fusegraph.parse_onnx(model)))
    assert "convert_float16" not in body  # abs -> add -> log in float32; the store rounds the result
    want = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref")).run(x)[0]
    got = fusegraph.quantize_fp16(fusegraph.parse_onnx(model)).compile(target_or_skip("cpu")).run(x)[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3  # was 0.2: ulp(1) / 2 lost |h| ~ 1e-3


def test_a_half_model_keeps_the_rounding_its_types_define():
    # the same chain in a model whose tensors ARE float16 (ONNX semantics: every op's result is half)
    model, _ = _log1p_model()
    half = fusegraph.quantize_fp16(fusegraph.parse_onnx(model))
    half.metadata.clear()  # as a model that came in half from ONNX
    (body,) = _fused_bodies(half)
    assert body.count("convert_float16") == 2  # abs and add rounded, as the unfused ops would be


def test_the_half_program_keeps_every_nodes_provenance():
    # quantize_fp16 rebuilds the module: its instructions lost their ONNX nodes, so `perf --profile
    # --fp16` named none and `verify --per-layer --fp16` had no tensor to compare
    from tests.profile.models import small_cnn

    model = small_cnn()
    p = fusegraph.quantize_fp16(fusegraph.parse_onnx(model))
    computing = [i for i in p.main.instructions if i.op.kind.name != "BUILTIN"]
    assert all(i.origin for i in computing)
    assert {n.name for i in computing for n in i.origin} == {n.name for n in model.graph.node}
    assert {i.tensor for i in computing if i.tensor} >= {"c", "r", "g", "y"}


@pytest.mark.parametrize("half", [DType.float16, DType.bfloat16])
def test_a_weight_is_rounded_as_clipping_then_rounding_would(half):
    """quantize's rounding of a weight, small or above the chunk size (threads): bit for bit what
    clipping it to half's range and rounding gives: out-of-range values, the edges of the range,
    infinities, NaN, -0.0, subnormals and a strided source included."""
    import ml_dtypes

    from fusegraph.quantize.fp16 import _CHUNK, _half_literal

    top = np.float32(ml_dtypes.finfo(half.np).max)
    edges = np.array([np.inf, -np.inf, np.nan, 65504, 65519, 65520, -65520, 7e4, 1e-8, -0.0, 6e-8, 3.38e38,
                      -3.4e38, np.finfo(np.float32).max, 0.5], np.float32)
    big = rng.standard_normal(((4 * _CHUNK // 7 + 1001) * 7,)).astype(np.float32) * 3e4
    big[[0, 7, -1]] = [np.inf, -np.inf, np.nan]
    big[100:100 + edges.size] = edges
    for value in (edges, big, big.reshape(-1, 7)[:, ::2].T):
        want = np.clip(value, -top, top).astype(half.np)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            got = _half_literal(value, half, pool)
        assert got.shape == value.shape and got.dtype == half.np
        assert got.tobytes() == want.tobytes()  # NaN where NaN, ±top for the infinities

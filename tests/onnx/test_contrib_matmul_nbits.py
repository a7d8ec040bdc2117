"""MatMulNBits with 4-bit weights kept packed (`matmul_nbits`, ops/nbits.py) against ONNX Runtime's CPU
kernel, on the ref and cpu targets (the gpu target: tests/targets/gpu/test_gpu_nbits.py).

Tolerance: rtol = atol = 1e-4, the one test_contrib_quantized_gemm.py uses for MatMulNBits. The
dequantized weights are the same float32 values in every engine ((q - zp) * scale), but the product
is a float32 GEMM whose summation order differs (ORT's MLAS blocks, our vectors and FMAs, numpy's
BLAS), so results agree to float rounding of sums over K ~ 200 terms, not bit for bit.
"""

import os

import numpy as np
import onnx
import pytest

import fusegraph
from tests.onnx.contrib_util import contrib_model, rng
from tests.util import assert_close, run_fusegraph, run_ort, target_or_skip

TOL = {"rtol": 1e-4, "atol": 1e-4}


def nbits_model(m, k, n, block, zero_points="none", bias=True, codes=None, scales=None, accuracy_level=None):
    """A MatMulNBits node with random (or given) 4-bit codes, its input a [m, k]."""
    blocks = -(-k // block)
    b = codes if codes is not None else rng.integers(0, 256, (n, blocks, block // 2)).astype(np.uint8)
    if scales is None:
        scales = rng.uniform(0.01, 0.1, n * blocks).astype(np.float32)
    params, names = {"b": b, "scales": scales}, ["a", "b", "scales"]
    if zero_points == "packed":
        params["zp"] = rng.integers(0, 256, n * -(-blocks // 2)).astype(np.uint8)
    elif zero_points == "float":
        params["zp"] = rng.uniform(0, 15, n * blocks).astype(np.float32)
    names.append("zp" if zero_points != "none" else "")
    if bias:
        params["bias"] = rng.standard_normal(n).astype(np.float32)
        names += ["", "bias"]
    attrs = {"K": k, "N": n, "bits": 4, "block_size": block}
    if accuracy_level is not None:
        attrs["accuracy_level"] = accuracy_level
    a = rng.standard_normal((m, k)).astype(np.float32)
    return contrib_model("MatMulNBits", {"a": a}, attrs, initializers=params, input_names=names), a


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("zero_points", ["none", "packed", "float"])
def test_matmul_nbits_vs_ort(target, m, block, zero_points):
    k, n = 200, 24  # K = 200 is no multiple of any block: the last block is padded
    model, a = nbits_model(m, k, n, block, zero_points, bias=block != 32)
    p = fusegraph.parse_onnx(model)
    assert [i.name for i in p.main if i.name in ("matmul_nbits", "dot")] == ["matmul_nbits"]
    got = run_fusegraph(model, {"a": a}, target_or_skip(target))
    assert_close(got, run_ort(model, {"a": a}), **TOL)


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("m", [1, 7, 64])
@pytest.mark.parametrize("nibbles", [0x00, 0xFF])
def test_matmul_nbits_edge_values(target, m, nibbles):
    """All-0 and all-15 codes under scales from 1e-30 to 1e30 (one magnitude per row of W, so no
    sum mixes them): every weight of a row has one sign and a is positive, so the sums do not
    cancel and a relative tolerance alone holds even where |y| is 1e-27 or 1e33."""
    k, n, block = 100, 9, 32  # the last block padded: its padding codes are 15 too
    blocks = -(-k // block)
    codes = np.full((n, blocks, block // 2), nibbles, np.uint8)
    magnitudes = np.float32(10.0) ** np.linspace(-30, 30, n).astype(np.float32)
    scales = (np.repeat(magnitudes, blocks) * rng.uniform(1, 2, n * blocks)).astype(np.float32)
    model, _ = nbits_model(m, k, n, block, bias=False, codes=codes, scales=scales)
    a = rng.uniform(0.5, 1.5, (m, k)).astype(np.float32)
    got, expected = run_fusegraph(model, {"a": a}, target_or_skip(target)), run_ort(model, {"a": a})
    assert np.all(np.isfinite(got[0])) and np.abs(got[0]).max() > 1e30
    assert_close(got, expected, rtol=1e-4, atol=0)


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_matmul_nbits_accuracy_level(target):
    """accuracy_level 4 lets ORT quantize a to int8; fusegraph always computes in float32, which
    the attribute permits: the result is that of accuracy_level 0 (ORT's float path)."""
    model0, a = nbits_model(5, 128, 16, 32, "packed")
    model4 = onnx.ModelProto()
    model4.CopyFrom(model0)
    model4.graph.node[0].attribute.append(onnx.helper.make_attribute("accuracy_level", 4))
    got = run_fusegraph(model4, {"a": a}, target_or_skip(target))
    np.testing.assert_array_equal(got[0], run_fusegraph(model0, {"a": a}, target_or_skip(target))[0])
    assert_close(got, run_ort(model0, {"a": a}), **TOL)


def test_matmul_nbits_batched_input():
    """a of rank 3: the rows of every batch go through the one product."""
    model, _ = nbits_model(1, 64, 8, 16, "float")
    model.graph.input[0].type.tensor_type.shape.ClearField("dim")
    for d in (2, 3, 64):
        model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = d
    a = rng.standard_normal((2, 3, 64)).astype(np.float32)
    assert_close(run_fusegraph(model, {"a": a}, target_or_skip("cpu")), run_ort(model, {"a": a}), **TOL)


def test_matmul_nbits_fgx_keeps_weights_packed(tmp_path):
    """A saved program holds the packed codes (an eighth of the float32 weight's bytes, plus the
    scales), not a dequantized float32 weight; loaded, it runs as before."""
    k, n, block = 1024, 512, 32
    model, a = nbits_model(2, k, n, block, "packed", bias=False)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    path = tmp_path / "int4.fgx"
    fusegraph.save(p, path)
    float_bytes = 4 * k * n
    packed_bytes = k * n // 2 + 4 * n * k // block + n * k // block // 2  # codes, scales, zero points
    assert os.path.getsize(path) < packed_bytes + float_bytes // 32  # a fraction over the packed weights
    assert os.path.getsize(path) < float_bytes / 6
    before = p.run({"a": a})
    np.testing.assert_array_equal(fusegraph.load(path).run({"a": a})[0], before[0])


@pytest.mark.parametrize("block,zero_points", [(16, "float"), (128, "packed")])
def test_matmul_nbits_many_rows_by_panels(block, zero_points):
    """From PANEL_ROWS rows the cpu kernel dequantizes panels of W for oneDNN (kernels/nbits.py);
    N odd and smaller than a panel's row count, K padded in the last block."""
    from fusegraph.targets.cpu.kernels.nbits import PANEL_ROWS

    model, a = nbits_model(PANEL_ROWS + 3, 200, 25, block, zero_points)
    assert_close(run_fusegraph(model, {"a": a}, target_or_skip("cpu")), run_ort(model, {"a": a}), **TOL)


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("quant_type", [0, 1])
@pytest.mark.parametrize("m,block", [(1, 16), (7, 64), (64, 32)])
def test_matmul_bnb4_packed_vs_ort(target, quant_type, m, block):
    """MatMulBnb4 with K a multiple of the block stays packed (`matmul_bnb4`) and runs the nibble
    kernel with bitsandbytes' code book; every code (FP4's -0.0 included) appears."""
    k, n = 128, 21
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.integers(0, 256, n * k // 2).astype(np.uint8)
    absmax = rng.uniform(0.5, 2, n * k // block).astype(np.float32)
    model = contrib_model("MatMulBnb4", {"a": a}, {"K": k, "N": n, "block_size": block, "quant_type": quant_type},
                          initializers={"b": b, "absmax": absmax})
    assert "matmul_bnb4" in {i.name for i in fusegraph.parse_onnx(model).main}
    assert_close(run_fusegraph(model, {"a": a}, target_or_skip(target)), run_ort(model, {"a": a}), **TOL)


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_matmul_nbits_float16(target):
    """float16 a and scales (ORT's T1): computed in float32, the result rounded to float16. The
    tolerance is test_gemm's float16 MatMul's (2e-3): ORT may round the weights or the sums to
    float16 on the way, an ulp of float16 being 1e-3 relative."""
    k, n, block = 96, 12, 32
    blocks = -(-k // block)
    init = {"b": rng.integers(0, 256, (n, blocks, block // 2)).astype(np.uint8),
            "scales": rng.uniform(0.01, 0.1, n * blocks).astype(np.float16)}
    a = rng.standard_normal((5, k)).astype(np.float16)
    model = contrib_model("MatMulNBits", {"a": a}, {"K": k, "N": n, "bits": 4, "block_size": block},
                          initializers=init)
    got = run_fusegraph(model, {"a": a}, target_or_skip(target))
    assert got[0].dtype == np.float16
    assert_close(got, run_ort(model, {"a": a}), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_matmul_nbits_dynamic_rows(target):
    """A dynamic row count: one compiled program serves decode-sized and panel-sized inputs."""
    from fusegraph.ir import Dim

    model, _ = nbits_model(1, 200, 24, 32, "packed")
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "M"
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"a": [Dim(1, 128), 200]})
    p.compile(target_or_skip(target))
    for m in (1, 7, 64):
        a = rng.standard_normal((m, 200)).astype(np.float32)
        assert_close(p.run({"a": a}), run_ort(model, {"a": a}), **TOL)


def test_matmul_nbits_weights_computed_at_run_time_are_refused_on_cpu():
    """The cpu kernel packs its weights at compile: codes fed as a model input are a typed error
    naming the ONNX node, not a slow path."""
    from onnx import TensorProto, helper

    from fusegraph.errors import CompileError

    k, n, block = 64, 8, 32
    node = helper.make_node("MatMulNBits", ["a", "b", "scales"], ["y"], domain="com.microsoft", name="proj",
                            K=k, N=n, bits=4, block_size=block)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k]),
                      helper.make_tensor_value_info("b", TensorProto.UINT8, [n, k // block, block // 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [onnx.numpy_helper.from_array(np.ones(n * k // block, np.float32), "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    p = fusegraph.parse_onnx(model)
    with pytest.raises(CompileError, match="proj.*must be constants"):
        p.compile(target_or_skip("cpu"))

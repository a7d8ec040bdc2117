"""QGemm, MatMulNBits and MatMulBnb4 against ONNX Runtime's CPU kernels.

QGemm's integer results are exact. Its int8 weights stay within [-64, 64]: ORT's u8s8 kernels on
x86 without VNNI (AVX2, AVX-512 without VNNI) sum pairs of u8*s8 products in int16 with saturation
(vpmaddubsw), so larger weights make ORT's own result depend on the machine; fusegraph computes the
exact sum the ONNX definition asks for (ORT's result on VNNI and ARM). uint8 weights have no such
limit (ORT widens u8u8 to int16 before multiplying)."""

import numpy as np
import pytest

from tests.onnx.contrib_util import contrib_model, randn, rng
from tests.util import check_on_every_target, run_fusegraph, run_ort


def _both(model, inputs, **tol):
    """ref's outputs and ORT's, after checking every target here (every_target) against ORT's."""
    check_on_every_target(model, inputs, **tol)
    return run_fusegraph(model, inputs), run_ort(model, inputs)


@pytest.mark.parametrize("b_type,per_column,trans_b,out", [
    (np.int8, True, True, "uint8"), (np.int8, False, False, "int8"), (np.uint8, False, True, "uint8"),
    (np.int8, True, False, "float"),
])
def test_qgemm(b_type, per_column, trans_b, out):
    m, k, n = 5, 40, 6
    a_type = np.int8 if out == "int8" else np.uint8   # ORT's output type is A's
    info = np.iinfo(a_type)
    a = rng.integers(info.min, info.max + 1, (m, k)).astype(a_type)
    lo, hi = (-64, 65) if b_type == np.int8 else (0, 256)
    b = rng.integers(lo, hi, (n, k) if trans_b else (k, n)).astype(b_type)
    nb = n if per_column else 1
    params = {"sa": np.array(0.02, np.float32), "za": np.array(info.max - 124, a_type), "b": b,
              "sb": (rng.uniform(0.001, 0.01, nb)).astype(np.float32),
              "zb": (np.zeros(nb) if b_type == np.int8 else rng.integers(0, 256, nb)).astype(b_type),
              "c": rng.integers(-3000, 3000, n).astype(np.int32)}
    names = ["a", "sa", "za", "b", "sb", "zb", "c"]
    if out != "float":
        zy_type = np.uint8 if out == "uint8" else np.int8
        params |= {"sy": np.array(0.9, np.float32), "zy": np.array(3 if out == "uint8" else -128, zy_type)}
        names += ["sy", "zy"]
    model = contrib_model("QGemm", {"a": a}, {"transB": int(trans_b), "alpha": 0.75}, initializers=params,
                          input_names=names)
    got, expected = _both(model, {"a": a}, rtol=1e-6, atol=0)
    if out != "float":  # the range is used, saturation ends included
        assert got[0].min() < 20 or got[0].max() > 235


@pytest.mark.parametrize("bits", [4, 8, 2])
@pytest.mark.parametrize("zero_points", ["none", "packed", "float"])
def test_matmul_nbits(bits, zero_points):
    if bits == 8 and zero_points == "float":
        pytest.skip("ORT's CPU kernel refuses 8-bit weights with float zero points")
    k, n, block = 72, 10, 32    # K not a multiple of the block: the last block is padded
    blocks = -(-k // block)
    blob = block * bits // 8
    a = randn(3, k)
    b = rng.integers(0, 256, (n, blocks, blob)).astype(np.uint8)
    params = {"b": b, "scales": (rng.uniform(0.01, 0.1, n * blocks)).astype(np.float32)}
    names = ["a", "b", "scales"]
    if zero_points == "none":
        names.append("")
    elif zero_points == "packed":
        params["zp"] = rng.integers(0, 256, n * -(-blocks * bits // 8)).astype(np.uint8)
        names.append("zp")
    elif zero_points == "float":
        params["zp"] = rng.uniform(0, 2 ** bits - 1, n * blocks).astype(np.float32)
        names.append("zp")
    params["bias"] = randn(n)
    names += ["", "bias"]
    model = contrib_model("MatMulNBits", {"a": a}, {"K": k, "N": n, "bits": bits, "block_size": block},
                          initializers=params, input_names=names)
    got, expected = _both(model, {"a": a}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("quant_type", [0, 1])
def test_matmul_bnb4(quant_type):
    k, n, block = 48, 7, 16
    a = randn(2, 3, k)
    b = rng.integers(0, 256, (n * k + 1) // 2).astype(np.uint8)
    absmax = rng.uniform(0.5, 2, -(-n * k // block)).astype(np.float32)
    model = contrib_model("MatMulBnb4", {"a": a}, {"K": k, "N": n, "block_size": block, "quant_type": quant_type},
                          initializers={"b": b, "absmax": absmax})
    got, expected = _both(model, {"a": a}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_matmul_and_integer_to_float(per_column):
    """Exact against ORT: A's dynamic uint8 quantization, the int32 product, acc * (sa * sb) + bias."""
    a = (randn(4, 3, 32) * 2).astype(np.float32)
    b = rng.integers(-64, 65, (32, 6)).astype(np.int8)
    sb = rng.uniform(0.001, 0.01, 6 if per_column else 1).astype(np.float32)
    init = {"b": b, "sb": sb, "zb": np.zeros(sb.shape, np.int8), "bias": randn(6)}
    model = contrib_model("DynamicQuantizeMatMul", {"a": a}, initializers=init)
    got, expected = _both(model, {"a": a}, rtol=1e-6, atol=1e-6)
    qa = rng.integers(0, 256, (5, 32)).astype(np.uint8)
    init = {"b": b, "sa": np.array(0.02, np.float32), "sb": sb, "za": np.array(200, np.uint8),
            "zb": np.zeros(sb.shape, np.int8), "bias": randn(6)}
    model = contrib_model("MatMulIntegerToFloat", {"qa": qa}, initializers=init,
                          input_names=["qa", "b", "sa", "sb", "za", "zb", "bias"])
    got, expected = _both(model, {"qa": qa}, rtol=1e-6, atol=1e-6)


def test_qlinear_conv_channels_last():
    x = rng.integers(0, 256, (1, 7, 6, 3)).astype(np.uint8)
    init = {"xs": np.array(0.02, np.float32), "xz": np.array(120, np.uint8),
            "w": rng.integers(-64, 65, (4, 3, 3, 3)).astype(np.int8),
            "ws": rng.uniform(0.005, 0.02, 4).astype(np.float32), "wz": np.zeros(4, np.int8),
            "ys": np.array(0.05, np.float32), "yz": np.array(110, np.uint8), "b": rng.integers(-500, 500, 4).astype(np.int32)}
    model = contrib_model("QLinearConv", {"x": x}, {"channels_last": 1, "pads": [1, 0, 1, 0]}, initializers=init,
                          input_names=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"])
    _both(model, {"x": x})

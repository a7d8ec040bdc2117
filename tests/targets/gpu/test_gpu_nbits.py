"""MatMulNBits' int4 product on the gpu target (lower_nbits.py: codes dequantized in registers into
tl.dot) against ONNX Runtime's CPU kernel: through Triton's interpreter anywhere, on the device where
there is one; and, `gpu`-marked, LLM-sized products against the op's float64 reference on the GPU.

Tolerance as tests/onnx/test_contrib_matmul_nbits.py (rtol = atol = 1e-4) and for its reason: the
dequantized weights are the same float32 values, the float32 sums run in another order.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

import fusegraph
from tests.onnx.contrib_util import contrib_model
from tests.onnx.test_contrib_matmul_nbits import TOL, nbits_model
from tests.util import assert_close, run_ort


@pytest.mark.parametrize("m,block,zero_points", [(1, 16, "packed"), (7, 32, "none"), (64, 128, "float"),
                                                 (20, 32, "packed")])
def test_matmul_nbits_vs_ort(gpu_target, m, block, zero_points):
    model, a = nbits_model(m, 200, 24, block, zero_points)  # K = 200: the last block padded
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    assert_close(p.run({"a": a}), run_ort(model, {"a": a}), **TOL)


def test_matmul_nbits_float16(gpu_target):
    """float16 a and scales: the dequantized tile rounded to float16 into the dot (as ORT's CUDA
    kernel), summed in float32; tolerance as the cpu test's float16 case (2e-3: a float16 ulp)."""
    k, n, block = 96, 12, 32
    rng = np.random.default_rng(16)
    init = {"b": rng.integers(0, 256, (n, k // block, block // 2)).astype(np.uint8),
            "scales": rng.uniform(0.01, 0.1, n * k // block).astype(np.float16)}
    a = rng.standard_normal((5, k)).astype(np.float16)
    model = contrib_model("MatMulNBits", {"a": a}, {"K": k, "N": n, "bits": 4, "block_size": block},
                          initializers=init)
    got = fusegraph.parse_onnx(model).compile(gpu_target).run({"a": a})
    assert_close(got, run_ort(model, {"a": a}), rtol=2e-3, atol=2e-3)


def test_matmul_nbits_edge_values(gpu_target):
    """All-15 codes under scales from 1e-30 to 1e30, one magnitude per row of W (no cancellation:
    a relative tolerance alone holds)."""
    k, n, block = 100, 9, 32
    blocks = -(-k // block)
    codes = np.full((n, blocks, block // 2), 0xFF, np.uint8)
    scales = np.repeat(np.float32(10.0) ** np.linspace(-30, 30, n).astype(np.float32), blocks)
    model, _ = nbits_model(3, k, n, block, bias=False, codes=codes, scales=scales.astype(np.float32))
    a = np.random.default_rng(3).uniform(0.5, 1.5, (3, k)).astype(np.float32)
    got = fusegraph.parse_onnx(model).compile(gpu_target).run({"a": a})
    assert_close(got, run_ort(model, {"a": a}), rtol=1e-4, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 8, 64])
@pytest.mark.parametrize("n", [4096, 11008])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_llm_sized_matmul_nbits_on_device(m, n, dtype):
    """A 4096 x n int4 product (an LLM's projection) on the GPU: the kernel, its tiles and its
    masks at full size, against the op's reference in float64, relative to the result's scale
    (4096-term float32 sums: 1e-5; float16 rounds a, W's tiles and y: 2e-3, an ulp of float16)."""
    from fusegraph.ops.nbits import MatmulNBits, dequantize

    k, block = 4096, 32
    model, a = nbits_model(m, k, n, block, "packed", bias=False)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if dtype == np.float16:
        model.graph.input[0].type.tensor_type.elem_type = model.graph.output[0].type.tensor_type.elem_type = 10
        for t in model.graph.initializer:
            if t.name == "scales":
                t.CopyFrom(numpy_helper.from_array(inits["scales"].astype(np.float16), "scales"))
        a, inits["scales"] = a.astype(np.float16), inits["scales"].astype(np.float16)
    got = np.asarray(fusegraph.parse_onnx(model).compile("gpu").run({"a": a})[0]).astype(np.float64)
    op = MatmulNBits(k=k, n=n, bits=4, block_size=block)
    w = dequantize(op, inits["b"], inits["scales"], inits["zp"]).astype(np.float64)
    want = a.astype(np.float64) @ w.T
    assert np.abs(got - want).max() <= (1e-5 if dtype == np.float32 else 2e-3) * np.abs(want).max()


@pytest.mark.parametrize("quant_type,m,block", [(0, 1, 16), (1, 20, 64)])
def test_matmul_bnb4_vs_ort(gpu_target, quant_type, m, block):
    """MatMulBnb4 kept packed: the same kernel with bitsandbytes' code book, high nibbles first."""
    k, n = 128, 21
    rng = np.random.default_rng(quant_type)
    a = rng.standard_normal((m, k)).astype(np.float32)
    init = {"b": rng.integers(0, 256, n * k // 2).astype(np.uint8),
            "absmax": rng.uniform(0.5, 2, n * k // block).astype(np.float32)}
    model = contrib_model("MatMulBnb4", {"a": a}, {"K": k, "N": n, "block_size": block, "quant_type": quant_type},
                          initializers=init)
    got = fusegraph.parse_onnx(model).compile(gpu_target).run({"a": a})
    assert_close(got, run_ort(model, {"a": a}), **TOL)

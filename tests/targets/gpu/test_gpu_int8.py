"""QDQ int8 / fp8 products on the gpu target as int8 / fp8 GEMMs (rewrite_quantized.py,
lower_quant.py): the rewrite keeps the program's meaning on ref; the gpu runs against ONNX Runtime
and ref, through cuBLASLt (gemm="library": torch._int_mm / _scaled_mm, or their exact fallbacks on
shapes they do not take) and through the Triton template's int8 / fp8 dot (gemm="triton").
Without CUDA the same runs on Triton's interpreter (the `gpu_target` fixture)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph.passes import run_pipeline
from fusegraph.targets.base import CompileOptions
from fusegraph.targets.gpu import GpuTarget
from fusegraph.targets.gpu.plan import list_steps
from fusegraph.targets.gpu.rewrite_quantized import rewrite_quantized
from tests.corpus.compare import run_ort
from tests.quantize.test_int8 import _conv_net, _data
from tests.targets.cpu.int8_models import conv_model, matmul_model

Y_SCALE = {"conv": 0.08, "matmul": 0.1}  # the output scales int8_models writes
QUANT_STEPS = {"quant_gemm_epilogue", "quant_conv_epilogue", "quant_dot", "quant_convolution", "float8_dot"}

CASES = {  # name: (model, its options)
    "conv 3x3 u8 (patches)": (conv_model, {}),
    "conv 3x3 s8 + relu": (conv_model, {"act": "s8", "relu": True}),
    "conv 1x1 (rows of the input)": (conv_model, {"k": 1}),
    "conv float result": (conv_model, {"out": "f"}),
    "matmul 10 rows (fallback: m <= 16)": (matmul_model, {}),
    "matmul 32 rows (torch._int_mm)": (matmul_model, {"batch": (4, 8)}),
    "matmul n=20 (fallback: n % 8)": (matmul_model, {"batch": (4, 8), "n": 20}),
    "gemm transB s8, float result": (matmul_model, {"gemm": True, "trans_b": True, "act": "s8", "out": "f",
                                                    "batch": (40,)}),
}
TRITON_CASES = ("conv 3x3 u8 (patches)", "conv 1x1 (rows of the input)", "matmul 32 rows (torch._int_mm)",
                "matmul n=20 (fallback: n % 8)")


def _target(gpu_target, gemm: str):
    return GpuTarget(device=gpu_target.device, gemm=gemm)


def _compiled(model, target):
    p = fusegraph.parse_onnx(model)
    p.compile(target)
    return p


def _kinds(p) -> set[str]:
    return {s.kind for s in p.executable.plan.steps}


def _steps(got: np.ndarray, want: np.ndarray, scale: float) -> float:
    """The largest difference in quantization steps of the output."""
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))) / scale)


def _check_against_ort(case: str, target) -> None:
    build, kw = CASES[case]
    model, feeds = build(np.random.default_rng(5), **kw)
    want = run_ort(model, feeds, optimize=False)[0]
    p = _compiled(model, target)
    assert _kinds(p) & {"quant_gemm_epilogue", "quant_conv_epilogue"}, "the QDQ product is not an int8 GEMM step"
    got = np.asarray(p.run(feeds)[0])
    assert got.dtype == want.dtype and got.shape == want.shape
    if kw.get("out") == "f":  # the exact integer sum, scaled once, vs ORT's float32 sum
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    else:  # at most one step where ORT's float sum lands on the other side of a rounding edge
        assert _steps(got, want, Y_SCALE[build.__name__.split("_")[0]]) <= 1.0


@pytest.mark.parametrize("case", list(CASES))
def test_qdq_int8_matches_ort_through_cublaslt(gpu_target, case):
    _check_against_ort(case, _target(gpu_target, "library"))


@pytest.mark.parametrize("case", TRITON_CASES)
def test_qdq_int8_matches_ort_through_triton_int8_dot(gpu_target, case):
    _check_against_ort(case, _target(gpu_target, "triton"))


@pytest.mark.parametrize("quantize, kw", [("quantize_int8", {}), ("quantize_int8", {"activation_type": "uint8"}),
                                          ("quantize_int8", {"symmetric": True}), ("quantize_fp8", {})])
def test_rewrite_keeps_the_program_on_ref(quantize, kw):
    """The integer products with their float epilogue compute what the QDQ program computes."""
    data, held = _data(3, 0), _data(1, 1)[0]
    want = getattr(fusegraph, quantize)(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False, **kw)
    p = getattr(fusegraph, quantize)(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False, **kw)
    assert rewrite_quantized(p.main)
    live = {i.op.name for i in p.main.instructions if i.users or i in p.main.outputs}
    assert {"quant_convolution", "float8_dot" if quantize == "quantize_fp8" else "quant_dot"} <= live
    expected = want.compile("ref").run(held)[0]
    got = p.compile("ref").run(held)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_rewrite_leaves_grouped_convolutions_float():
    model, _ = conv_model(np.random.default_rng(1), groups=4)
    p = fusegraph.parse_onnx(model)
    assert not rewrite_quantized(p.main)


@pytest.mark.parametrize("quantize", ["quantize_int8", "quantize_fp8"])
@pytest.mark.parametrize("gemm", ["library", "triton"])
def test_quantized_program_matches_ref(gpu_target, quantize, gemm):
    """quantize_int8 / quantize_fp8 programs (requantize fused into the first convolution's
    epilogue for int8) against ref: one quantization step apart at most inside, so close outside."""
    data, held = _data(3, 0), _data(2, 1)
    ref = getattr(fusegraph, quantize)(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False).compile("ref")
    p = getattr(fusegraph, quantize)(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False)
    p.compile(_target(gpu_target, gemm))
    assert _kinds(p) & {"quant_gemm_epilogue", "quant_conv_epilogue"}
    for feeds in held:
        got, want = np.asarray(p.run(feeds)[0]), ref.run(feeds)[0]
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_int8_epilogue_writes_the_next_layers_integers():
    """conv -> relu -> quantize: the quantize is the first product's epilogue (it writes int8)."""
    data = _data(3, 0)
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False)
    options = CompileOptions()
    run_pipeline(p, GpuTarget(device="cpu").passes(options), options)
    first = next(s for s in list_steps(p.main) if s.kind == "quant_conv_epilogue")
    assert first.ins.shape.dtype.name == "int8"


@pytest.mark.parametrize("rows, k, n", [(32, 64, 48), (5, 20, 12)])  # torch._int_mm's shapes, and not
def test_matmul_integer_is_exact(gpu_target, rows, k, n):
    """MatMulInteger of int8 x int8 constant weights: torch._int_mm (or float64), bit-exact."""
    from onnx import helper

    from tests.util import make_model

    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=(rows, k)).astype(np.int8)
    b = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    model = make_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], {"a": a}, ["y"], {"b": b})
    p = _compiled(model, _target(gpu_target, "library"))
    assert "quant_dot" in _kinds(p)
    want = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(p.run({"a": a})[0]), want)


def test_specialized_dynamic_batch_keeps_quantized_weights():
    """A dynamic-batch quantized program specialized to a batch (what the gpu compiles per shape)
    keeps its weights' dequantize, so the integer products are still found (specialize used to
    fold them into float weights first)."""
    from fusegraph.ir import Dim
    from fusegraph.passes.specialize_shapes import specialize

    data = _data(2, 0)
    p = fusegraph.parse_onnx(_conv_net(), map_dyn_input_dims={"x": [Dim(1, 4), 3, 16, 16]})
    fusegraph.quantize_int8(p, data, keep_heads=False)
    s = specialize(p, {"x": (4, 3, 16, 16)})
    convs = [i for i in s.main.instructions if i.op.name == "convolution"]
    assert convs and all(c.inputs[1].op.name == "dequantize_linear" for c in convs)
    assert rewrite_quantized(s.main)
    feeds = {"x": np.concatenate([_data(1, k)[0]["x"] for k in range(4)])}
    want = p.compile("ref").run(feeds)[0]
    np.testing.assert_allclose(s.compile("ref").run(feeds)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_specialized_batched_matmul_is_one_gemm():
    """A dynamic-batch 3-D MatMul, specialized: one [B * S, K] x [K, N] integer product."""
    from fusegraph.ir import Dim
    from fusegraph.passes.specialize_shapes import specialize

    model, feeds = matmul_model(np.random.default_rng(2), batch=(3, 8), act="s8", out="f")
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 4), 8, 32]})
    s = specialize(p, {"x": (3, 8, 32)})
    assert rewrite_quantized(s.main)
    assert "quant_dot" in {i.op.name for i in s.main.instructions if i.users}
    want = run_ort(model, feeds, optimize=False)[0]
    np.testing.assert_allclose(s.compile("ref").run(feeds)[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def _mlp(rows: int, k: int, n: int):
    """x [rows, k] -> MatMul -> Add -> Relu -> MatMul [n, 32]: float, for quantize_int8 / quantize_fp8."""
    from onnx import helper

    from tests.util import make_model

    rng = np.random.default_rng(4)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    inits = {"w1": (rng.standard_normal((k, n)) * 0.2).astype(np.float32), "b1": rng.standard_normal(n).astype(np.float32),
             "w2": (rng.standard_normal((n, 32)) * 0.2).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["y"])]
    return make_model(nodes, {"x": x}, ["y"], inits), x


@pytest.mark.parametrize("quantize", ["quantize_int8", "quantize_fp8"])
@pytest.mark.parametrize("gemm", ["library", "triton"])
@pytest.mark.parametrize("rows, k, n", [(32, 64, 48), (48, 96, 64), (5, 24, 40)])  # cuBLASLt's shapes, and not
def test_quantized_matmuls_match_ref(gpu_target, quantize, gemm, rows, k, n):
    """Two quantized MatMuls (the first's bias, ReLU and the second's quantize in its epilogue) at
    shapes torch._int_mm / _scaled_mm take (32, 64, 48; 48, 96, 64) and do not (5, 24, 40)."""
    model, x = _mlp(rows, k, n)
    calib = [{"x": x * s} for s in (0.5, 1.0)]
    ref = getattr(fusegraph, quantize)(fusegraph.parse_onnx(model), calib, keep_heads=False).compile("ref")
    p = getattr(fusegraph, quantize)(fusegraph.parse_onnx(model), calib, keep_heads=False)
    p.compile(_target(gpu_target, gemm))
    assert "quant_gemm_epilogue" in _kinds(p)
    got, want = np.asarray(p.run({"x": x})[0]), ref.run({"x": x})[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_the_gpu_target_registers_its_quantized_ops():
    """Loading a compiled file parses its IR once the target is known, before any pass runs: the
    target's own ops must be registered by then (a fresh process: nothing imported them yet)."""
    import subprocess
    import sys

    code = ("import fusegraph\nfrom fusegraph.ir.op import registered_ops\nfusegraph.get_target('gpu')\n"
            "assert {'quant_convolution', 'float8_dot'} <= set(registered_ops())\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
def test_int8_program_saves_and_loads(tmp_path):
    """A compiled int8 program's IR holds the gpu's quantized product ops: a fresh process loads it."""
    import subprocess
    import sys

    data, held = _data(3, 0), _data(1, 1)[0]
    p = fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False)
    p.compile(GpuTarget(gemm="library"))
    fusegraph.save(p, tmp_path / "q.fgx")
    np.save(tmp_path / "x.npy", held["x"])
    np.save(tmp_path / "want.npy", np.asarray(p.run(held)[0]))
    code = ("import numpy as np, fusegraph\n"
            f"q = fusegraph.load({str(tmp_path / 'q.fgx')!r})\n"
            "assert 'quant_convolution' in {i.op.name for i in q.executable.program.main.instructions}\n"
            f"got = np.asarray(q.run({{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0])\n"
            f"np.testing.assert_array_equal(got, np.load({str(tmp_path / 'want.npy')!r}))\n")
    subprocess.run([sys.executable, "-c", code], check=True)

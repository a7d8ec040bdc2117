"""gemm_bias and conv_gemm steps are autotuned (gemm_runner.BiasGemm): the library candidate is one
cuBLASLt call with the bias (ReLU) epilogue, the template candidates the Triton GEMM with the add's
own expression. Both, forced by the gemm mode, against ONNX Runtime: 1x1 convolutions with and
without a bias, with a ReLU, into a concat's slice, and matmuls with a bias whose rows split."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(5)
n = helper.make_node


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


CASES = {
    "conv_bias_relu": ([n("Conv", ["x", "w", "b"], ["c"]), n("Relu", ["c"], ["y"])],
                       {"x": (2, 8, 5, 6)}, {"w": (16, 8, 1, 1), "b": (16,)}, "conv_gemm"),
    "conv_bias": ([n("Conv", ["x", "w", "b"], ["y"])], {"x": (1, 24, 3, 7)}, {"w": (40, 24, 1, 1), "b": (40,)},
                  "conv_gemm"),
    "conv_bare": ([n("Conv", ["x", "w"], ["y"])], {"x": (2, 16, 4, 4)}, {"w": (8, 16, 1, 1)}, "conv_gemm"),
    "conv_into_concat": ([n("Conv", ["x", "w", "b"], ["c"]), n("Concat", ["x", "c"], ["y"], axis=1)],
                         {"x": (1, 8, 6, 5)}, {"w": (12, 8, 1, 1), "b": (12,)}, "conv_gemm"),
    "gemm": ([n("Gemm", ["x", "w", "b"], ["y"])], {"x": (5, 24)}, {"w": (24, 40), "b": (40,)}, "gemm_bias"),
    "matmul_add_rows_split": ([n("MatMul", ["x", "w"], ["m"]), n("Add", ["m", "b"], ["y"])],
                              {"x": (2, 7, 32)}, {"w": (32, 48), "b": (48,)}, "gemm_bias"),
}


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("gemm", ["library", "triton"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_both_candidates_against_ort(case, gemm, fp16, target_of):
    nodes, inputs, inits, kind = CASES[case]
    feeds = {k: randn(*s) for k, s in inputs.items()}
    model = make_model(nodes, feeds, ["y"], initializers={k: randn(*s) * 0.3 for k, s in inits.items()})
    p = fusegraph.parse_onnx(model)
    p.compile(target_of(gemm), fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=tol, atol=tol)
    kinds = [s.kind for s in p.executable.plan.steps]
    # (in fp16 an output's conversion back to float32 may make the step a plain epilogue GEMM)
    assert kinds.count(kind) == 1 or (fp16 and f"{kind.replace('_bias', '')}_epilogue" in kinds), kinds
    chosen = [c["name"] for c in p.executable.tuning.values()]
    assert chosen and all((name == "library") == (gemm == "library") for name in chosen), chosen


@pytest.mark.gpu  # Triton 3.6's interpreter computes bf16 tl.dot wrongly: CUDA only
@pytest.mark.parametrize("case", ["conv_bias_relu", "matmul_add_rows_split"])
def test_the_templates_in_bfloat16(case, target_of):
    # small bf16 programs reach the templates by default (workspace.py)
    nodes, inputs, inits, _ = CASES[case]
    feeds = {k: randn(*s) for k, s in inputs.items()}
    model = make_model(nodes, feeds, ["y"], initializers={k: randn(*s) * 0.3 for k, s in inits.items()})
    p = fusegraph.parse_onnx(model)
    fusegraph.quantize_bf16(p)
    p.compile(target_of("triton"))
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=6e-2, atol=6e-2)
    assert all(c["name"] != "library" for c in p.executable.tuning.values())

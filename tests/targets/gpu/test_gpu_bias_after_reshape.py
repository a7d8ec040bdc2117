"""A 2-D Gemm's bias add moves after the reshape that restores its rows (bias_after_reshape.py), so
GPT-2-style layers (Reshape -> Gemm -> Reshape -> GELU / residual Add) fuse the bias with what reads
the layer into one GEMM epilogue; forms it must leave alone stay as they were. Against ONNX Runtime
(the gpu target on CUDA, or on Triton's interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

n = helper.make_node
rng = np.random.default_rng(4)
B, S, C, N = 2, 8, 16, 32


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def dims(*d):
    return np.array(d, np.int64)


def layer(after: list, out_dims=(B, S, N), extra_inits=None):
    """x [B, S, C] -> Reshape [B*S, C] -> Gemm(w, b) -> Reshape `out_dims` -> `after` (reads "g3")."""
    nodes = [n("Reshape", ["x", "s2"], ["x2"]), n("Gemm", ["x2", "w", "b"], ["g"]), n("Reshape", ["g", "s3"], ["g3"]),
             *after]
    inits = {"s2": dims(B * S, C), "w": randn(C, N) * 0.3, "b": randn(N), "s3": dims(*out_dims), **(extra_inits or {})}
    feeds = {"x": randn(B, S, C)}
    return make_model(nodes, feeds, ["y"], initializers=inits), feeds


def compiled_kinds(model, feeds, target, fp16=False):
    p = fusegraph.parse_onnx(model)
    p.compile(target, fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=tol, atol=tol)
    return [s.kind for s in p.executable.plan.steps if s.kind not in ("reshape", "broadcast", "convert", "slice")]


GELU_TANH = [n("Mul", ["g3", "g3"], ["sq"]), n("Mul", ["sq", "g3"], ["cube"]), n("Tanh", ["cube"], ["t"]),
             n("Mul", ["t", "g3"], ["y"])]


@pytest.mark.parametrize("fp16", [False, True])
def test_a_gpt2_mlp_is_two_gemm_epilogues(fp16, gpu_target):
    # Gemm + GELU, then Gemm + residual add: each bias joins its reader in the GEMM's epilogue
    after = [*GELU_TANH[:-1], n("Mul", ["t", "g3"], ["h"]), n("Reshape", ["h", "s2b"], ["h2"]),
             n("Gemm", ["h2", "w2", "b2"], ["o"]), n("Reshape", ["o", "s3b"], ["o3"]), n("Add", ["o3", "x"], ["y"])]
    model, feeds = layer(after, extra_inits={"s2b": dims(B * S, N), "w2": randn(N, C) * 0.3, "b2": randn(C),
                                             "s3b": dims(B, S, C)})
    assert compiled_kinds(model, feeds, gpu_target, fp16) == ["gemm_epilogue", "gemm_epilogue"]


def test_three_gemms_of_one_input_merge_in_the_moved_form(gpu_target):
    # q, k, v as three Gemms, each Reshape'd after its bias and transposed: still one matmul (the
    # moved form is a merge_sibling_dots tail once the moved-from add is gone: it fails without the
    # dead-code pass between them, the dot then having two readers)
    nodes = [n("Reshape", ["x", "s2"], ["x2"])]
    inits = {"s2": dims(B * S, C), "s3": dims(B, S, N)}
    for k in "qkv":
        nodes += [n("Gemm", ["x2", f"w{k}", f"b{k}"], [f"g{k}"]), n("Reshape", [f"g{k}", "s3"], [f"r{k}"]),
                  n("Transpose", [f"r{k}"], [f"t{k}"], perm=[1, 0, 2])]
        inits |= {f"w{k}": randn(C, N) * 0.3, f"b{k}": randn(N)}
    nodes += [n("Concat", ["tq", "tk", "tv"], ["y"], axis=-1)]
    feeds = {"x": randn(B, S, C)}
    kinds = compiled_kinds(make_model(nodes, feeds, ["y"], initializers=inits), feeds, gpu_target)
    assert kinds.count("gemm_bias") == 1 and "dot" not in kinds, kinds


@pytest.mark.parametrize("case", ["last_dim_changes", "bias_read_twice"])
def test_forms_it_leaves_alone(case, gpu_target):
    if case == "last_dim_changes":  # [B*S, N] -> [B, S, 2, N/2]: the bias would meet other elements
        model, feeds = layer([n("Relu", ["g3"], ["y"])], out_dims=(B, S, 2, N // 2))
    else:  # the sum before the reshape is read by another op too
        model, feeds = layer([n("Relu", ["g3"], ["r"]), n("ReduceSum", ["g", "ax"], ["gs"], keepdims=0),
                              n("Reshape", ["gs", "s1"], ["gs3"]), n("Add", ["r", "gs3"], ["y"])],
                             extra_inits={"ax": dims(1), "s1": dims(B, S, 1)})
    kinds = compiled_kinds(model, feeds, gpu_target)
    assert "gemm_bias" in kinds, kinds  # the bias stays with its GEMM, before the reshape

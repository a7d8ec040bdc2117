"""2:4 sparse matmuls on the gpu target: which steps get the sparse kinds (sparse_patterns.py), results
of every kind against ONNX Runtime with the dense kernel chosen and with the sparse one forced (on the
GPU through cuSPARSELt; elsewhere through Triton's interpreter with a stand-in for cuSPARSELt that
checks the operands it is handed: W^T 2:4 along its rows, x^T with rows padded to a multiple of 8),
and, on the GPU, the kernel itself against torch's dense product."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(24)


def randn(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def pruned(k, n):
    return fusegraph.prune_2_4(randn(k, n, scale=0.1))


def ffn_model(rows=5, d=64, ff=128, w1=None):
    """BERT's feed-forward block, MatMul + bias -> GELU -> MatMul + bias, with readers that leave each
    kind of step: the first biased product is also summed (gemm_bias: its add has two readers), the
    second takes its reader (gemm_epilogue), and a third MatMul on the block's input is read twice
    (a plain dot)."""
    nodes = [helper.make_node("MatMul", ["h", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Gelu", ["a1"], ["g"]), helper.make_node("ReduceSum", ["a1", "ax"], ["s"], keepdims=0),
             helper.make_node("MatMul", ["g", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["y"]),
             helper.make_node("MatMul", ["h", "w3"], ["m3"]), helper.make_node("ReduceMax", ["m3", "ax"], ["z1"], keepdims=0),
             helper.make_node("Relu", ["m3"], ["z2"])]
    inits = {"w1": pruned(d, ff) if w1 is None else w1, "b1": randn(ff, scale=0.1), "w2": pruned(ff, d),
             "b2": randn(d, scale=0.1), "w3": pruned(d, 32),
             "ax": np.array([-1], np.int64)}
    x = {"h": randn(2, rows, d)}
    return make_model(nodes, x, ["y", "s", "z1", "z2"], initializers=inits, opset=20), x


def compiled(target, model, dtype="fp16"):
    p = fusegraph.parse_onnx(model)
    if dtype == "bf16":
        fusegraph.quantize_bf16(p)
    p.compile(target, fusegraph.CompileOptions(fp16=dtype == "fp16"))
    return p


def sparse_kinds(p):
    return sorted(s.kind for s in p.executable.plan.steps if "dot" in s.kind or "gemm" in s.kind)


class CallLog(list):
    """The stand-in's sparse products (shapes of W^T and x^T, whether biased), and its compressions."""

    def __init__(self):
        super().__init__()
        self.compressed: list[tuple[int, ...]] = []


@pytest.fixture()
def force_sparse(monkeypatch, gpu_target):
    """The sparse candidate of every sparse step, whatever the timing; on the CPU a stand-in for
    cuSPARSELt (dense products of the operands it checks)."""
    from fusegraph.targets.gpu import autotune, lower_sparse

    real = autotune.Tuner.choose

    def prefer_sparse(self, key, candidates, args=()):
        return real(self, key, [c for c in candidates if c.name == lower_sparse.SPARSE] or candidates, args)

    monkeypatch.setattr(autotune.Tuner, "choose", prefer_sparse)
    calls = CallLog()
    if gpu_target.device is None:  # a CUDA machine: the real library
        return calls

    def compress(w_t):
        assert fusegraph.is_2_4(w_t.float().numpy().T), "cuSPARSELt's sparse operand must be 2:4 along its rows"
        calls.compressed.append(tuple(w_t.shape))
        return w_t.clone()

    def sparse_mm(packed, x_t, bias):
        assert x_t.shape[0] == packed.shape[1] and x_t.shape[1] % lower_sparse.DENSE_ROWS == 0
        calls.append((tuple(packed.shape), tuple(x_t.shape), bias is not None))
        y = (packed.float() @ x_t.float()).t()
        return (y if bias is None else y + bias.float()).to(packed.dtype).contiguous()

    monkeypatch.setattr(lower_sparse, "compress", compress)
    monkeypatch.setattr(lower_sparse, "sparse_mm", sparse_mm)
    return calls


# -- which steps are sparse -----------------------------------------------------------------------------
def test_pruned_fp16_matmuls_get_the_sparse_kinds(gpu_target):
    p = compiled(gpu_target, ffn_model()[0])
    assert sparse_kinds(p) == ["sparse_dot", "sparse_gemm_bias", "sparse_gemm_epilogue"]


@pytest.mark.parametrize("why", ["dense weight", "float32", "k not a multiple of 16"])
def test_what_stays_dense(gpu_target, why):
    if why == "dense weight":
        model, dtype = ffn_model(w1=randn(64, 128, scale=0.1))[0], "fp16"
    elif why == "float32":
        model, dtype = ffn_model()[0], "fp32"
    else:
        model, dtype = ffn_model(d=72)[0], "fp16"  # 72 = 4 x 18: 2:4 holds, cuSPARSELt's tile does not
    kinds = sparse_kinds(compiled(gpu_target, model, dtype))
    if why == "dense weight":
        assert kinds == ["gemm_bias", "sparse_dot", "sparse_gemm_epilogue"]
    elif why == "float32":
        assert not any(k.startswith("sparse") for k in kinds)
    else:  # w1 [72, 128] and w3 [72, 32] have K = 72; w2 [128, 72] has N = 72
        assert not any(k.startswith("sparse") for k in kinds)


def test_a_program_pruned_by_prune_2_4_gets_the_sparse_kinds(gpu_target):
    from fusegraph.passes.prune_2_4 import pruned_products

    p = fusegraph.prune_2_4(fusegraph.parse_onnx(ffn_model(w1=randn(64, 128, scale=0.1))[0]))
    assert [r.status for r in pruned_products(p)] == ["pruned", "found", "found"]  # w1 dense, w2 and w3 2:4
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert sparse_kinds(p) == ["sparse_dot", "sparse_gemm_bias", "sparse_gemm_epilogue"]


# -- results --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_sparse_steps_with_the_timed_choice(gpu_target, dtype):
    model, x = ffn_model()
    p = compiled(gpu_target, model, dtype)
    tol = 2e-2 if dtype == "fp16" else 6e-2
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)
    chosen = {k: v["name"] for k, v in p.executable.tuning.items() if k.startswith("2:4")}
    assert len(chosen) == 3 and set(chosen.values()) <= {"library", "cusparselt"}


@pytest.mark.parametrize("rows", [5, 8, 33])  # 10, 16 and 66 rows: padded to 8 or not
def test_sparse_steps_forced(gpu_target, force_sparse, rows):
    model, x = ffn_model(rows=rows)
    p = compiled(gpu_target, model)
    assert_close(p.run(x), run_ort(model, x), rtol=2e-2, atol=2e-2)
    assert {v["name"] for k, v in p.executable.tuning.items() if k.startswith("2:4")} == {"cusparselt"}
    if gpu_target.device is not None:  # the stand-in saw each sparse product: W^T [N, K], x^T [K, M]
        m = -(-2 * rows // 8) * 8
        assert set(force_sparse) == {((128, 64), (64, m), True), ((64, 128), (128, m), False), ((32, 64), (64, m), False)}


def test_weights_are_compressed_once_not_per_run(gpu_target, force_sparse):
    """Each sparse step compresses its weight at its first call; later runs only multiply."""
    if gpu_target.device is None:
        pytest.skip("counts the stand-in's calls (Triton's interpreter)")
    model, x = ffn_model()
    p = compiled(gpu_target, model)
    compressed, products = len(force_sparse.compressed), len(force_sparse)
    assert sorted(force_sparse.compressed) == [(32, 64), (64, 128), (128, 64)]
    for _ in range(3):
        p.run(x)
    assert len(force_sparse.compressed) == compressed
    assert len(force_sparse) == products + 3 * 3  # one product per sparse step per run


# -- the kernel itself, on the GPU ---------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 7, 64, 4096])
@pytest.mark.parametrize("bias", [False, True])
def test_cusparselt_product_matches_dense(m, bias):
    import torch

    from fusegraph.targets.gpu.lower_sparse import SparseWeight

    k, n = 768, 3072
    w = torch.from_numpy(pruned(k, n)).half().cuda()
    x = torch.from_numpy(randn(m, k)).half().cuda()
    b = torch.from_numpy(randn(n)).half().cuda() if bias else None
    got = SparseWeight()(x, w, b)
    want = x.float() @ w.float() + (b.float() if bias else 0)
    assert got.shape == (m, n) and got.is_contiguous()
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


# -- sparse constants from ONNX (ops/sparse.py): made dense on the device ---------------------------------
def test_sparse_initializers_on_the_gpu_target(gpu_target):
    from tests.sparse.test_sparse_onnx import model_with_sparse, sparse_proto

    w = fusegraph.make_sparse((48, 40), density=0.1, seed=7)
    x = {"a": randn(2, 3, 48), "x": randn(48, 40)}
    nodes = [helper.make_node("MatMul", ["a", "w"], ["y"]), helper.make_node("Add", ["x", "w"], ["s"])]
    model = model_with_sparse(nodes, x, ["y", "s"], [sparse_proto("w", w)])
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(optimize=False))  # sparse_to_dense kept, run on the device
    assert {"sparse_matmul", "sparse_to_dense"} <= {s.kind for s in p.executable.plan.steps}
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)

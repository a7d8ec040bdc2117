"""Sparse weights: make_sparse / prune_2_4 / is_2_4, and the cpu target's sparse product against
numpy (every tile path: one row, a padded tile of 8, tiles of 64, empty columns) and through a
compiled MatMul against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ArgumentError
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(0)


def test_make_sparse_density_and_structure():
    w = fusegraph.make_sparse((256, 128), density=0.3, seed=1)
    assert w.dtype == np.float32 and abs(np.count_nonzero(w) / w.size - 0.3) < 0.02
    s = fusegraph.make_sparse((64, 32), density=0.5, structure="2:4")
    assert fusegraph.is_2_4(s) and np.count_nonzero(s) == s.size // 2
    with pytest.raises(ArgumentError):
        fusegraph.make_sparse((4, 4), density=1.5)


def test_prune_2_4_keeps_the_two_largest_of_every_four():
    w = rng.standard_normal((8, 3)).astype(np.float32)
    p = fusegraph.prune_2_4(w)
    assert fusegraph.is_2_4(p) and not fusegraph.is_2_4(w)
    for g in range(2):
        for n in range(3):
            block, kept = np.abs(w[4 * g:4 * g + 4, n]), p[4 * g:4 * g + 4, n]
            assert set(np.flatnonzero(kept)) == set(np.argsort(block)[2:])
    with pytest.raises(ArgumentError, match="multiple of 4"):
        fusegraph.prune_2_4(np.ones((6, 2), np.float32))


@pytest.mark.parametrize("m, k", [(1, 96), (7, 96), (8, 96), (33, 96), (130, 96), (33, 600), (1, 600), (40, 1500)])
def test_sparse_product_matches_numpy(m, k):  # k = 1500: three row blocks of 512
    target_or_skip("cpu")  # needs the C compiler the cpu target uses
    from fusegraph.targets.cpu.kernels.sparse import SparseWeights

    n = 200
    w = fusegraph.make_sparse((k, n), density=0.2, seed=m)
    w[:, 5] = 0  # an empty column
    x = rng.standard_normal((m, k)).astype(np.float32)
    exact = x.astype(np.float64) @ w
    bound = k * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w))  # float32 summation of k terms
    for threads in (1, 2):
        got = SparseWeights(w, threads)(x)
        assert (np.abs(got - exact) <= bound).all()
        assert (got[:, 5] == 0).all()
    out = np.full((m, n), np.nan, np.float32)  # into a caller's buffer
    SparseWeights(w, 2)(x, out)
    assert (np.abs(out - exact) <= bound).all()


def _matmul_model(w, m):
    x = {"x": rng.standard_normal((2, m, w.shape[0])).astype(np.float32)}
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], x, ["y"], initializers={"w": w}), x


@pytest.mark.parametrize("picked", [True, False])
def test_a_compiled_matmul_with_sparse_weights_is_right_either_way(monkeypatch, picked):
    target = target_or_skip("cpu")
    from fusegraph.targets.cpu.kernels import sparse

    chosen = []
    monkeypatch.setattr(sparse, "choose", lambda dense, kernel, lens: (chosen.append(lens) or picked, 0, 0))
    model, x = _matmul_model(fusegraph.make_sparse((64, 48), density=0.1), 5)
    got = fusegraph.parse_onnx(model).compile(target).run(x)[0]
    import onnxruntime as ort

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (lens,) = chosen  # the lowering timed the sparse kernel once, on the real rows (flattened or not)
    assert np.prod(lens[:-1]) == 10 and lens[-1] == 64


def test_dense_weights_are_not_tried(monkeypatch):
    target = target_or_skip("cpu")
    from fusegraph.targets.cpu.kernels import sparse

    monkeypatch.setattr(sparse, "choose", lambda *a: pytest.fail("a dense weight was timed as sparse"))
    model, x = _matmul_model(rng.standard_normal((16, 8)).astype(np.float32), 3)
    fusegraph.parse_onnx(model).compile(target).run(x)


@pytest.mark.parametrize("picked", [True, False])
@pytest.mark.parametrize("residual", [False, True])
def test_a_matmul_with_an_epilogue_and_sparse_weights(monkeypatch, picked, residual):
    """MatMul + bias + ReLU [+ residual]: the cpu target's dot_epilogue, sparse or dense by timing."""
    target = target_or_skip("cpu")
    from fusegraph.targets.cpu.kernels import sparse

    chosen = []
    monkeypatch.setattr(sparse, "choose", lambda dense, kernel, lens: (chosen.append(lens) or picked, 0, 0))
    w = fusegraph.make_sparse((64, 48), density=0.1, seed=9)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"])]
    x = {"x": rng.standard_normal((2, 5, 64)).astype(np.float32)}
    if residual:
        nodes.append(helper.make_node("Add", ["r", "s"], ["y"]))
        x["s"] = rng.standard_normal((2, 5, 48)).astype(np.float32)
    out = "y" if residual else "r"
    model = make_model(nodes, x, [out], initializers={"w": w, "b": rng.standard_normal(48).astype(np.float32)})
    p = fusegraph.parse_onnx(model).compile(target)
    assert any(i.op.name == "dot_epilogue" for i in p.main.instructions)
    import onnxruntime as ort

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(p.run(x)[0], want, rtol=1e-5, atol=1e-5)
    assert len(chosen) == 1  # the epilogue's product was offered the sparse kernel, timed once

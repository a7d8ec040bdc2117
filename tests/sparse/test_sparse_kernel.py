"""The cpu sparse kernel (kernels/sparse.py, sparse_c.py) on adversarial weights and shapes: empty and
all-dense rows and columns, a lone nonzero, no nonzeros, sizes off every vector width and panel
height, K spanning several row slices; against float64 numpy within float32's summation bound, and
bit for bit the same on one thread and on two."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from tests.util import target_or_skip


def weights(pattern: str, k: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(k * 1000 + n)
    w = fusegraph.make_sparse((k, n), density=0.05 if "dense" in pattern else 0.3, seed=k + n)
    if pattern == "empty rows and columns":
        w[[0, k // 2, k - 1], :] = 0
        w[:, [0, n - 1]] = 0
    elif pattern == "a dense row":
        w[k // 3, :] = rng.standard_normal(n)
    elif pattern == "a dense column":
        w[:, n // 2] = rng.standard_normal(k)
    elif pattern == "one nonzero":
        w[...] = 0
        w[k - 1, n - 1] = 1.5
    elif pattern == "no nonzeros":
        w[...] = 0
    elif pattern == "all dense":
        w = rng.standard_normal((k, n)).astype(np.float32)
    elif pattern == "first rows only":  # every later row slice empty
        w[min(3, k):, :] = 0
    return w


PATTERNS = ["random", "empty rows and columns", "a dense row", "a dense column", "one nonzero", "no nonzeros",
            "all dense", "first rows only"]
# M: one row, fewer than a vector, one more than a vector or panel, several panels, the last one short;
# K and N off the vector width; K = 1100 and 1500 span several row slices
SHAPES = [(1, 17, 33), (2, 5, 1), (15, 300, 31), (17, 33, 70), (63, 1100, 33), (65, 129, 64), (129, 1500, 40)]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_sparse_kernel_on_adversarial_weights(pattern, m, k, n):
    target_or_skip("cpu")  # needs the C compiler the cpu target uses
    from fusegraph.targets.cpu.kernels.sparse import SparseWeights

    w = weights(pattern, k, n)
    x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
    exact = x.astype(np.float64) @ w
    bound = k * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w))  # float32 summation of k terms
    one, two = SparseWeights(w, 1)(x), SparseWeights(w, 2)(x)
    assert one.shape == (m, n)
    assert (np.abs(one - exact) <= bound).all()
    assert np.array_equal(one, two)  # the order of every sum is the packing's, not the threads'
    empty = ~w.any(axis=0)
    assert (one[:, empty] == 0).all()


def test_segments_and_slices_cover_every_nonzero_once():
    """The packing's segment table: every nonzero in exactly one segment, the segment of its column's
    block, row slice and column, in ascending k."""
    target_or_skip("cpu")
    from fusegraph.targets.cpu.kernels import sparse_c
    from fusegraph.targets.cpu.kernels.sparse import SparseWeights

    k, n = 1500, 70
    w = weights("random", k, n)
    s = SparseWeights(w, 1)
    assert s.nkb > 1 and s.seg[-1] == s.nnz == np.count_nonzero(w)
    kb = s.kb
    for i in range(len(s.seg) - 1):
        block, c = divmod(i, sparse_c.NB)
        b, slice_ = divmod(block, s.nkb)
        rows = s.rows[s.seg[i]:s.seg[i + 1]]
        col = b * sparse_c.NB + c
        assert (np.diff(rows) > 0).all() and ((rows // kb) == slice_).all() or rows.size == 0
        if col < n:
            want = np.flatnonzero(w[slice_ * kb:(slice_ + 1) * kb, col]) + slice_ * kb
            assert np.array_equal(rows, want)
            assert np.array_equal(s.vals[s.seg[i]:s.seg[i + 1]], w[want, col])
        else:
            assert rows.size == 0


@pytest.mark.parametrize("isa", [("-mno-avx512f",), ("-mno-avx512f", "-mno-avx2", "-mno-fma")])
def test_every_vector_path_of_the_kernel(monkeypatch, isa):
    """The AVX2 + FMA and the plain-vector paths (built here by switching AVX-512, then AVX2, off),
    on the shapes and weights above that cross every edge of their narrower panels."""
    target_or_skip("cpu")
    from fusegraph.targets.cpu.codegen import build
    from fusegraph.targets.cpu.kernels import sparse

    monkeypatch.setattr(sparse, "build_library", lambda srcs: build.build_library(srcs, flags=(*build.FLAGS, *isa)))
    sparse._library.cache_clear()
    try:
        assert sparse._library().width == 8
        for (m, k, n), pattern in zip(SHAPES, PATTERNS):
            w = weights(pattern, k, n)
            x = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
            exact = x.astype(np.float64) @ w
            bound = k * np.finfo(np.float32).eps * (np.abs(x) @ np.abs(w))
            one, two = sparse.SparseWeights(w, 1)(x), sparse.SparseWeights(w, 2)(x)
            assert (np.abs(one - exact) <= bound).all() and np.array_equal(one, two)
    finally:
        sparse._library.cache_clear()  # the next caller builds for this CPU again

"""Native programs (targets/cpu/native_program.py), op by op: which ops join a region as generated C
or a table-driven copy (reductions, moments, small pooling, shared keys, run-time gathers and
scatters), each against the ref target and the same executable run step by step."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph.targets.cpu.native_program import (
    GATHER_ND,
    KERNEL,
    PRIMITIVE,
    SCATTER_ELEMENTS,
    SCATTER_ND,
    TAKE,
    Region,
)
from tests.targets.cpu.test_native_program import _compile, _kinds, n, rng
from tests.util import make_model, target_or_skip


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"])
def test_a_lone_reduction_is_generated_c(op_type):
    # nothing to fuse it with (fuse_reduce needs two ops): the fused reductions' generator on its own
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    nodes = [n(op_type, ["x", "axes"], ["out"], keepdims=0)]
    model = make_model(nodes, {"x": x}, ["out"], {"axes": np.array([2], np.int64)}, opset=18)
    p, ref = _compile(model), _compile(model, "ref")
    np.testing.assert_allclose(p.run({"x": x})[0], ref.run({"x": x})[0], rtol=1e-5, atol=1e-6)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and _kinds(row[0]) == {KERNEL}


def test_a_column_of_a_concat_and_a_transposed_residual_go_through_tables():
    # ViT's class token: a [1, C, 1] part of a [1, C, T+1] concat (one element a row: no memcpy
    # fits), and a transposed residual added by a product's epilogue: both tables of offsets
    x = rng.standard_normal((1, 4, 5)).astype(np.float32)
    init = {"cls": rng.standard_normal((1, 1, 4)).astype(np.float32),
            "w": (rng.standard_normal((4, 4)) * 0.3).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}
    nodes = [n("Transpose", ["cls"], ["ct"], perm=[0, 2, 1]), n("Sin", ["x"], ["s"]),
             n("Concat", ["ct", "s"], ["c"], axis=2), n("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
             n("MatMul", ["t", "w"], ["m"]), n("Add", ["m", "b"], ["mb"]), n("Add", ["mb", "t"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, ref = _compile(model), _compile(model, "ref")
    for k in range(2):
        f = {"x": x * (k + 1)}
        np.testing.assert_allclose(p.run(f)[0], ref.run(f)[0], rtol=1e-5, atol=1e-6)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and set(TAKE.values()) & _kinds(row[0])


_MOMENTS = """module main
  %0 = @param[param_name='x'] : float32[2,16,5]
  %1 = transpose[perm=(0, 2, 1)](%0) : float32[2,5,16]@[80,1,5]
  %2 = moments[axes=(2,), centered=CENTERED](%1) : (float32[2,5,1], float32[2,5,1])
  %3 = get_tuple_elem[index=0](%2) : float32[2,5,1]
  %4 = get_tuple_elem[index=1](%2) : float32[2,5,1]
  %5 = sin(%3) : float32[2,5,1]
  %6 = cos(%4) : float32[2,5,1]
  @return(%5, %6)
"""


@pytest.mark.parametrize("centered", [True, False])
def test_moments_are_generated_reductions_into_their_tuple(centered):
    # moments of a transposed tensor (Swin's LayerNorm after its patch embedding, which no
    # fused_reduce takes): two generated reductions reading it in place and writing its tuple's
    # planned buffers, one region with the rest
    text = _MOMENTS.replace("CENTERED", str(centered))
    p, ref = fusegraph.Program.from_text(text), fusegraph.Program.from_text(text)
    p.compile(target_or_skip("cpu"))
    ref.compile(fusegraph.get_target("ref"))
    assert any(i.op.name == "moments" for i in p.main.instructions)
    x = rng.standard_normal((2, 16, 5)).astype(np.float32)
    for k in range(2):
        for g, w in zip(p.run({"x": x + k}), ref.run({"x": x + k}), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and _kinds(row[0]) == {KERNEL}


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3], strides=[2], pads=[1, 1]),
                                   dict(kernel_shape=[4], strides=[3], pads=[0, 2], ceil_mode=1, dilations=[2])])
def test_a_small_max_pooling_of_a_signal_is_generated_c(attrs):
    # (the second, dilated, oneDNN runs with a jit kernel: it stays oneDNN's, the results the same)
    # oneDNN has only its plain C loop for N, C, W (an ECG's max pooling: 67 us): a tap table, as a
    # small convolution's; a NaN in a window is the result there, as the reference's maximum keeps it
    x = rng.standard_normal((2, 6, 31)).astype(np.float32)
    model = make_model([n("MaxPool", ["x"], ["out"], **attrs)], {"x": x}, ["out"])
    p, ref = _compile(model), _compile(model, "ref")
    bad = x.copy()
    bad[1, 2, 7] = np.nan
    for f in ({"x": x}, {"x": bad}, {"x": -np.abs(x)}):
        np.testing.assert_array_equal(p.run(f)[0], ref.run(f)[0])
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and (_kinds(row[0]) == {KERNEL} or "dilations" in attrs)


def test_a_product_with_a_key_shared_by_the_heads_copies_it_into_scratch(monkeypatch):
    # multi-query attention: one key for every head (a broadcast, stride 0, that oneDNN reads from a
    # standard copy): the copy goes to this thread's scratch, in the region and in a step alike (the
    # product's memory objects stay bound to it: a profile's step-by-step runs between native ones)
    q = rng.standard_normal((1, 4, 16, 8)).astype(np.float32)
    k = rng.standard_normal((1, 1, 8, 16)).astype(np.float32)
    nodes = [n("Sin", ["k"], ["ks"]), n("Expand", ["ks", "shape"], ["kb"]), n("MatMul", ["q", "kb"], ["s"]),
             n("Tanh", ["s"], ["out"])]
    model = make_model(nodes, {"q": q, "k": k}, ["out"], {"shape": np.array([1, 4, 8, 16], np.int64)})
    p, ref = _compile(model), _compile(model, "ref")
    feeds = [{"q": q * (j + 1), "k": k - j} for j in range(3)]
    got = [p.run(f)[0] for f in feeds]
    for g, f in zip(got, feeds):
        np.testing.assert_allclose(g, ref.run(f)[0], rtol=1e-5, atol=1e-6)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and PRIMITIVE in _kinds(row[0])
    p.executable.profile(feeds[1], runs=1, warmup=0)  # the steps one by one, then native again
    for g, f in zip(got, feeds):
        np.testing.assert_array_equal(p.run(f)[0], g)
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    steps = _compile(model)
    np.testing.assert_array_equal(steps.run(feeds[2])[0], got[2])


def test_a_gather_nd_by_run_time_indices_joins_the_region_and_checks_its_range():
    # a graph network's edge lookup (the edges: a graph input, staged): one C call; an index out of
    # range stops the region there and the step raises its error
    x = rng.standard_normal((6, 5, 4)).astype(np.float32)
    idx = np.array([[0, 1], [5, -1], [-6, 4], [3, 0]], np.int64)
    model = make_model([n("GatherND", ["x", "i"], ["g"]), n("Tanh", ["g"], ["out"])], {"x": x, "i": idx}, ["out"])
    p, ref = _compile(model), _compile(model, "ref")
    for f in ({"x": x, "i": idx}, {"x": -x, "i": idx[::-1].copy()}):
        np.testing.assert_allclose(p.run(f)[0], ref.run(f)[0], rtol=1e-5, atol=1e-6)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and GATHER_ND in _kinds(row[0])
    with pytest.raises(fusegraph.errors.ExecutionError):
        p.run({"x": x, "i": np.array([[0, 1], [6, 0], [0, 0], [1, 1]], np.int64)})
    np.testing.assert_allclose(p.run({"x": x, "i": idx})[0], ref.run({"x": x, "i": idx})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_a_scatter_nd_joins_the_region_applying_its_updates_in_order(reduction):
    # a graph network's message aggregation: duplicate targets reduced in index order, as numpy's
    # ufunc.at does (the same bits); a NaN update stays NaN under max and min; out of range raises
    x = rng.standard_normal((6, 5, 4)).astype(np.float32)
    idx = np.array([[0, 1], [5, -1], [0, 1], [3, 0], [-6, 1]], np.int64)
    upd = rng.standard_normal((5, 4)).astype(np.float32)
    upd[3, 2] = np.nan
    attrs = {} if reduction == "none" else {"reduction": reduction}
    model = make_model([n("Neg", ["x"], ["s"]), n("ScatterND", ["s", "i", "u"], ["out"], **attrs)],
                       {"x": x, "i": idx, "u": upd}, ["out"], opset=18)
    p, ref = _compile(model), _compile(model, "ref")
    for f in ({"x": x, "i": idx, "u": upd}, {"x": -x, "i": idx[::-1].copy(), "u": upd * 2}):
        np.testing.assert_array_equal(p.run(f)[0], ref.run(f)[0])
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and SCATTER_ND in _kinds(row[0])
    with pytest.raises(fusegraph.errors.ExecutionError):
        p.run({"x": x, "i": np.array([[0, 1], [6, 0], [0, 0], [1, 1], [2, 2]], np.int64), "u": upd})


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_a_scatter_elements_joins_the_region_applying_its_updates_in_order(reduction):
    x = rng.standard_normal((3, 6, 4)).astype(np.float32)
    idx = rng.integers(-6, 6, (3, 5, 4)).astype(np.int64)  # duplicates along the axis, negatives
    upd = rng.standard_normal((3, 5, 4)).astype(np.float32)
    attrs = {} if reduction == "none" else {"reduction": reduction}
    model = make_model([n("Neg", ["x"], ["s"]), n("ScatterElements", ["s", "i", "u"], ["out"], axis=1, **attrs)],
                       {"x": x, "i": idx, "u": upd}, ["out"], opset=18)
    p, ref = _compile(model), _compile(model, "ref")
    for f in ({"x": x, "i": idx, "u": upd}, {"x": -x, "i": idx[:, ::-1].copy(), "u": upd * 2}):
        np.testing.assert_array_equal(p.run(f)[0], ref.run(f)[0])
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and SCATTER_ELEMENTS in _kinds(row[0])
    bad = idx.copy()
    bad[1, 2, 3] = 6
    with pytest.raises(fusegraph.errors.ExecutionError):
        p.run({"x": x, "i": bad, "u": upd})


def test_a_scatter_elements_by_indices_broadcast_along_the_row_copies_them_dense_first():
    # torch's scatter_add of a message matrix: dst.unsqueeze(1).expand(-1, F) (an Expand: a stride-0
    # view) was left to numpy's ufunc.at
    x = rng.standard_normal((7, 5)).astype(np.float32)
    dst = rng.integers(-7, 7, (9, 1)).astype(np.int64)
    msg = rng.standard_normal((9, 5)).astype(np.float32)
    shape = np.array([9, 5], np.int64)
    model = make_model([n("Expand", ["d", "shape"], ["i"]), n("Neg", ["x"], ["s"]),
                        n("ScatterElements", ["s", "i", "m"], ["out"], axis=0, reduction="add")],
                       {"x": x, "d": dst, "m": msg}, ["out"], {"shape": shape}, opset=18)
    p, ref = _compile(model), _compile(model, "ref")
    for f in ({"x": x, "d": dst, "m": msg}, {"x": -x, "d": dst[::-1].copy(), "m": msg * 2}):
        np.testing.assert_array_equal(p.run(f)[0], ref.run(f)[0])
    regions = [r[0] for r in p.executable.main.thread_plan()[0] if isinstance(r[0], Region)]
    assert any(SCATTER_ELEMENTS in _kinds(r) for r in regions)
    with pytest.raises(fusegraph.errors.ExecutionError):
        p.run({"x": x, "d": np.full((9, 1), 7, np.int64), "m": msg})


@pytest.mark.parametrize("axis", [1, 2])
def test_a_gather_elements_by_constant_indices_is_a_table(axis, monkeypatch):
    # DeBERTa's relative-position lookup: a literal index seen through a reshape and a broadcast
    x = rng.standard_normal((2, 5, 5)).astype(np.float32)
    idx = rng.integers(-5, 5, (1, 5, 5)).astype(np.int64)
    model = make_model([n("Neg", ["x"], ["s"]), n("Expand", ["i", "shape"], ["ib"]),
                        n("GatherElements", ["s", "ib"], ["out"], axis=axis)],
                       {"x": x}, ["out"], {"i": idx, "shape": np.array([2, 5, 5], np.int64)}, opset=18)
    p = _compile(model)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and TAKE[4] in _kinds(row[0])
    got = p.run({"x": x})[0]
    np.testing.assert_array_equal(got, _compile(model, "ref").run({"x": x})[0])
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    np.testing.assert_array_equal(got, _compile(model).run({"x": x})[0])


def test_a_gather_elements_by_a_constant_index_out_of_range_raises_at_run():
    x = rng.standard_normal((2, 5)).astype(np.float32)
    model = make_model([n("GatherElements", ["x", "i"], ["out"], axis=1)], {"x": x}, ["out"],
                       {"i": np.array([[0, 5], [1, 2]], np.int64)}, opset=18)
    with pytest.raises(fusegraph.errors.ExecutionError):
        _compile(model).run({"x": x})


def test_a_softmax_over_one_position_is_pointwise_c_nan_and_all():
    # x - x must stay in the generated C (NaN for a non-finite x): no fast-math folding of it
    x = rng.standard_normal((4, 2, 1, 1)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 0] = np.inf, -np.inf, np.nan
    model = make_model([n("Neg", ["x"], ["s"]), n("Softmax", ["s"], ["out"], axis=3)], {"x": x}, ["out"], opset=18)
    p = _compile(model)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region)
    np.testing.assert_array_equal(p.run({"x": x})[0], _compile(model, "ref").run({"x": x})[0])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float32])
def test_a_gather_elements_by_run_time_indices_joins_the_region_and_checks_its_range(dtype):
    # an SSD head's boxes of its top scores: indices broadcast along the row (copied dense first)
    from fusegraph.targets.cpu.native_program import GATHER_ELEMENTS

    x = (rng.standard_normal((2, 9, 4)) * 10).astype(dtype)
    idx = rng.integers(-9, 9, (2, 5, 1)).astype(np.int64)
    model = make_model([n("Neg", ["x"], ["s"]), n("Expand", ["i", "shape"], ["ib"]),
                        n("GatherElements", ["s", "ib"], ["out"], axis=1)],
                       {"x": x, "i": idx}, ["out"], {"shape": np.array([2, 5, 4], np.int64)}, opset=18)
    p, ref = _compile(model), _compile(model, "ref")
    regions = [r[0] for r in p.executable.main.thread_plan()[0] if isinstance(r[0], Region)]
    assert any(GATHER_ELEMENTS in _kinds(r) for r in regions)
    for f in ({"x": x, "i": idx}, {"x": -x, "i": idx[::-1].copy()}):
        np.testing.assert_array_equal(p.run(f)[0], ref.run(f)[0])
    with pytest.raises(fusegraph.errors.ExecutionError):
        p.run({"x": x, "i": np.full((2, 5, 1), 9, np.int64)})

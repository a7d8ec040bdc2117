"""Indices at run time: in [-n, n) they work as ONNX says (negative ones count from the end), outside
it they are the op's ExecutionError naming the op and the input, on ref and cpu, for every indexing
op; OneHot's out-of-range index is defined (an all-off row) and stays so."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from fusegraph.errors import ExecutionError, FusegraphError
from tests.util import make_model, run_fusegraph, run_ort, target_or_skip

n = helper.make_node
F, I64 = np.float32, np.int64
DATA = np.arange(12, dtype=F).reshape(3, 4)  # every indexed axis has length 4
TABLE = np.random.default_rng(0).standard_normal((4, 6)).astype(F)

# op -> index value -> (nodes, inputs, initializers)
INDEXING = {
    "Gather": lambda i: ([n("Gather", ["d", "i"], ["y"], axis=1)], {"d": DATA, "i": np.array([i, 0], I64)}, None),
    "embedding": lambda i: ([n("Gather", ["t", "i"], ["y"])], {"i": np.array([[1, i], [0, 2]], I64)}, {"t": TABLE}),
    "GatherElements": lambda i: ([n("GatherElements", ["d", "i"], ["y"], axis=1)],
                                 {"d": DATA, "i": np.full((3, 2), i, I64)}, None),
    "GatherND": lambda i: ([n("GatherND", ["d", "i"], ["y"])], {"d": DATA, "i": np.array([[0, i], [1, 1]], I64)}, None),
    "ScatterElements": lambda i: ([n("ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction="add")],
                                  {"d": DATA, "i": np.full((3, 1), i, I64), "u": np.ones((3, 1), F)}, None),
    "ScatterND": lambda i: ([n("ScatterND", ["d", "i", "u"], ["y"])],
                            {"d": DATA, "i": np.array([[0, i]], I64), "u": np.ones(1, F)}, None),
}
ERROR = r"input 'indices' holds {}( at position \d of its last axis)?, outside \[-4, 3\]"


def model_of(op: str, index: int):
    nodes, inputs, inits = INDEXING[op](index)
    return make_model(nodes, inputs, ["y"], inits, opset=18), inputs


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("index", [-1, -4])
@pytest.mark.parametrize("op", sorted(INDEXING))
def test_negative_indices_in_range_count_from_the_end(op, index, target):
    model, inputs = model_of(op, index)
    np.testing.assert_array_equal(run_fusegraph(model, inputs, target_or_skip(target))[0], run_ort(model, inputs)[0])


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("index", [4, 9, -5])
@pytest.mark.parametrize("op", sorted(INDEXING))
def test_indices_out_of_range_are_the_ops_execution_error(op, index, target):
    # -5 is the case numpy would wrap silently (to -1, the last position)
    model, inputs = model_of(op, index)
    with pytest.raises(FusegraphError):  # ONNX Runtime refuses them too
        try:
            run_ort(model, inputs)
        except Exception as e:  # onnxruntime's own exception types
            raise FusegraphError(str(e)) from e
    with pytest.raises(ExecutionError, match=ERROR.format(index)):
        run_fusegraph(model, inputs, target_or_skip(target))


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_the_error_names_the_op(target):
    model, inputs = model_of("GatherElements", -5)
    with pytest.raises(ExecutionError, match=r"^gather_elements\[axis=1\]: input 'indices'"):
        run_fusegraph(model, inputs, target_or_skip(target))


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_one_hot_out_of_range_is_an_all_off_row(target):
    idx = np.array([1, -1, 3, -4, -3], I64)  # depth 3: 3 and -4 are out of range, ONNX's all-off rows
    nodes = [n("OneHot", ["i", "d", "v"], ["y"])]
    model = make_model(nodes, {"i": idx}, ["y"], {"d": np.array(3, I64), "v": np.array([0, 1], F)})
    got = run_fusegraph(model, {"i": idx}, target_or_skip(target))[0]
    np.testing.assert_array_equal(got, run_ort(model, {"i": idx})[0])
    assert not got[[2, 3]].any()


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_tensor_scatter_writes_inside_the_cache_or_fails(target):
    cache, upd = np.zeros((2, 5, 3), F), np.ones((2, 2, 3), F)
    nodes = [n("TensorScatter", ["c", "u", "w"], ["y"], axis=1)]
    for at, ok in (([0, 3], True), ([0, 4], False), ([-1, 0], False)):  # 4 + 2 passes the end
        w = np.array(at, I64)
        model = make_model(nodes, {"c": cache, "u": upd, "w": w}, ["y"], opset=24)
        feeds = {"c": cache, "u": upd, "w": w}
        if ok:
            got = run_fusegraph(model, feeds, target_or_skip(target))[0]
            assert got[1, 3:].all() and not got[1, :3].any() and got[0, :2].all()
        else:
            with pytest.raises(ExecutionError, match="tensor_scatter.*'write_indices'"):
                run_fusegraph(model, feeds, target_or_skip(target))

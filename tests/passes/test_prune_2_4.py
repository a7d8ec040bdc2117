"""prune_2_4 of a Program (passes/prune_2_4.py): which product weights become 2:4, which stay as they
were, the input program untouched, and the outputs numpy's products with the pruned weights on the
ref and cpu targets."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.errors import ArgumentError, FusegraphError
from fusegraph.passes.prune_2_4 import PRUNED_KEY, pruned_products
from fusegraph.sparsity import prune_2_4_array

rng = np.random.default_rng(24)
W = {
    "W1": rng.standard_normal((16, 8)),             # MatMul, K 16: pruned
    "W2": rng.standard_normal((12, 8)),             # Gemm transB [N, K], K 8: pruned
    "B2": rng.standard_normal(12),
    "W3": rng.standard_normal((12, 8)),             # named in skip_names: dense
    "W4": prune_2_4_array(rng.standard_normal((8, 8))),  # 2:4 already: found
    "W5": rng.standard_normal((8, 6)),              # pruned
    "W6": rng.standard_normal((6, 4)),              # K 6: dense
}
W = {k: v.astype(np.float32) for k, v in W.items()}
WI = rng.integers(-3, 4, (8, 4)).astype(np.int32)   # an integer weight: dense


def model():
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="mm1"),
             helper.make_node("Gemm", ["h1", "W2", "B2"], ["h2"], name="gemm2", transB=1),
             helper.make_node("MatMul", ["h2", "W3"], ["h3"], name="mm3"),
             helper.make_node("MatMul", ["h3", "W4"], ["h4"], name="mm4"),
             helper.make_node("MatMul", ["h4", "W5"], ["h5"], name="mm5"),
             helper.make_node("MatMul", ["h5", "W6"], ["y"], name="mm6"),
             helper.make_node("MatMul", ["xi", "WI"], ["yi"], name="mm_int")]
    inits = [numpy_helper.from_array(v, k) for k, v in {**W, "WI": WI}.items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16]),
                                       helper.make_tensor_value_info("xi", TensorProto.INT32, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("yi", TensorProto.INT32, [2, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def pruned_program(**options):
    dense = fusegraph.parse_onnx(model())
    return dense, fusegraph.prune_2_4(dense, skip_names=["mm3"], min_size=0, **options)


def weights_read(program) -> dict[str, np.ndarray]:
    """The weight each product reads, by its ONNX node."""
    return {i.origin[0].name: i.inputs[1].literal for i in program.main.instructions
            if i.op.name == "dot" and i.inputs[1].is_literal}


def test_every_eligible_weight_is_pruned_and_the_others_kept():
    dense, pruned = pruned_program()
    status = {r.name: r.status for r in pruned_products(pruned)}
    assert status == {"mm1": "pruned", "gemm2": "pruned", "mm3": "skipped: skip_names", "mm4": "found",
                      "mm5": "pruned", "mm6": "skipped: K = 6 is no multiple of 4", "mm_int": "skipped: int32 weight"}
    shapes = {r.name: r.shape for r in pruned_products(pruned)}
    assert shapes["gemm2"] == [8, 12]  # as the product reads it: [K, N]
    got = weights_read(pruned)
    for name, w in [("mm1", W["W1"]), ("gemm2", W["W2"].T), ("mm5", W["W5"])]:
        assert fusegraph.is_2_4(got[name]) and not fusegraph.is_2_4(w)
        np.testing.assert_array_equal(got[name], prune_2_4_array(w))
    for name, w in [("mm3", W["W3"]), ("mm4", W["W4"]), ("mm6", W["W6"]), ("mm_int", WI)]:
        np.testing.assert_array_equal(got[name], w)
    pruned_rel = {r.name: r.weight_rel_l2 for r in pruned_products(pruned)}
    assert 0.2 < pruned_rel["mm1"] < 0.6 and pruned_rel["mm4"] == 0


def test_the_input_program_is_untouched():
    dense = fusegraph.parse_onnx(model())
    before = dense.to_text()
    fusegraph.prune_2_4(dense, min_size=0)
    assert dense.to_text() == before and PRUNED_KEY not in dense.metadata
    assert pruned_products(dense) is None
    assert not fusegraph.is_2_4(weights_read(fusegraph.parse_onnx(model()))["mm1"])


def expected(x: np.ndarray, xi: np.ndarray) -> list[np.ndarray]:
    p = prune_2_4_array
    h = (x @ p(W["W1"])) @ p(W["W2"].T) + W["B2"]
    return [((h @ W["W3"]) @ W["W4"]) @ p(W["W5"]) @ W["W6"], xi @ WI]


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_outputs_are_the_products_with_the_pruned_weights(target):
    _, pruned = pruned_program()
    pruned.compile(fusegraph.get_target(target))
    x, xi = rng.standard_normal((2, 16)).astype(np.float32), rng.integers(-3, 4, (2, 8)).astype(np.int32)
    y, yi = pruned.run({"x": x, "xi": xi})
    want_y, want_yi = expected(x.astype(np.float64), xi)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(yi, want_yi)


def test_min_size_leaves_small_weights_and_the_metadata_says_so():
    dense = fusegraph.parse_onnx(model())
    pruned = fusegraph.prune_2_4(dense)  # default min_size 1024: every weight here is smaller
    rows = pruned_products(pruned)
    assert [r.status for r in rows if r.name == "mm1"] == ["skipped: 128 elements < min_size 1024"]
    assert not any(r.status == "pruned" for r in rows)
    assert not fusegraph.is_2_4(weights_read(pruned)["mm1"])


def test_a_weight_read_by_a_product_and_another_op_stays_dense_for_the_other():
    w = rng.standard_normal((8, 8)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"), helper.make_node("Add", ["m", "W"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])], [numpy_helper.from_array(w, "W")])
    pruned = fusegraph.prune_2_4(fusegraph.parse_onnx(helper.make_model(g)), min_size=0)
    pruned.compile(fusegraph.get_target("ref"))
    x = rng.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(pruned.run({"x": x})[0], x @ prune_2_4_array(w) + w, rtol=1e-5, atol=1e-5)


def test_errors_name_the_culprit():
    dense = fusegraph.parse_onnx(model())
    with pytest.raises(ArgumentError, match="'nope'"):
        fusegraph.prune_2_4(dense, skip_names=["mm1", "nope"])
    with pytest.raises(ArgumentError, match="min_size"):
        fusegraph.prune_2_4(dense, min_size=-1)
    with pytest.raises(ArgumentError, match="for a Program"):
        fusegraph.prune_2_4(W["W1"], min_size=0)
    dense.compile(fusegraph.get_target("ref"))
    with pytest.raises(FusegraphError, match="before compiling"):
        fusegraph.prune_2_4(dense)
    np.testing.assert_array_equal(fusegraph.prune_2_4(W["W1"]), prune_2_4_array(W["W1"]))  # arrays as before

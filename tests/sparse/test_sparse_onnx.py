"""Sparse constants from ONNX (ops/sparse.py, onnx/converters/sparse.py): SparseTensorProto
initializers and Constant sparse_values stay sparse into the IR (a MatMul reads them through
`sparse_matmul`, any other reader gets them densified), the fusegraph.SparseMatMul and
com.microsoft.SparseToDenseMatMul ops, on the ref and cpu targets against numpy and ONNX Runtime,
and the cpu kernel packed straight from the values and indices."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.passes import generic_pipeline, run_pipeline
from tests.util import make_model, run_ort, target_or_skip

rng = np.random.default_rng(3)


def sparse_proto(name: str, w: np.ndarray, per_dim: bool = False):
    flat = np.flatnonzero(w)
    idx = np.stack(np.unravel_index(flat, w.shape), axis=1) if per_dim else flat
    return helper.make_sparse_tensor(numpy_helper.from_array(w.reshape(-1)[flat], name),
                                     numpy_helper.from_array(idx.astype(np.int64), name + "_indices"), list(w.shape))


def model_with_sparse(nodes, x, outputs, sparse, dense=None, domains=None):
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in x.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    inits = [numpy_helper.from_array(v, k) for k, v in (dense or {}).items()]
    g = helper.make_graph(nodes, "g", inputs, outs, initializer=inits, sparse_initializer=sparse)
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in (domains or ())]
    return helper.make_model(g, opset_imports=opsets, ir_version=8)  # (ORT builds that read IR <= 8 too)


def ops_of(p):
    return [i.op.name for i in p.main.instructions if not i.op.name.startswith("@")]


def compiled(model, target="ref"):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip(target) if target == "cpu" else fusegraph.get_target(target))
    return p


@pytest.mark.parametrize("per_dim", [False, True])
@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_a_sparse_initializer_is_read_sparse_by_matmul(per_dim, target):
    w = fusegraph.make_sparse((64, 40), density=0.1, seed=1)
    x = {"x": rng.standard_normal((2, 3, 64)).astype(np.float32)}
    model = model_with_sparse([helper.make_node("MatMul", ["x", "w"], ["y"])], x, ["y"],
                              [sparse_proto("w", w, per_dim)])
    parsed = fusegraph.parse_onnx(model)
    assert "sparse_matmul" in ops_of(parsed) and "dot" not in ops_of(parsed)
    p = compiled(model, target)
    assert ops_of(p) == ["sparse_matmul"]  # the dense form was never made
    got = p.run(x)[0]
    np.testing.assert_allclose(got, x["x"].astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, run_ort(model, x)[0], rtol=1e-5, atol=1e-5)


def test_other_readers_get_the_dense_value():
    w = fusegraph.make_sparse((8, 6), density=0.3, seed=2)
    x = {"x": rng.standard_normal((8, 6)).astype(np.float32), "a": rng.standard_normal((3, 8)).astype(np.float32)}
    nodes = [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("MatMul", ["a", "w"], ["y"])]
    model = model_with_sparse(nodes, x, ["s", "y"], [sparse_proto("w", w)])
    p = compiled(model)  # the ref target keeps sparse_to_dense and computes it
    assert ops_of(p) == ["sparse_to_dense", "add", "sparse_matmul"]
    optimized = fusegraph.parse_onnx(model)
    run_pipeline(optimized, generic_pipeline())
    assert ops_of(optimized) == ["add", "sparse_matmul"]  # the add's operand folded into a dense literal
    for got, want in zip(p.run(x), run_ort(model, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_constant_sparse_value_is_read_sparse():
    w = fusegraph.make_sparse((16, 5), density=0.2, seed=3)
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    nodes = [helper.make_node("Constant", [], ["w"], sparse_value=sparse_proto("w", w)),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, x, ["y"])
    p = compiled(model)
    assert ops_of(p) == ["sparse_matmul"]
    np.testing.assert_allclose(p.run(x)[0], run_ort(model, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sparse_weight", [True, False])
def test_fusegraph_sparse_matmul_op(sparse_weight):
    w = fusegraph.make_sparse((32, 24), density=0.25, seed=4)
    x = {"x": rng.standard_normal((5, 32)).astype(np.float32)}
    node = helper.make_node("SparseMatMul", ["x", "w"], ["y"], domain="fusegraph")
    model = model_with_sparse([node], x, ["y"], [sparse_proto("w", w)] if sparse_weight else [],
                              dense=None if sparse_weight else {"w": w}, domains=["fusegraph"])
    p = compiled(model)
    assert ops_of(p) == ["sparse_matmul"]
    np.testing.assert_allclose(p.run(x)[0], x["x"].astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


def test_fusegraph_sparse_matmul_needs_a_constant_weight():
    x = {"x": rng.standard_normal((5, 4)).astype(np.float32), "w": rng.standard_normal((4, 3)).astype(np.float32)}
    node = helper.make_node("SparseMatMul", ["x", "w"], ["y"], domain="fusegraph")
    with pytest.raises(fusegraph.errors.ParseError, match="must be a constant"):
        fusegraph.parse_onnx(model_with_sparse([node], x, ["y"], [], domains=["fusegraph"]))


@pytest.mark.parametrize("trans_a, trans_b, alpha", [(0, 0, 1.0), (1, 0, 1.0), (0, 1, 2.5), (1, 1, 0.5)])
def test_onnxruntime_sparse_to_dense_matmul(trans_a, trans_b, alpha):
    a = fusegraph.make_sparse((12, 20), density=0.2, seed=5)  # A' is [12, 20] (or its transpose)
    a = a.T.copy() if trans_a else a
    b = rng.standard_normal((6, 20) if trans_b else (20, 6)).astype(np.float32)
    x = {"b": b}
    node = helper.make_node("SparseToDenseMatMul", ["a", "b"], ["y"], domain="com.microsoft", transA=trans_a,
                            transB=trans_b, alpha=alpha)
    model = model_with_sparse([node], x, ["y"], [sparse_proto("a", a)], domains=["com.microsoft"])
    got = compiled(model).run(x)[0]
    want = alpha * (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b)
    # against numpy only: ONNX Runtime densifies sparse initializers and then rejects them here (its
    # kernel takes A only as a sparse_tensor graph input, a type fusegraph's inputs do not have)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cpu_kernel_from_values_and_indices():
    target_or_skip("cpu")
    from fusegraph.ops.sparse import densify
    from fusegraph.targets.cpu.kernels.sparse import SparseWeights

    k, n = 50, 30
    idx = rng.integers(0, k * n, 200).astype(np.int64)  # repeats: the last value counts, as densify does
    vals = rng.standard_normal(200).astype(np.float32)
    x = rng.standard_normal((9, k)).astype(np.float32)
    want = x.astype(np.float64) @ densify(vals, idx, (k, n))
    np.testing.assert_allclose(SparseWeights.from_coo(vals, idx, k, n, 2)(x), want, rtol=1e-5, atol=1e-5)


def test_sparse_ops_shape_rules_and_text_form():
    from fusegraph.errors import ShapeError
    from fusegraph.ir.text import parse_program, print_program

    w = fusegraph.make_sparse((16, 5), density=0.2, seed=6)
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    model = model_with_sparse([helper.make_node("MatMul", ["x", "w"], ["y"])], x, ["y"], [sparse_proto("w", w)])
    p = fusegraph.parse_onnx(model)
    back = parse_program(print_program(p))
    assert print_program(back) == print_program(p)
    back.compile(fusegraph.get_target("ref"))
    np.testing.assert_allclose(back.run(x)[0], x["x"].astype(np.float64) @ w, rtol=1e-5, atol=1e-6)
    from fusegraph.ir.dtypes import DType
    from fusegraph.ir.op import make_op
    from fusegraph.ir.shape import Shape

    op = make_op("sparse_matmul", k=16, n=5)
    vals, idx = Shape.of(DType.float32, [7]), Shape.of(DType.int64, [7])
    assert op.compute_shape([Shape.of(DType.float32, [2, 3, 16]), vals, idx]).lens == (2, 3, 5)
    with pytest.raises(ShapeError, match="last dim must be k=16"):
        op.compute_shape([Shape.of(DType.float32, [3, 15]), vals, idx])
    with pytest.raises(ShapeError, match="two \\[NNZ\\] vectors"):
        op.compute_shape([Shape.of(DType.float32, [3, 16]), vals, Shape.of(DType.int64, [6])])
    with pytest.raises(ShapeError, match="differ in dtype"):
        op.compute_shape([Shape.of(DType.float16, [3, 16]), vals, idx])


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_a_reference_design_script_with_sparse_matmul(target):
    import fusegraph.migraphx as migraphx

    if target == "cpu":
        target_or_skip("cpu")
    p = migraphx.program()
    mm = p.get_main_module()
    x = mm.add_parameter("x", migraphx.shape(type="float_type", lens=[8, 256]))
    w_val = fusegraph.make_sparse((256, 128), 0.1, seed=8)
    y = mm.add_instruction(migraphx.op("sparse_matmul"), [x, mm.add_literal(w_val)])
    mm.add_return([y])
    p.compile(migraphx.get_target(target))
    x_val = rng.standard_normal((8, 256)).astype(np.float32)
    np.testing.assert_allclose(np.array(p.run({"x": x_val})[0]), x_val.astype(np.float64) @ w_val, rtol=1e-5, atol=1e-5)

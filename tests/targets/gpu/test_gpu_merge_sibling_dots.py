"""merge_sibling_dots: matmuls reading one input with constant weights become one matmul whose
former results are slices (the q, k, v projections of a transformer layer, issue 23). IR-level rules
first (no torch needed), then end to end on the gpu target against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.passes import eliminate_dead_code, run_pipeline, simplify_pipeline
from fusegraph.targets.gpu.merge_sibling_dots import merge_sibling_dots
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(5)
B, L, K = 2, 6, 8


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _projections(widths=(8, 8, 4), bias=(True, True, True), reader="Relu", extra=()):
    """x [B, L, K] projected by MatMul (+ Add of a bias) once per width, each read by `reader`
    (None: the projection is a model output)."""
    nodes, inits, outs = [], {}, []
    for k, (n, b) in enumerate(zip(widths, bias)):
        inits[f"w{k}"] = randn(K, n)
        nodes.append(helper.make_node("MatMul", ["x", f"w{k}"], [f"p{k}"], name=f"proj{k}"))
        y = f"p{k}"
        if b:
            inits[f"b{k}"] = randn(n)
            nodes.append(helper.make_node("Add", [f"b{k}", y] if k % 2 else [y, f"b{k}"], [f"a{k}"], name=f"bias{k}"))
            y = f"a{k}"
        if reader is not None:
            nodes.append(helper.make_node(reader, [y], [f"y{k}"]))
            y = f"y{k}"
        outs.append(y)
    nodes += list(extra)
    return make_model(nodes, {"x": randn(B, L, K)}, outs, initializers=inits)


def _merged(model) -> tuple[bool, list[str]]:
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, simplify_pipeline())
    changed = merge_sibling_dots(p.main)
    eliminate_dead_code(p.main)
    return changed, [i.op.name for i in p.main.instructions if i.op.name in ("dot", "slice")]


@pytest.mark.parametrize("widths, bias, reader, expected", [
    ((8, 8, 4), (True, True, True), "Transpose", ["dot", "slice", "slice", "slice"]),  # q, k, v with biases
    ((8, 4), (False, False), "Transpose", ["dot", "slice", "slice"]),                # no biases
    ((8, 8), (True, True), None, ["dot", "slice", "slice"]),                         # model outputs
    ((8, 4), (True, False), "Transpose", ["dot", "dot"]),                            # forms differ: apart
    ((8, 8), (True, True), "Relu", ["dot", "dot"]),   # a pointwise reader is each GEMM's epilogue: apart
    ((8,), (True,), "Transpose", ["dot"]),                                           # one alone
])
def test_merge_rules(widths, bias, reader, expected):
    changed, names = _merged(_projections(widths, bias, reader))
    assert changed == (names.count("dot") < len(widths)) and names == expected


def test_a_weight_computed_at_run_time_is_not_merged():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p0"]), helper.make_node("MatMul", ["x", "w1"], ["p1"]),
             helper.make_node("Transpose", ["p0"], ["y0"]), helper.make_node("Transpose", ["p1"], ["y1"])]
    model = make_model(nodes, {"x": randn(L, K), "w": randn(K, 4)}, ["y0", "y1"], initializers={"w1": randn(K, 4)})
    assert _merged(model) == (False, ["dot", "dot"])


def test_a_bias_varying_along_rows_is_not_merged():
    """add(x @ W, c) with c [L, N] is no bias gemm_bias takes but a pointwise reader: the epilogue."""
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["p0"]), helper.make_node("MatMul", ["x", "w1"], ["p1"]),
             helper.make_node("Add", ["p0", "c0"], ["a0"]), helper.make_node("Add", ["p1", "c1"], ["a1"]),
             helper.make_node("Transpose", ["a0"], ["y0"]), helper.make_node("Transpose", ["a1"], ["y1"])]
    inits = {"w0": randn(K, 4), "w1": randn(K, 4), "c0": randn(L, 4), "c1": randn(L, 4)}
    model = make_model(nodes, {"x": randn(L, K)}, ["y0", "y1"], initializers=inits)
    assert _merged(model) == (False, ["dot", "dot"])


@pytest.mark.parametrize("widths, bias, reader", [
    ((8, 8, 4), (True, True, True), "Transpose"), ((8, 4), (False, False), "Transpose"),
    ((8, 8), (True, True), None), ((8, 4), (True, False), "Softmax"),
])
@pytest.mark.parametrize("fp16", [False, True])
def test_merged_projections_match_onnxruntime(gpu_target, widths, bias, reader, fp16):
    model = _projections(widths, bias, reader)
    x = {"x": randn(B, L, K)}
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    tol = 3e-3 if fp16 else 1e-5
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)


def test_layers_sharing_weights_share_their_concatenation():
    """ALBERT's layers read the same q/k/v weights: one concatenated literal, not one per layer."""
    nodes = []
    for layer, x in enumerate(("x", "h0")):
        nodes += [helper.make_node("MatMul", [x, "wq"], [f"q{layer}"]), helper.make_node("MatMul", [x, "wk"], [f"k{layer}"]),
                  helper.make_node("Transpose", [f"q{layer}"], [f"tq{layer}"]),
                  helper.make_node("Transpose", [f"k{layer}"], [f"tk{layer}"]),
                  helper.make_node("MatMul", [f"tq{layer}", f"tk{layer}"], [f"s{layer}"]),
                  helper.make_node("MatMul", [f"s{layer}", "x"], [f"h{layer}"])]
    model = make_model(nodes, {"x": randn(K, K)}, ["h1"], initializers={"wq": randn(K, K), "wk": randn(K, K)})
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, simplify_pipeline())
    assert merge_sibling_dots(p.main)
    eliminate_dead_code(p.main)
    joined = [i for i in p.main.instructions if i.is_literal and i.shape.lens == (K, 2 * K)]
    assert len(joined) == 1 and sum(i.op.name == "dot" and i.inputs[1] is joined[0] for i in p.main.instructions) == 2


def test_the_merged_product_computes_every_projections_nodes():
    """Profiles and per-layer verification name a step by its ONNX nodes (ir/provenance.py)."""
    p = fusegraph.parse_onnx(_projections((8, 8, 4), (True, True, True), "Transpose"))
    run_pipeline(p, simplify_pipeline())
    merge_sibling_dots(p.main)
    eliminate_dead_code(p.main)
    (dot,) = [i for i in p.main.instructions if i.op.name == "dot"]
    (add,) = [i for i in p.main.instructions if i.op.name == "add"]
    names = {"proj0", "proj1", "proj2", "bias0", "bias1", "bias2"}
    assert {n.name for n in dot.origin} == names and {n.name for n in add.origin} == names

"""sink_concat: pointwise ops over a concat split into the concat's pieces (rotary embeddings'
cat(-x2, x1), issue 23), and slices of a pointwise op taken before it. IR-level rules first (no torch
needed), then end to end on the gpu target against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.passes import eliminate_dead_code, fuse_pointwise, run_pipeline, simplify_pipeline
from fusegraph.targets.gpu.plan import list_steps
from fusegraph.targets.gpu.sink_concat import sink_concat
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(7)
SHAPE = (1, 2, 5, 8)  # [batch, heads, positions, head dim]


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _rope(reader: str = "Transpose"):
    """x * cos + cat(-x2, x1) * sin, as transformers' rotate_half exports it, then `reader`."""
    h = SHAPE[-1] // 2
    nodes = [helper.make_node("Slice", ["x", "z", "h", "ax"], ["x1"]),
             helper.make_node("Slice", ["x", "h", "e", "ax"], ["x2"]),
             helper.make_node("Neg", ["x2"], ["n2"]),
             helper.make_node("Concat", ["n2", "x1"], ["rot"], axis=-1),
             helper.make_node("Mul", ["x", "cos"], ["a"]), helper.make_node("Mul", ["rot", "sin"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["r"]), helper.make_node(reader, ["r"], ["y"])]
    inits = {"z": np.array([0]), "h": np.array([h]), "e": np.array([2 * h]), "ax": np.array([-1]),
             "cos": randn(*SHAPE[2:]), "sin": randn(*SHAPE[2:])}
    return make_model(nodes, {"x": randn(*SHAPE)}, ["y"], initializers=inits)


def _kernels(model, sink: bool) -> tuple[bool, list[str]]:
    """Whether sink_concat changed the program, and the kinds of its steps that are kernels (movement
    views aside) after fusion."""
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, simplify_pipeline())
    changed = sink_concat(p.main) if sink else False
    eliminate_dead_code(p.main)
    fuse_pointwise(p.main)
    eliminate_dead_code(p.main)
    kinds = [s.kind for s in list_steps(p.main)
             if s.kind not in ("slice", "reshape", "transpose", "broadcast", "squeeze", "unsqueeze")]
    return changed, kinds


def test_rope_halves_are_one_kernel_each():
    before, after = _kernels(_rope(), False), _kernels(_rope(), True)
    assert before == (False, ["neg", "concat", "fused_pointwise"])  # the rotation's own kernel + a copy
    assert after == (True, ["fused_pointwise", "fused_pointwise", "concat"])  # written into the concat


def _concat_of(producers: str, reader: str):
    """concat(P(x), P(x2)) read by `reader`; P a MatMul (a GEMM: written into the concat in place)
    or a Relu (pointwise: fuses into the split reader)."""
    nodes = [helper.make_node(producers, ["x", "w"] if producers == "MatMul" else ["x"], ["p0"]),
             helper.make_node(producers, ["x2", "w"] if producers == "MatMul" else ["x2"], ["p1"]),
             helper.make_node("Concat", ["p0", "p1"], ["c"], axis=1), helper.make_node(reader, ["c"], ["y"])]
    return make_model(nodes, {"x": randn(4, 4), "x2": randn(4, 4)}, ["y"], initializers={"w": randn(4, 4)})


@pytest.mark.parametrize("producers, reader, sinks", [
    ("Relu", "Sigmoid", True),       # pointwise pieces: the split reader absorbs each
    ("MatMul", "Sigmoid", False),    # GEMM pieces are written in place: splitting would add kernels
    ("Relu", "Transpose", False),    # no pointwise reader
])
def test_sink_rules(producers, reader, sinks):
    assert _kernels(_concat_of(producers, reader), True)[0] == sinks


def test_slices_read_by_gemms_keep_their_producer_whole():
    """YOLO's split: one activation, its slices the inputs of two matmuls: hoisting the activation
    into the slices would make one kernel two."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Split", ["s"], ["a", "b"], axis=1),
             helper.make_node("MatMul", ["a", "w"], ["y0"]), helper.make_node("MatMul", ["b", "w"], ["y1"])]
    model = make_model(nodes, {"x": randn(4, 8)}, ["y0", "y1"], initializers={"w": randn(4, 4)})
    assert not _kernels(model, True)[0]


@pytest.mark.parametrize("model", [_rope("Transpose"), _rope("Identity"), _concat_of("Relu", "Sigmoid"),
                                   _concat_of("MatMul", "Sigmoid")], ids=["rope", "rope-output", "relu", "gemm"])
@pytest.mark.parametrize("fp16", [False, True])
def test_sunk_concats_match_onnxruntime(gpu_target, model, fp16):
    feeds = {i.name: randn(*[d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input}
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    tol = 3e-3 if fp16 else 1e-5
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=tol, atol=tol)


def test_every_piece_keeps_the_nodes_it_computes():
    """Profiles and per-layer verification name a step by its ONNX nodes (ir/provenance.py)."""
    p = fusegraph.parse_onnx(_rope())
    run_pipeline(p, simplify_pipeline())
    assert sink_concat(p.main)
    eliminate_dead_code(p.main)
    computing = [i for i in p.main.instructions if i.op.kind.value == "pointwise"]
    assert computing and all(i.origin for i in computing)

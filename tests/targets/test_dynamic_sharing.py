"""A dynamic program's specializations on cpu share one copy of each constant and packed weight
(targets/cpu/shared.py), and each stays exactly as correct as a static compile."""

import gc

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir import Dim
from fusegraph.targets import CompileOptions
from tests.util import assert_close, make_model, run_ort, target_or_skip

RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _cpu():
    target_or_skip("cpu")


def conv_bn_relu_model():
    """Conv -> BatchNormalization (folded into the conv's weights by the passes: a constant each
    compile computes again) -> Relu -> Conv, over a dynamic H, W."""
    c, m = 8, 16
    inits = {
        "w": RNG.standard_normal((m, c, 3, 3)).astype(np.float32) * 0.2,
        "scale": RNG.uniform(0.5, 1.5, m).astype(np.float32), "bias": RNG.standard_normal(m).astype(np.float32),
        "mean": RNG.standard_normal(m).astype(np.float32), "var": RNG.uniform(0.5, 2, m).astype(np.float32),
        "w2": RNG.standard_normal((m, m, 3, 3)).astype(np.float32) * 0.1,
    }
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"]),
             helper.make_node("Relu", ["b"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": np.zeros((1, c, 16, 16), np.float32)}, ["y"], initializers=inits)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "h", "w"
    return model


def _compile(model, cache=8):
    dyn = {"x": [1, 8, Dim(8, 64), Dim(8, 64)]}
    return fusegraph.parse_onnx(model, map_dyn_input_dims=dyn).compile("cpu", CompileOptions(dynamic_cache_size=cache))


def _feeds(h, w):
    return {"x": RNG.standard_normal((1, 8, h, w)).astype(np.float32)}


def _conv_weights(exe):
    return [i.inputs[1].literal for i in exe.program.main.instructions if i.op.name.startswith("conv")]


def test_specializations_share_folded_weights_and_packings():
    model = conv_bn_relu_model()
    p = _compile(model)
    for h, w in ((16, 16), (24, 16), (32, 40)):
        x = _feeds(h, w)
        assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)
    exes = [p.executable.executable_for({"x": (1, 8, h, w)}) for h, w in ((16, 16), (24, 16), (32, 40))]
    first = _conv_weights(exes[0])
    assert len(first) == 2
    for exe in exes[1:]:  # the batch-norm-folded weights: one array, not one per shape
        assert all(a is b for a, b in zip(_conv_weights(exe), first))
    # every packing of the later shapes is one the first shape made (its layouts are the same here)
    packed = [{id(a) for a in e.built.packing.packed().values()} for e in exes]
    assert packed[0] and packed[1] <= packed[0] and packed[2] <= packed[0]


def test_evicted_specializations_free_their_constants_and_recompile_exactly():
    model = conv_bn_relu_model()
    p = _compile(model, cache=1)
    for h, w in ((16, 16), (20, 12), (16, 16), (20, 12)):
        x = _feeds(h, w)
        assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)
    assert len(p.executable.specializations) == 4  # each run evicted the other shape


def test_shared_names_only_live_constants():
    from fusegraph.targets.cpu.shared import _Spans

    spans = _Spans()
    a = np.arange(1024, dtype=np.float32)
    spans.add(a)
    token, offset = spans.find(a[10:20])
    assert offset == 40 and spans.find(a.reshape(32, 32).T) == (token, 0)
    assert spans.find(np.arange(4, dtype=np.float32)) is None
    del a
    gc.collect()
    assert not spans._at and not spans._starts  # the dead array's span went with it


def test_merged_parallel_products_are_merged_once_for_every_shape():
    """Three products of one input (Q, K, V): merge_parallel_dots concatenates their weights; the
    specializations share that one concatenation (and its packing)."""
    ws = {f"w{k}": RNG.standard_normal((16, 24)).astype(np.float32) for k in range(3)}
    nodes = [helper.make_node("MatMul", ["x", f"w{k}"], [f"y{k}"]) for k in range(3)]
    nodes.append(helper.make_node("Sum", ["y0", "y1", "y2"], ["y"]))
    model = make_model(nodes, {"x": np.zeros((2, 16), np.float32)}, ["y"], initializers=ws)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 64), 16]}).compile("cpu")
    merged = []
    for rows in (3, 17, 64):
        x = {"x": RNG.standard_normal((rows, 16)).astype(np.float32)}
        assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)
        exe = p.executable.executable_for({"x": (rows, 16)})
        merged.append([i.literal for i in exe.program.main.instructions if i.is_literal and i.literal.shape == (16, 72)])
    assert all(len(m) == 1 for m in merged)
    assert merged[1][0] is merged[0][0] and merged[2][0] is merged[0][0]

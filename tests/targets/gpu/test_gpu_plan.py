"""The gpu target's lowering decisions on the IR (no GPU needed): matched patterns, storage of each
value, the arena plan, channels-last layouts, and typed errors for what cannot run on the GPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph import Dim
from fusegraph.errors import CompileError, TargetError
from fusegraph.models import get_model
from fusegraph.passes import generic_pipeline, run_pipeline
from fusegraph.targets.gpu.lowering import LOWERINGS, find_lowering, storage_mode, writes_in_place
from fusegraph.targets.gpu.patterns import match_groups
from fusegraph.targets.gpu.plan import ARENA, OUTPUT, PARAM, VIEW, make_plan
from tests.util import assert_close, make_model, run_ort

BERT_DIMS = {"input_ids": [2, 16], "attention_mask": [2, 16], "token_type_ids": [2, 16]}


def optimized(model, fp16: bool = False, **dims):
    p = fusegraph.parse_onnx(model, map_input_dims=dims or None)
    if fp16:
        fusegraph.quantize_fp16(p)
    run_pipeline(p, generic_pipeline())
    return p


@pytest.mark.parametrize("fp16", [False, True])
def test_bert_attention_and_bias_gemms_are_matched(fp16):
    p = optimized(get_model("bert_small"), fp16, **BERT_DIMS)
    groups = list(match_groups(p.main).values())
    attention = [g for g in groups if g.kind == "attention"]
    assert len(attention) == 2  # one per layer
    for g in attention:
        assert [[op.name for op, _ in c] for c in g.data.pop("chains")] == [["reshape", "transpose"]] * 3
        assert g.data == {"scale": 0.125, "has_mask": True}
        q, kt, v, mask = g.inputs  # the projections: their head split (reshape, transpose) is folded
        assert [q.shape.lens, kt.shape.lens, v.shape.lens] == [(2, 16, 128)] * 3 and mask.shape.lens == (2, 2, 16, 16)
        assert [m.op.name for m in g.members if m.op.name not in ("reshape", "transpose")] == ["dot", "fused_reduce"]
    assert sum(g.kind == "gemm_bias" for g in groups) == 6


def test_attention_needs_a_constant_scale():
    # softmax(q @ k * s) with s an input: not scaled_dot_product_attention's form
    nodes = [helper.make_node("MatMul", ["q", "k"], ["qk"]), helper.make_node("Mul", ["qk", "s"], ["z"]),
             helper.make_node("Softmax", ["z"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    x = np.zeros((1, 2, 4, 8), np.float32)
    model = make_model(nodes, {"q": x, "k": x.transpose(0, 1, 3, 2).copy(), "s": np.zeros((1,), np.float32),
                               "v": x}, ["y"])
    p = optimized(model)
    assert not any(g.kind == "attention" for g in match_groups(p.main).values())


def test_storage_modes_and_arena_do_not_overlap():
    p = optimized(get_model("resnet50"), input=[1, 3, 64, 64])
    plan = make_plan(p.main, storage_mode)
    kinds = {s.kind: plan.storage[s.ins.uid] for s in plan.steps}
    assert kinds["convolution"] == ARENA and kinds["broadcast"] == VIEW
    assert kinds["fused_pointwise"] == ARENA and kinds["gemm_bias"] == OUTPUT
    # buffers live at the same time never share bytes
    first = {}
    for k, s in enumerate(plan.steps):
        first.setdefault(plan.owner[s.ins.uid], k)
    sizes = {i.uid: i.shape.bytes for i in p.main.instructions if i.uid in plan.offsets}
    spans = [(plan.offsets[u], plan.offsets[u] + sizes[u], first[u], plan.last_use.get(u, first[u]))
             for u in plan.offsets]
    for a in spans:
        for b in spans:
            if a is not b and a[2] <= b[3] and b[2] <= a[3]:
                assert a[1] <= b[0] or b[1] <= a[0]
    assert plan.arena_bytes <= sum(sizes[u] + 64 for u in plan.offsets)


def test_convolution_neighbours_are_channels_last():
    p = optimized(get_model("resnet50"), input=[1, 3, 64, 64])
    plan = make_plan(p.main, storage_mode)
    convs = [s for s in plan.steps if s.kind == "convolution"]
    last = (0, 2, 3, 1)
    for s in convs:
        data = plan.owner[s.inputs[0].uid]
        if plan.storage[data] in (ARENA, PARAM):  # transients (pooling outputs) keep torch's layout
            assert plan.layouts[data] == last
        assert plan.layouts[s.inputs[1].uid] == last  # weights packed channels-last
        if plan.storage[s.ins.uid] == ARENA:  # its output too: cuDNN writes it in place (CudnnInto)
            assert plan.layouts[s.ins.uid] == last
    assert not any(plan.storage[u] == OUTPUT for u in plan.layouts)


def _live_spans(plan, module):
    first = {}
    for k, s in enumerate(plan.steps):
        first.setdefault(plan.owner[s.ins.uid], k)
    sizes = {i.uid: i.shape.bytes for i in module.instructions if i.uid in plan.offsets}
    return {u: (plan.offsets[u], plan.offsets[u] + sizes[u], first[u], plan.last_use.get(u, first[u]))
            for u in plan.offsets}


def test_a_pointwise_step_writes_over_an_input_that_dies_at_it():
    p = optimized(get_model("resnet50"), input=[1, 3, 64, 64])
    plain = make_plan(p.main, storage_mode)
    plan = make_plan(p.main, storage_mode, in_place=writes_in_place)
    assert plan.arena_bytes <= plain.arena_bytes
    spans = _live_spans(plan, p.main)
    steps = {s.ins.uid: s for s in plan.steps}

    def written_over(a, b):  # b written by its pointwise step over a, at a's last reading
        (a0, a1, a_first, a_last), (b0, b1, b_first, _) = spans[a], spans[b]
        return ((a0, a1) == (b0, b1) and b_first == a_last and a_first < b_first and writes_in_place(steps[b])
                and any(x.uid == a for x in steps[b].inputs))

    shared = 0
    for a, (a0, a1, a_first, a_last) in spans.items():
        for b, (b0, b1, b_first, b_last) in spans.items():
            if a < b and a_first <= b_last and b_first <= a_last and a0 < b1 and b0 < a1:  # live at once, same bytes
                assert written_over(a, b) or written_over(b, a), (a, b)
                shared += 1
    assert shared >= 10  # ResNet-50's convolutions' bias-and-ReLU steps, among others


def _conv_relu_model(nodes, convs):
    rng = np.random.default_rng(3)
    inits = {k: rng.standard_normal(shape).astype(np.float32) * 0.3 for k, shape in convs.items()}
    x = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    return make_model(nodes, x, ["y"], initializers=inits, opset=17), x


def test_a_convolutions_activation_needs_no_second_buffer(gpu_target):
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    model, x = _conv_relu_model(nodes, {"w1": (16, 3, 3, 3), "w2": (4, 16, 1, 1)})
    p = optimized(model)
    plain = make_plan(p.main, storage_mode)
    plan = make_plan(p.main, storage_mode, in_place=writes_in_place)
    relu = next(s for s in plan.steps if s.kind == "relu")
    assert plan.offsets[relu.ins.uid] == plan.offsets[relu.inputs[0].uid]
    assert plan.arena_bytes == plain.arena_bytes // 2  # one 2x16x8x8 buffer where there were two
    compiled = fusegraph.parse_onnx(model)
    compiled.compile(gpu_target)
    assert_close(compiled.run(x)[0], run_ort(model, x)[0], rtol=1e-4, atol=1e-4)


def test_a_value_read_again_later_is_not_written_over():
    """conv -> a; relu(a) -> r; conv(r) -> b; b + a: `a` is still needed when the ReLU runs."""
    c = 8
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["b"], pads=[1, 1, 1, 1]), helper.make_node("Add", ["b", "a"], ["s"]),
             helper.make_node("Conv", ["s", "w3"], ["y"])]
    model, _ = _conv_relu_model(nodes, {"w1": (c, 3, 3, 3), "w2": (c, c, 3, 3), "w3": (4, c, 1, 1)})
    p = optimized(model)
    plan = make_plan(p.main, storage_mode, in_place=writes_in_place)
    relu = next(s for s in plan.steps if s.kind == "relu")
    add = next(s for s in plan.steps if s.kind == "add")
    a = relu.inputs[0].uid
    assert plan.offsets[relu.ins.uid] != plan.offsets[a]  # `a` is read again by the add
    assert plan.offsets[add.ins.uid] in (plan.offsets[a], plan.offsets[add.inputs[0].uid])  # both die at the add


def _layer_norm_2d():
    """ConvNeXt's LayerNorm2d between two convolutions: permute to NHWC, layer norm over the last
    dim, permute back."""
    c = 8
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1, epsilon=1e-6),
             helper.make_node("Transpose", ["n"], ["u"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["u", "w2"], ["y"], strides=[2, 2], kernel_shape=[2, 2])]
    rng = np.random.default_rng(5)
    inits = {"w1": rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3,
             "g": rng.standard_normal(c).astype(np.float32), "b": rng.standard_normal(c).astype(np.float32),
             "w2": rng.standard_normal((16, c, 2, 2)).astype(np.float32) * 0.3}
    x = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    return make_model(nodes, x, ["y"], initializers=inits, opset=17), x


def test_a_convolution_reading_a_transpose_asks_its_owner_for_the_transposed_order():
    """The layer norm's NHWC output is what the second convolution reads channels-last through the
    permute back: it stays in the standard order (channels-last on its own dims made the layer
    norm write across memory and the convolution copy its input)."""
    p = optimized(_layer_norm_2d()[0])
    plan = make_plan(p.main, storage_mode)
    first, second = [s for s in plan.steps if s.kind == "convolution"]
    norm = plan.owner[second.inputs[0].uid]
    assert second.inputs[0].op.name == "transpose" and norm != second.inputs[0].uid
    assert norm not in plan.layouts and plan.storage[norm] == ARENA
    assert plan.layouts[first.ins.uid] == (0, 2, 3, 1)


def test_layer_norm_2d_between_convolutions_is_right(gpu_target):
    model, x = _layer_norm_2d()
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)


def test_missing_lowering_is_a_compile_error_naming_the_op():
    nodes = [helper.make_node("Unique", ["x"], ["y"], sorted=1)]
    p = optimized(make_model(nodes, {"x": np.zeros(4, np.float32)}, ["y"]))
    with pytest.raises(CompileError, match="no lowering for op 'unique'"):
        make_plan(p.main, storage_mode)


def test_a_tuple_written_into_the_arena_is_a_compile_error_naming_the_op():
    # a fused_reduce whose body returns moments (what fuse_reduce no longer builds) yields a tuple:
    # one arena buffer cannot hold it. A typed error, which sends the static mode to the dynamic one
    import textwrap

    from fusegraph.ir import Program

    p = Program.from_text(textwrap.dedent("""\
        module main
          %0 = @param[param_name='x'] : float32[2,8]
          %1 = fused_reduce[axes=(1,)](%0) <body> : (float32[2,1], float32[2,1])
          %2 = get_tuple_elem[index=0](%1) : float32[2,1]
          %3 = get_tuple_elem[index=1](%1) : float32[2,1]
          @return(%2, %3)
        module body parent main
          %4 = @param[param_name='x0'] : float32[2,8]
          %5 = exp(%4) : float32[2,8]
          %6 = moments[axes=(1,), centered=True](%5) : (float32[2,1], float32[2,1])
          @return(%6)
    """))
    with pytest.raises(CompileError, match="fused_reduce.*yields"):
        make_plan(p.main, storage_mode)


def test_dynamic_shapes_are_refused_with_advice():
    p = fusegraph.parse_onnx(get_model("resnet50"), map_dyn_input_dims={"input": [Dim(1, 4), 3, 64, 64]})
    run_pipeline(p, generic_pipeline())
    with pytest.raises(CompileError, match="static shapes"):
        make_plan(p.main, storage_mode)


def test_every_table_entry_has_a_valid_mode():
    find_lowering(type("S", (), {"kind": "dot", "ins": None})())
    assert {e.mode for e in LOWERINGS.values()} <= {"into", "value", "view"}
    assert "fused_reduce" in LOWERINGS and "attention" in LOWERINGS and "convolution" in LOWERINGS


def test_get_target_and_missing_gpu():
    target = fusegraph.get_target("gpu")
    assert target.name == "gpu"
    from fusegraph.targets.gpu import device

    try:
        t = device.torch()
    except TargetError:
        return  # no torch here: the error says what to install
    if not t.cuda.is_available():
        with pytest.raises(TargetError, match="no CUDA device"):
            device.resolve_device(None)

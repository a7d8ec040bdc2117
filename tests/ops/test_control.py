"""If, Loop and Scan on the ref target against ONNX Runtime; their shapes, text form and traps."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.ir.program import Program
from fusegraph.ir.shape import Dim
from fusegraph.targets.ref.interpreter import ExecutionError
from tests.util import assert_close, check_vs_ort, make_model, run_ort

F = TensorProto.FLOAT
rng = np.random.default_rng(0)


def _graph(nodes, name, inputs=(), outputs=()):
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    return helper.make_graph(nodes, name, ins, outs)


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.INT64, [len(value)], value))


def _if_model(then_nodes, else_nodes, out="y", inputs=None):
    then_g = _graph(then_nodes, "then", outputs=[("t", F, None)])
    else_g = _graph(else_nodes, "else", outputs=[("e", F, None)])
    node = helper.make_node("If", ["c"], [out], then_branch=then_g, else_branch=else_g)
    return make_model([node], inputs, [out], opset=16)


def _ops(program):
    return [i.op.name for m in program.modules.values() for i in m.instructions]


X = rng.standard_normal((2, 3)).astype(np.float32)


@pytest.mark.parametrize("cond", [True, False])
def test_if_branches_of_different_dims(cond):
    # then: x (2x3); else: x[:, :1] + 1 (2x1): the result's last dim is a range
    then_nodes = [helper.make_node("Identity", ["x"], ["t"])]
    else_nodes = [_const("s", [0]), _const("e1", [1]), _const("ax", [1]),
                  helper.make_node("Slice", ["x", "s", "e1", "ax"], ["e"])]
    inputs = {"c": np.array(cond), "x": X}
    model = _if_model(then_nodes, else_nodes, inputs=inputs)
    program = fusegraph.parse_onnx(model)
    assert program.main.outputs[0].shape.dims == (Dim.fixed(2), Dim(1, 3))
    check_vs_ort(model, inputs)


def test_if_with_a_constant_condition_is_parsed_in_place():
    # the branches differ in rank: only the chosen one is parsed, as plain instructions
    then_nodes = [helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0)]
    else_nodes = [helper.make_node("Identity", ["x"], ["e"])]
    cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True]))
    then_g = _graph(then_nodes, "then", outputs=[("t", F, None)])
    else_g = _graph(else_nodes, "else", outputs=[("e", F, None)])
    model = make_model([cond, helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                       {"x": X}, ["y"], opset=16)
    program = fusegraph.parse_onnx(model)
    assert "if" not in _ops(program) and len(program.modules) == 1
    check_vs_ort(model, {"x": X})


def test_if_branch_that_cannot_work_becomes_a_trap():
    # else reshapes x to [4]: impossible for a 2x3 x, fine as long as the branch is not taken
    then_nodes = [helper.make_node("Identity", ["x"], ["t"])]
    else_nodes = [_const("shape", [4]), helper.make_node("Reshape", ["x", "shape"], ["e"])]
    model = _if_model(then_nodes, else_nodes, inputs={"c": np.array(True), "x": X})
    program = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"))
    assert "trap" in _ops(program)
    np.testing.assert_array_equal(program.run({"c": np.array(True), "x": X})[0], X)
    with pytest.raises(ExecutionError, match="cannot run for these input shapes"):
        program.run({"c": np.array(False), "x": X})


def _loop_model(body_nodes, body_inputs, body_outputs, loop_inputs, loop_outputs, inputs, opset=16):
    body = _graph(body_nodes, "body", body_inputs, body_outputs)
    node = helper.make_node("Loop", loop_inputs, loop_outputs, body=body)
    return make_model([node], inputs, loop_outputs, opset=opset)


BODY_IO = [("i", TensorProto.INT64, []), ("cond_in", TensorProto.BOOL, [])]


def test_for_loop_with_scan_output_has_static_shapes():
    # acc += x each iteration; the scan output records acc: trip count 4 is known and the
    # condition is passed through, so the loop runs exactly 4 times
    nodes = [helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
             helper.make_node("Identity", ["acc_out"], ["rec"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    trip = helper.make_node("Constant", [], ["M"], value=helper.make_tensor("M", TensorProto.INT64, [], [4]))
    body = _graph(nodes, "body", BODY_IO + [("acc_in", F, [2, 3])],
                  [("cond_out", TensorProto.BOOL, []), ("acc_out", F, [2, 3]), ("rec", F, [2, 3])])
    model = make_model([trip, helper.make_node("Loop", ["M", "", "acc0"], ["acc", "recs"], body=body)],
                       {"acc0": X, "x": X}, ["acc", "recs"], opset=16)
    program = fusegraph.parse_onnx(model)
    assert [str(o.shape) for o in program.main.outputs] == ["float32[2,3]", "float32[4,2,3]"]
    check_vs_ort(model, {"acc0": X, "x": X})


@pytest.mark.parametrize("limit", [0, 3, 10])
def test_while_loop_with_a_growing_carried_value(limit):
    # v = concat(v, [i]) while i < limit: v's length changes every iteration
    nodes = [helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
             helper.make_node("Concat", ["v_in", "i1"], ["v_out"], axis=0),
             helper.make_node("Add", ["i", "one"], ["next"]),
             helper.make_node("Less", ["next", "lim"], ["cond_out"]),
             helper.make_node("Identity", ["i"], ["scan"])]
    consts = [_const("zero", [0]), helper.make_node("Constant", [], ["one"], value=helper.make_tensor(
        "one", TensorProto.INT64, [], [1]))]
    body = _graph(nodes, "body", BODY_IO + [("v_in", TensorProto.INT64, [None])],
                  [("cond_out", TensorProto.BOOL, []), ("v_out", TensorProto.INT64, [None]),
                   ("scan", TensorProto.INT64, [])])
    inputs = {"M": np.array(100, np.int64), "c": np.array(limit > 0), "v0": np.array([7], np.int64),
              "lim": np.array(limit, np.int64)}
    model = make_model(consts + [helper.make_node("Loop", ["M", "c", "v0"], ["v", "s"], body=body)],
                       inputs, ["v", "s"], opset=16)
    program = fusegraph.parse_onnx(model)
    assert program.main.outputs[0].shape.dims[0].max is None
    check_vs_ort(model, inputs)


def test_loop_uses_outer_values_after_their_last_use_outside():
    # y = x * 2 is used by the body only, after the main module's last direct use of x
    nodes = [helper.make_node("Add", ["a_in", "y"], ["a_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    body = _graph(nodes, "body", BODY_IO + [("a_in", F, [2, 3])],
                  [("cond_out", TensorProto.BOOL, []), ("a_out", F, [2, 3])])
    model = make_model([helper.make_node("Add", ["x", "x"], ["y"]),
                        helper.make_node("Loop", ["M", "", "x"], ["out"], body=body)],
                       {"M": np.array(3, np.int64), "x": X}, ["out"], opset=16)
    check_vs_ort(model, {"M": np.array(3, np.int64), "x": X})


def test_loop_program_text_round_trips():
    nodes = [helper.make_node("Add", ["a_in", "x"], ["a_out"]),
             helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    body = _graph(nodes, "body", BODY_IO + [("a_in", F, [2, 3])],
                  [("cond_out", TensorProto.BOOL, []), ("a_out", F, [2, 3])])
    model = make_model([helper.make_node("Loop", ["M", "", "x"], ["out"], body=body)],
                       {"M": np.array(3, np.int64), "x": X}, ["out"], opset=16)
    text = fusegraph.parse_onnx(model).to_text()
    again = Program.from_text(text)
    again.verify()
    assert again.to_text() == text
    out = again.compile(fusegraph.get_target("ref")).run({"M": np.array(3, np.int64), "x": X})
    np.testing.assert_allclose(out[0], 4 * X)


def _scan_model(opset, attrs, xs, n_states=1, extra_inputs=()):
    nodes = [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
             helper.make_node("Mul", ["x_t", "x_t"], ["sq"])]
    body = _graph(nodes, "body", [("s_in", F, None), ("x_t", F, None)], [("s_out", F, None), ("sq", F, None)])
    node = helper.make_node("Scan", list(extra_inputs) + ["s0", "xs"], ["s", "ys"], body=body,
                            num_scan_inputs=1, **attrs)
    return make_model([node], xs, ["s", "ys"], opset=opset)


@pytest.mark.parametrize("attrs", [
    {},
    {"scan_input_axes": [1], "scan_output_axes": [-1]},
    {"scan_input_directions": [1], "scan_output_directions": [1]},
    {"scan_input_axes": [-2], "scan_input_directions": [1], "scan_output_axes": [1]},
])
def test_scan_axes_and_directions(attrs):
    xs = {"s0": np.zeros((3,), np.float32), "xs": rng.standard_normal((4, 3)).astype(np.float32)}
    if attrs.get("scan_input_axes") == [1]:
        xs = {"s0": np.zeros((4,), np.float32), "xs": rng.standard_normal((4, 3)).astype(np.float32)}
    check_vs_ort(_scan_model(16, attrs, xs), xs)


def test_scan_opset8_batched_with_sequence_lens():
    xs = {"lens": np.array([3, 1], np.int64), "s0": np.zeros((2, 2), np.float32),
          "xs": rng.standard_normal((2, 3, 2)).astype(np.float32)}
    model = _scan_model(8, {"directions": [1]}, xs, extra_inputs=["lens"])
    got = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref")).run(xs)
    assert_close(got, run_ort(model, xs))


def test_silero_vad_matches_ort():
    # If (one branch per sample rate, the other cannot work for a 512-sample chunk) + LSTM, streamed
    silero = pytest.importorskip("silero_vad")
    import importlib.resources

    import onnx

    model = onnx.load(str(importlib.resources.files(silero) / "data" / "silero_vad.onnx"))
    program = fusegraph.parse_onnx(model, map_input_dims={"input": [2, 512], "state": [2, 2, 128]})
    program.compile(fusegraph.get_target("ref"))
    state = ort_state = np.zeros((2, 2, 128), np.float32)
    for _ in range(2):
        x = rng.standard_normal((2, 512)).astype(np.float32) * 0.1
        out, state = program.run({"input": x, "state": state, "sr": np.array(16000, np.int64)})
        expected, ort_state = run_ort(model, {"input": x, "state": ort_state, "sr": np.array(16000, np.int64)})
        assert_close([out, state], [expected, ort_state])

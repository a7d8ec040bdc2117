"""inline_constant_if: an `if` of a constant condition replaced by the branch it takes (IR before/after,
numerics on ref), and silero-vad-like models through the whole pipeline once the condition folds."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.passes import PassManager, eliminate_dead_code, propagate_constant
from fusegraph.passes.inline_constant_if import inline_constant_if
from fusegraph.targets.ref.interpreter import run_module
from tests.passes.util import program

IF_ON = """
module main
  %0 = @param[param_name='x'] : float32[2,3]
  %1 = @literal[{cond}] : bool[]
  %2 = if(%1) <t, e> : (float32[2,3], float32[2,3])
  %3 = get_tuple_elem[index=0](%2) : float32[2,3]
  %4 = get_tuple_elem[index=1](%2) : float32[2,3]
  %5 = relu(%3) : float32[2,3]
  @return(%5, %4)
module t parent main
  %6 = mul(%0, %0) : float32[2,3]
  %7 = @literal[2.0] : float32[]
  %8 = broadcast[out_lens=(2, 3)](%7) : float32[2,3]@[0,0]
  %9 = add(%6, %8) : float32[2,3]
  @return(%9, %0)
module e parent main
  %10 = neg(%0) : float32[2,3]
  @return(%10, %10)
"""


def _inline(text: str):
    p = program(text)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    expected = run_module(p.main, feeds)
    changed = PassManager(verify="full").run(p, [inline_constant_if, eliminate_dead_code])
    got = run_module(p.main, feeds)
    for a, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, e)
    return p, changed


@pytest.mark.parametrize("cond,body", [("True", "mul"), ("False", "neg")])
def test_the_taken_branch_replaces_the_if_and_its_results(cond, body):
    p, changed = _inline(IF_ON.format(cond=cond))
    assert changed
    assert set(p.modules) == {"main"}  # both branches are gone
    names = [i.op.name for i in p.main.instructions]
    assert "if" not in names and "get_tuple_elem" not in names and body in names
    # the If's results are model outputs: now the branch's values (one of them the outer x itself)
    out0, out1 = p.main.outputs
    assert out0.op.name == "relu"
    assert (out1 is p.main.parameters[0]) if cond == "True" else (out1.op.name == "neg")


def test_an_if_of_an_unknown_condition_stays():
    text = """
    module main
      %0 = @param[param_name='x'] : float32[2,3]
      %1 = @param[param_name='c'] : bool[]
      %2 = if(%1) <t, e> : (float32[2,3])
      %3 = get_tuple_elem[index=0](%2) : float32[2,3]
      @return(%3)
    module t parent main
      %4 = mul(%0, %0) : float32[2,3]
      @return(%4)
    module e parent main
      %5 = neg(%0) : float32[2,3]
      @return(%5)
    """
    p = program(text)
    assert not inline_constant_if(p.main)
    assert [i.op.name for i in p.main.instructions].count("if") == 1


NESTED = """
module main
  %0 = @param[param_name='x'] : float32[2,3]
  %1 = @param[param_name='k'] : int64[]
  %2 = @literal[16000] : int64[]
  %3 = equal(%1, %2) : bool[]
  %4 = if(%3) <t, e> : (float32[2,3])
  %5 = get_tuple_elem[index=0](%4) : float32[2,3]
  @return(%5)
module t parent main
  %6 = @literal[1] : int64[]
  %7 = greater(%1, %6) : bool[]
  %8 = if(%7) <tt, te> : (float32[2,3])
  %9 = get_tuple_elem[index=0](%8) : float32[2,3]
  %10 = sigmoid(%9) : float32[2,3]
  @return(%10)
module tt parent t
  %11 = exp(%0) : float32[2,3]
  @return(%11)
module te parent t
  %12 = abs(%0) : float32[2,3]
  @return(%12)
module e parent main
  %13 = neg(%0) : float32[2,3]
  @return(%13)
"""


def test_nested_ifs_of_one_known_input_inline_to_straight_line_code():
    p = program(NESTED)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32), "k": np.array(16000)}
    expected = run_module(p.main, feeds)
    k = p.main.get_parameter("k")
    p.main.replace(k, p.main.add_literal(np.array(16000, np.int64)))  # what a value specialization does
    PassManager(verify="full").run(p, [propagate_constant, inline_constant_if, eliminate_dead_code])
    assert set(p.modules) == {"main"}
    assert [i.op.name for i in p.main.instructions if not (i.is_param or i.is_literal)] == ["exp", "sigmoid", "@return"]
    np.testing.assert_array_equal(run_module(p.main, feeds)[0], expected[0])
    # the branch not taken no longer reads x: x's readers are the live instructions only
    assert [u.op.name for u in p.main.get_parameter("x").users] == ["exp"]


def test_an_inner_if_keeps_reading_the_outer_values_once_its_branch_moves_up():
    # the outer condition is known, the inner one is not: the inner If moves into main whole
    p = program(NESTED)
    p.main.replace(p.main.instructions[3], p.main.add_literal(np.array(True)))
    PassManager(verify="full").run(p, [inline_constant_if, eliminate_dead_code])
    assert set(p.modules) == {"main", "tt", "te"}
    assert p.modules["tt"].parent is p.main and p.modules["te"].parent is p.main
    for k in (1, 16000):
        feeds = {"x": np.full((2, 3), -0.5, np.float32), "k": np.array(k)}
        want = 1 / (1 + np.exp(-(np.exp(feeds["x"]) if k > 1 else np.abs(feeds["x"]))))
        np.testing.assert_allclose(run_module(p.main, feeds)[0], want, rtol=1e-6)


def test_an_onnx_if_whose_flag_becomes_known_compiles_without_it():
    """An If on an input flag, the flag then made a literal (as a value specialization does): the If
    is gone after the cpu pipeline, and the results (the If's own among the model outputs)
    are ONNX Runtime's for that flag."""
    from tests.util import make_model, run_ort

    n, F = helper.make_node, TensorProto.FLOAT
    then = helper.make_graph([n("Mul", ["x", "x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [2, 3])])
    other = helper.make_graph([n("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2, 3])])
    nodes = [n("Greater", ["k", "four"], ["c"]), n("If", ["c"], ["y"], then_branch=then, else_branch=other),
             n("Relu", ["y"], ["z"])]
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    model = make_model(nodes, {"x": x, "k": np.array(0, np.int64)}, ["z", "y"],
                       initializers={"four": np.array(4, np.int64)})
    for k in (3, 5):
        feeds = {"x": x, "k": np.array(k, np.int64)}
        want = run_ort(model, feeds)
        for target in ("ref", "cpu"):
            p = fusegraph.parse_onnx(model)
            assert "if" in {i.op.name for i in p.main.instructions}
            p.main.replace(p.main.get_parameter("k"), p.main.add_literal(feeds["k"]))
            p.compile(target)
            if target == "cpu":  # (ref runs no pipeline: it interprets the If)
                assert set(p.modules) == {"main"} and "if" not in {i.op.name for i in p.main.instructions}
            for a, e in zip(p.run(feeds), want, strict=True):
                np.testing.assert_allclose(a, e, rtol=1e-6)

"""No input makes a run hang (ir/run_limits.py): a deadline checked between steps on every target, a
bound on Loop iterations, a bound on control-flow nesting, and files that are not regular refused
without being opened."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import (
    DeadlineExceeded,
    ExecutionError,
    InputError,
    IRError,
    ModelLoadError,
)
from fusegraph.ir import DType, Program, Shape, make_op
from fusegraph.ir.limits import MAX_NESTING
from fusegraph.ir.text import parse_program, print_program
from fusegraph.targets import CompileOptions
from tests.targets.test_resources import TARGETS, target_or_skip
from tests.util import make_model


def loop_model(data_cond: bool) -> onnx.ModelProto:
    """acc += 1 while i < M and (data_cond: acc < 1e30, i.e. forever in float32; else: the condition as given)."""
    nodes = [helper.make_node("Add", ["acc", "one"], ["acc_out"])]
    nodes.append(helper.make_node("Less", ["acc_out", "big"], ["cond_out"]) if data_cond
                 else helper.make_node("Identity", ["cond"], ["cond_out"]))
    body = helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])],
        [onnx.numpy_helper.from_array(np.ones(1, np.float32), "one"), onnx.numpy_helper.from_array(np.full(1, 1e30, np.float32), "big")])
    loop = helper.make_node("Loop", ["M", "c", "a0"], ["y"], body=body)
    return make_model([loop], {"M": np.array(1, np.int64), "c": np.array(True), "a0": np.zeros(1, np.float32)}, ["y"])


def feeds(trips: int) -> dict[str, np.ndarray]:
    return {"M": np.array(trips, np.int64), "c": np.array(True), "a0": np.zeros(1, np.float32)}


@pytest.mark.parametrize("target", TARGETS)
def test_a_loop_of_2_62_trips_fails_before_its_first(target):
    p = fusegraph.parse_onnx(loop_model(data_cond=False)).compile(target_or_skip(target))
    start = time.perf_counter()
    with pytest.raises(ExecutionError, match=r"would run 4611686018427387904 iterations, more than max_loop_iterations=1000000"):
        p.run(feeds(2**62))  # before: spun until killed
    assert time.perf_counter() - start < 5
    assert p.run(feeds(10))[0].tolist() == [10.0]  # an ordinary loop still runs


@pytest.mark.parametrize("target", TARGETS)
def test_a_loop_its_condition_keeps_going_stops_at_the_bound(target):
    p = fusegraph.parse_onnx(loop_model(data_cond=True)).compile(target_or_skip(target), CompileOptions(max_loop_iterations=50))
    with pytest.raises(ExecutionError, match="ran past 50 iterations"):
        p.run(feeds(2**62))
    assert p.run(feeds(50))[0].tolist() == [50.0]


@pytest.mark.parametrize("target", TARGETS)
def test_a_deadline_stops_a_run_between_steps(target):
    p = fusegraph.parse_onnx(loop_model(data_cond=True)).compile(target_or_skip(target))
    start = time.perf_counter()
    with pytest.raises(DeadlineExceeded, match="deadline of 0.3 s"):
        p.run(feeds(2**62), deadline=0.3)
    assert time.perf_counter() - start < 10
    assert p.run(feeds(3), deadline=60)[0].tolist() == [3.0]  # within its deadline: the same result
    with pytest.raises(InputError, match="positive"):
        p.run(feeds(3), deadline=-1)


@pytest.mark.parametrize("target", TARGETS)
def test_a_deadline_is_checked_in_straight_line_code_too(target):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Exp", ["a"], ["b"]),
             helper.make_node("Neg", ["b"], ["y"])]
    x = np.ones((4, 4), np.float32)
    p = fusegraph.parse_onnx(make_model(nodes, {"x": x}, ["y"])).compile(target_or_skip(target), CompileOptions(optimize=False))
    with pytest.raises(DeadlineExceeded):
        p.run({"x": x}, deadline=1e-9)  # passed before the first step's check


def nested_ifs(depth: int) -> Program:
    """`depth` Ifs, each in the then-branch of the one before; the innermost adds x to itself."""
    p = Program()
    x = p.main.add_parameter("x", Shape.of(DType.float32, [1]))
    c = p.main.add_parameter("c", Shape.of(DType.bool, []))
    parent = p.main
    chain = []
    for d in range(depth):
        then, other = p.get_or_create_module(f"then{d}"), p.get_or_create_module(f"else{d}")
        then.parent = other.parent = parent
        other.add_return(other.add(make_op("identity"), x))
        chain.append((parent, then, other))
        parent = then
    parent.add_return(parent.add(make_op("add"), x, x))
    for outer, then, other in reversed(chain):
        outer.add_return(outer.add(make_op("get_tuple_elem", index=0), outer.add(make_op("if"), c, module_args=[then, other])))
    return p


@pytest.mark.parametrize("target", TARGETS)
def test_control_flow_nested_to_the_bound_runs(target):
    p = parse_program(print_program(nested_ifs(MAX_NESTING - 1)))
    p.compile(target_or_skip(target))
    # before (cpu): KeyError from two levels of nesting on (a body's body read x through its parent)
    assert p.run({"x": np.ones(1, np.float32), "c": np.array(True)})[0].tolist() == [2.0]


def test_control_flow_nested_past_the_bound_is_a_typed_error():
    p = nested_ifs(120)
    with pytest.raises(IRError, match=f"nested more than {MAX_NESTING} bodies deep"):
        p.compile(target_or_skip("ref"))
    with pytest.raises(IRError, match=f"nested more than {MAX_NESTING}"):
        parse_program(print_program(p))


def test_modules_whose_parents_form_a_cycle_are_refused():
    text = "module a parent b\n  @return()\nmodule b parent a\n  @return()\nmodule main\n  @return()\n"
    with pytest.raises(IRError, match="cycle"):
        parse_program(text)


def _finishes(fn, seconds: float = 60) -> BaseException | None:
    """Run `fn` in a thread; the exception it raised (None if none); fail if it does not finish."""
    got: list[BaseException | None] = []

    def call():
        try:
            fn()
            got.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test to check
            got.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert got, "blocked on the FIFO"
    return got[0]


@pytest.mark.parametrize("load", [fusegraph.load, fusegraph.parse_onnx], ids=["load", "parse_onnx"])
def test_a_fifo_is_refused_without_being_opened(tmp_path, load):
    fifo = tmp_path / "model.fgx"
    os.mkfifo(fifo)
    err = _finishes(lambda: load(fifo))  # before (load): blocked in open() until a writer came
    assert isinstance(err, ModelLoadError) and "not a regular file" in str(err)

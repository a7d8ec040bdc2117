"""Scan and Loop steps as loop records of native programs (targets/cpu/native_control.py): against the
ref target, against the same executable run step by step, and the run limits a Python iteration
enforces (max_loop_iterations, deadlines)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from fusegraph.errors import ExecutionError
from fusegraph.targets import CompileOptions
from fusegraph.targets.cpu.native_program import Region
from tests.util import assert_close, make_model, target_or_skip

rng = np.random.default_rng(5)
n = helper.make_node
F = TensorProto.FLOAT


def _compile(model, target="cpu", **options):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu") if target == "cpu" else fusegraph.get_target(target), CompileOptions(**options))
    return p


def _native_control(p) -> int:
    rows, _ = p.executable.main.thread_plan()
    return sum(len(r[0].loop_bounds) for r in rows if isinstance(r[0], Region))


def _vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def _scan_model(input_reverse=(0, 1), output_reverse=(0, 1)):
    """Two states (h, a running sum), two scan inputs (one walked from the end), two scan outputs
    (one filled from the end)."""
    w = numpy_helper.from_array((rng.standard_normal((6, 4)) * 0.4).astype(np.float32), "w")
    u = numpy_helper.from_array((rng.standard_normal((4, 4)) * 0.4).astype(np.float32), "u")
    body = helper.make_graph(
        [n("MatMul", ["x_t", "w"], ["a"]), n("MatMul", ["h", "u"], ["b"]), n("Add", ["a", "b"], ["c"]),
         n("Add", ["c", "z_t"], ["d"]), n("Tanh", ["d"], ["h_next"]), n("Add", ["s", "h_next"], ["s_next"]),
         n("ReduceMax", ["h_next"], ["y_t"], axes=[1], keepdims=0), n("Mul", ["h_next", "s_next"], ["v_t"])],
        "cell", [_vi("h", [2, 4]), _vi("s", [2, 4]), _vi("x_t", [2, 6]), _vi("z_t", [2, 4])],
        [_vi("h_next", [2, 4]), _vi("s_next", [2, 4]), _vi("y_t", [2]), _vi("v_t", [2, 4])])
    scan = n("Scan", ["h0", "s0", "x", "z"], ["h_n", "s_n", "y", "v"], body=body, num_scan_inputs=2,
             scan_input_directions=list(input_reverse), scan_output_directions=list(output_reverse))
    feeds = {"h0": rng.standard_normal((2, 4)).astype(np.float32), "s0": np.zeros((2, 4), np.float32),
             "x": rng.standard_normal((7, 2, 6)).astype(np.float32), "z": rng.standard_normal((7, 2, 4)).astype(np.float32)}
    model = make_model([scan, n("Relu", ["h_n"], ["out"])], feeds, ["out", "s_n", "y", "v"], opset=17)
    model.graph.initializer.extend([w, u])
    return model, feeds


@pytest.mark.parametrize("input_reverse,output_reverse", [((0, 0), (0, 0)), ((0, 1), (0, 1)), ((1, 1), (1, 0))])
def test_scan_runs_as_a_native_loop_like_the_ref_target(input_reverse, output_reverse, monkeypatch):
    model, feeds = _scan_model(input_reverse, output_reverse)
    p = _compile(model)
    assert _native_control(p) == 1
    got = p.run(feeds)
    assert_close(got, _compile(model, "ref").run(feeds), 1e-5, 1e-6)
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")  # the same kernels, step by step: bit for bit
    for a, b in zip(got, _compile(model).run(feeds), strict=True):
        np.testing.assert_array_equal(a, b)


def _loop_model():
    """acc = tanh(acc @ w + i * k) + acc, M times: the iteration number and the condition read."""
    body = helper.make_graph(
        [n("Cast", ["i"], ["fi"], to=F), n("Mul", ["fi", "k"], ["ik"]), n("MatMul", ["acc", "w"], ["m"]),
         n("Add", ["m", "ik"], ["p"]), n("Tanh", ["p"], ["t"]), n("Add", ["t", "acc"], ["acc_out"]),
         n("Identity", ["cond"], ["cond_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond", [], TensorProto.BOOL), _vi("acc", [2, 3])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", [2, 3])],
        [numpy_helper.from_array((rng.standard_normal((3, 3)) * 0.5).astype(np.float32), "w"),
         numpy_helper.from_array(np.array(0.25, np.float32), "k")])
    feeds = {"M": np.array(4, np.int64), "c": np.array(True), "a0": rng.standard_normal((2, 3)).astype(np.float32)}
    model = make_model([n("Loop", ["M", "c", "a0"], ["y"], body=body), n("Neg", ["y"], ["out"])], feeds, ["out"])
    return model, feeds


@pytest.mark.parametrize("trips,go", [(4, True), (1, True), (0, True), (5, False), (-3, True)])
def test_loop_runs_as_a_native_loop_like_the_ref_target(trips, go):
    model, feeds = _loop_model()
    feeds = {**feeds, "M": np.array(trips, np.int64), "c": np.array(go)}
    p = _compile(model)
    assert _native_control(p) == 1
    assert_close(p.run(feeds), _compile(model, "ref").run(feeds), 1e-5, 1e-6)


def test_a_native_loop_past_max_loop_iterations_is_refused_by_the_python_step():
    model, feeds = _loop_model()
    p = _compile(model, max_loop_iterations=6)
    assert _native_control(p) == 1
    with pytest.raises(ExecutionError, match="would run 7 iterations, more than max_loop_iterations=6"):
        p.run({**feeds, "M": np.array(7, np.int64)})
    six = {**feeds, "M": np.array(6, np.int64)}
    assert_close(p.run(six), _compile(model, "ref").run(six), 1e-5, 1e-6)
    # with a deadline the rows run in Python (iterations are not timed in C): the same numbers
    assert_close(p.run(six, deadline=60), _compile(model, "ref").run(six), 1e-5, 1e-6)


def test_a_loop_without_iterations_returns_no_input_array():
    """Scan and Loop write tuples into planned buffers (plan_memory.TUPLE_WRITERS): a result is never
    the input's array, so the plan may reuse the input's buffer."""
    model, feeds = _loop_model()
    model.graph.node.pop()  # y is the output: no step after the loop
    del model.graph.output[:]
    model.graph.output.append(helper.make_empty_tensor_value_info("y"))
    zero = {**feeds, "M": np.array(0, np.int64)}
    (y,) = _compile(model).run(zero)
    np.testing.assert_array_equal(y, feeds["a0"])
    assert not np.shares_memory(y, zero["a0"])


def test_threads_run_their_own_loop_tables():
    model, feeds = _scan_model()
    p = _compile(model)
    expected = _compile(model, "ref").run(feeds)
    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(lambda _: p.run(feeds), range(16)):
            assert_close(got, expected, 1e-5, 1e-6)


def _if_model(else_returns_x=False):
    """y = tanh(x @ a) if mean(x^2) > 0.5 else relu(x @ b) * 2 (TorchScript's If): the branches read
    the graph input x and weights of the main graph."""
    a, b = ((rng.standard_normal((6, 4)) * 0.5).astype(np.float32) for _ in range(2))
    then = helper.make_graph([n("MatMul", ["x", "a"], ["m"]), n("Tanh", ["m"], ["yt"])], "then", [], [_vi("yt", [3, 4])])
    other = (helper.make_graph([n("Identity", ["xs"], ["ye"])], "else", [], [_vi("ye", [3, 4])]) if else_returns_x else
             helper.make_graph([n("MatMul", ["x", "b"], ["q"]), n("Relu", ["q"], ["r"]), n("Mul", ["r", "two"], ["ye"])],
                               "else", [], [_vi("ye", [3, 4])]))
    nodes = [n("Mul", ["x", "x"], ["sq"]), n("ReduceMean", ["sq"], ["e"], keepdims=0), n("Greater", ["e", "half"], ["c"]),
             n("Slice", ["x", "s0", "s4", "s1"], ["xs"]), n("If", ["c"], ["y"], then_branch=then, else_branch=other),
             n("Neg", ["y"], ["out"])]
    feeds = {"x": rng.standard_normal((3, 6)).astype(np.float32)}
    inits = {"a": a, "b": b, "two": np.array(2, np.float32), "half": np.array(0.9, np.float32),
             "s0": np.array([0], np.int64), "s4": np.array([4], np.int64), "s1": np.array([1], np.int64)}
    return make_model(nodes, feeds, ["out"], inits, opset=17), feeds


@pytest.mark.parametrize("else_returns_x", [False, True])
def test_if_takes_its_branch_in_c_like_the_ref_target(else_returns_x, monkeypatch):
    from fusegraph.targets.cpu.native_program import IF

    model, feeds = _if_model(else_returns_x)
    p = _compile(model)
    rows, _ = p.executable.main.thread_plan()
    # (a branch returning an enclosing value has no C form: taken, it stops the region)
    assert any(isinstance(r[0], Region) and IF in {c.kind for c in r[0].table} for r in rows)
    ref = _compile(model, "ref")
    for scale in (0.3, 3.0):  # one run down each branch
        f = {"x": feeds["x"] * scale}
        got = p.run(f)
        assert_close(got, ref.run(f), 1e-5, 1e-6)
        monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
        np.testing.assert_array_equal(got[0], _compile(model).run(f)[0])
        monkeypatch.delenv("FUSEGRAPH_NATIVE_PROGRAMS")


def test_if_with_a_branch_without_c_form_stops_the_region_when_taken(monkeypatch):
    """silero-vad's If: the branch it takes is C, the other (a trap there; a CumSum here) is not: the
    IF record's table for it stops the region, and the If runs as its Python step."""
    from fusegraph.targets.cpu.native_program import IF

    model, feeds = _if_model()
    graph = model.graph
    other = next(a.g for a in next(x for x in graph.node if x.op_type == "If").attribute if a.name == "else_branch")
    del other.node[:]
    other.node.extend([n("CumSum", ["x", "ax"], ["cs"]), n("Slice", ["cs", "s0", "s4", "s1"], ["ye"])])
    other.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "ax"))
    p = _compile(model)
    rows, _ = p.executable.main.thread_plan()
    assert any(isinstance(r[0], Region) and IF in {c.kind for c in r[0].table} for r in rows)
    ref = _compile(model, "ref")
    for scale in (3.0, 0.3, 3.0):  # C, then Python, then C again
        f = {"x": feeds["x"] * scale}
        assert_close(p.run(f), ref.run(f), 1e-5, 1e-6)

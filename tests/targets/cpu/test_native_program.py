"""Native programs (targets/cpu/native_program.py): runs of steps with C forms called as one C
function, against the ref target and against the same executable run step by step."""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.targets.cpu.native_program import (
    GATHER,
    GUARD,
    GUARDED,
    KERNEL,
    PRIMITIVE,
    Region,
)
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(11)
n = helper.make_node


def _compile(model, target="cpu", **options):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu") if target == "cpu" else fusegraph.get_target(target), fusegraph.CompileOptions(**options))
    return p


def _regions(rows) -> list[Region]:
    return [r[0] for r in rows if isinstance(r[0], Region)]


def _kinds(region: Region) -> set[int]:
    return {c.kind for c in region.table}


def _mixed_model():
    """Convolutions big enough for oneDNN (relu: a guarded post-op), a tiny one (generated C), a
    generated pointwise kernel between them, and a product with constant weights."""
    x = rng.standard_normal((1, 8, 24, 24)).astype(np.float32)
    init = {"w1": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
            "b1": rng.standard_normal(16).astype(np.float32),
            "w2": (rng.standard_normal((4, 16, 1, 1)) * 0.2).astype(np.float32),
            "wm": (rng.standard_normal((6, 8)) * 0.2).astype(np.float32),
            "k": np.array([1.5], np.float32)}
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Sin", ["r1"], ["s1"]), n("Mul", ["s1", "k"], ["m1"]),
             n("Conv", ["m1", "w2"], ["c2"], strides=[4, 4]), n("Tanh", ["c2"], ["t2"]),
             n("MatMul", ["t2", "wm"], ["out"])]
    return make_model(nodes, {"x": x}, ["out"], init), x


def test_mixed_steps_run_as_one_native_call_like_the_steps_do(monkeypatch):
    model, x = _mixed_model()
    p = _compile(model)
    rows, _ = p.executable.main.thread_plan()
    regions = _regions(rows)
    assert regions and {KERNEL, PRIMITIVE} <= set().union(*map(_kinds, regions))
    got = p.run({"x": x})
    np.testing.assert_allclose(got[0], _compile(model, "ref").run({"x": x})[0], rtol=1e-4, atol=1e-5)
    # the same kernels on the same buffers: bit for bit the step-by-step run
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    steps = _compile(model)
    assert not _regions(steps.executable.main.thread_plan()[0])
    np.testing.assert_array_equal(got[0], steps.run({"x": x})[0])


def _nan_model(act, *tail):
    """conv -> sin -> conv + `act` (guarded: oneDNN's relu and clip give a bound for a NaN) -> *tail
    -> conv -> mean; the input, and one with a NaN."""
    x = rng.standard_normal((1, 8, 24, 24)).astype(np.float32)
    init = {"w0": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32),
            "w1": (rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32),
            "w2": (rng.standard_normal((16, 16, 3, 3)) * 0.2).astype(np.float32),
            "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    last = tail[-1].output[0] if tail else "r1"
    nodes = [n("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), n("Sin", ["c0"], ["s"]),
             n("Conv", ["s", "w1"], ["c1"], pads=[1, 1, 1, 1]), act, *tail,
             n("Conv", [last, "w2"], ["c2"], pads=[1, 1, 1, 1]),
             n("ReduceMean", ["c2"], ["out"], axes=[2, 3], keepdims=0)]  # the output: not in the arena
    bad = x.copy()
    bad[0, 3, 5, 5] = bad[0, 2, 0, 23] = np.nan  # (one in windows at the padded edge)
    return make_model(nodes, {"x": x}, ["out"], init), x, bad


def _matches_ref(model, x, bad, **options):
    p, ref = _compile(model, **options), _compile(model, "ref")
    for feeds in ({"x": x}, {"x": bad}, {"x": x}, {"x": bad}):  # the table runs on after a NaN
        want = ref.run(feeds)[0]
        assert np.isnan(want).any() == (feeds["x"] is bad)
        np.testing.assert_allclose(p.run(feeds)[0], want, rtol=1e-4, atol=1e-5)  # NaN where the reference has NaN
    return p


def _python_rows(monkeypatch, p, feeds) -> list[int]:
    """The region rows a run ran as Python steps."""
    ran = []
    row = Region._row
    monkeypatch.setattr(Region, "_row", lambda self, j, env, run: ran.append((j, run)) or row(self, j, env, run))
    p.run(feeds)
    return [j for j, run in ran if run]


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 1, 0, 0]])
def test_a_nan_reaching_guarded_steps_takes_their_exact_forms_in_c(monkeypatch, pads):
    # a convolution with a relu post-op, a max pooling: each holds both forms, oneDNN's alone, or
    # with the NaN put back in C (a relu that keeps it; NaN where a window holds one)
    pool = n("MaxPool", ["r1"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=pads)
    model, x, bad = _nan_model(n("Relu", ["c1"], ["r1"]), pool)
    p = _matches_ref(model, x, bad)
    (region,) = _regions(p.executable.main.thread_plan()[0])
    assert GUARDED in _kinds(region) and GUARD not in _kinds(region)
    assert not _python_rows(monkeypatch, p, {"x": bad})  # the whole run is one C call
    monkeypatch.undo()
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    np.testing.assert_array_equal(p.run({"x": bad})[0], _compile(model).run({"x": bad})[0])  # as the steps do


def test_the_relu_in_c_is_numpys_maximum():
    from fusegraph.targets.cpu.native_finite import relu
    from fusegraph.targets.cpu.native_program import FgCall, runner

    x = np.array([-0.0, 0.0, -1.0, 2.5, np.nan, -np.inf, np.inf, 1e-40, -1e-40] * 8, np.float32)
    got = x.copy()
    record, _ = relu(got, 1)
    table = (FgCall * 1)(FgCall(*record))
    status = ctypes.c_int32(0)
    assert runner()(ctypes.addressof(table), 1, ctypes.addressof(status)) == 1
    want = np.maximum(x, 0)
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want)).all()


def test_a_guard_that_stops_runs_its_step_in_python_and_the_table_goes_on(monkeypatch):
    # a clip post-op has no exact C form here: its guard stops the table, that step runs in Python
    # (its exact path), and the rest of the table runs on in C. The convolutions direct: a Winograd
    # step holds that guard inside its exact form (test_winograd.py)
    model, x, bad = _nan_model(n("Clip", ["c1", "lo", "hi"], ["r1"]))
    p = _matches_ref(model, x, bad, disabled_passes=("choose_winograd",))
    (region,) = [r for r in _regions(p.executable.main.thread_plan()[0]) if GUARD in _kinds(r)]
    stops = [j for j, first in enumerate(region.starts) if region.calls[first][0][0] == GUARD]
    assert _python_rows(monkeypatch, p, {"x": bad}) == stops[:1] and stops[0] < len(region.rows) - 1


def _if_model():
    w = (rng.standard_normal((8, 4, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((6, 8, 3)) * 0.3).astype(np.float32)
    w3 = (rng.standard_normal((6, 6, 1)) * 0.3).astype(np.float32)
    then = helper.make_graph(
        [n("Conv", ["x", "w"], ["c"], pads=[1, 1]), n("Relu", ["c"], ["r"]), n("Sigmoid", ["r"], ["s"]),
         n("Conv", ["s", "w2"], ["c2"], strides=[2]), n("Tanh", ["c2"], ["t"]), n("Conv", ["t", "w3"], ["m"]),
         n("ReduceMean", ["m"], ["y"], axes=[2], keepdims=0)],
        "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    other = helper.make_graph([n("Constant", [], ["y2"], value=helper.make_tensor("c", TensorProto.FLOAT, [1, 6], [0.5] * 6))],
                              "else", [],
                              [helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)])
    nodes = [n("Equal", ["sr", "k"], ["cond"]), n("If", ["cond"], ["out"], then_branch=then, else_branch=other)]
    x = rng.standard_normal((1, 4, 16)).astype(np.float32)
    model = make_model(nodes, {"x": x, "sr": np.array(16000, np.int64)}, ["out"],
                       {"w": w, "w2": w2, "w3": w3, "k": np.array(16000, np.int64)})
    return model, x


def test_if_bodies_run_native_programs():
    model, x = _if_model()
    p, ref = _compile(model), _compile(model, "ref")
    for sr in (16000, 8000, 16000):
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        np.testing.assert_allclose(p.run(feeds)[0], ref.run(feeds)[0], rtol=1e-4, atol=1e-5)
    (step,) = [s for s in p.executable.steps if s.name == "if"]
    bodies = step.fn.bodies
    then = next(b for b in bodies.values() if any(s.name == "conv_epilogue" for s in b.steps))
    assert _regions(then.thread_plan()[0])


def test_native_programs_from_several_threads_at_once():
    # each thread binds its own table to its own arena (and oneDNN memory objects)
    model, x = _mixed_model()
    p = _compile(model)
    feeds = [{"x": (x * (k + 1)).astype(np.float32)} for k in range(6)]
    want = [p.run(f)[0] for f in feeds]
    with ThreadPoolExecutor(3) as pool:
        for _ in range(4):
            for g, w in zip(pool.map(lambda f: p.run(f)[0], feeds), want):
                np.testing.assert_array_equal(g, w)


def test_profiles_still_time_every_step():
    model, x = _mixed_model()
    p = _compile(model)
    rows, _ = p.executable.main.step_plan()
    assert not _regions(rows) and _regions(p.executable.main.thread_plan()[0])
    prof = p.executable.profile({"x": x}, runs=2, warmup=1)
    assert [uid for uid, _, _ in prof.runs[0]] == [r[2] for r in rows]


@pytest.mark.parametrize("index", [1, -2, 3])
def test_gathers_of_constant_indices_are_checked_once(index):
    # silero-vad's state[0] and state[1]: the range check at compile time; out of range still fails
    # when the model runs, naming the op
    x = rng.standard_normal((2, 1, 8)).astype(np.float32)
    model = make_model([n("Gather", ["x", "i"], ["g"], axis=0), n("Neg", ["g"], ["out"])], {"x": x}, ["out"],
                       {"i": np.array(index, np.int64)})
    p = _compile(model)
    if index == 3:
        with pytest.raises(fusegraph.errors.ExecutionError, match="gather"):
            p.run({"x": x})
    else:
        np.testing.assert_array_equal(p.run({"x": x})[0], -x[index])


@pytest.mark.parametrize("starts, ends, axis, steps", [([0], [6], 1, [1]), ([6], [18], 1, [1]), ([1], [3], 0, [1]),
                                                       ([0], [18], 1, [2])])
def test_slices_between_native_steps_copy_in_c(starts, ends, axis, steps):
    # a merged projection's columns sliced apart (BERT's Q, K, V): rows of a matrix copied from C;
    # every other step between is native, so the slice must not end the region
    x = rng.standard_normal((4, 8)).astype(np.float32)
    init = {"w": rng.standard_normal((8, 18)).astype(np.float32), "b": rng.standard_normal(18).astype(np.float32),
            "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
            "axes": np.array([axis], np.int64), "steps": np.array(steps, np.int64)}
    nodes = [n("MatMul", ["x", "w"], ["m"]), n("Add", ["m", "b"], ["a"]), n("Sin", ["a"], ["s"]),
             n("Slice", ["s", "starts", "ends", "axes", "steps"], ["c"]), n("Cos", ["c"], ["k"]),
             n("ReduceMean", ["k"], ["out"], axes=[0], keepdims=0)]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p = _compile(model)
    regions = _regions(p.executable.main.thread_plan()[0])
    sliced = [r for r in regions if any(row[0].__qualname__.startswith("reference_kernel") for row in r.rows)]
    np.testing.assert_allclose(p.run({"x": x})[0], _compile(model, "ref").run({"x": x})[0], rtol=1e-5, atol=1e-6)
    assert sliced or steps == [2]  # every other column: no C form, a Python step


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_concats_between_native_steps_copy_in_c(axis):
    # YOLO's concats between convolutions: each part copied into its slice of the output from C
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    init = {"k": rng.standard_normal((1, 3, 5)).astype(np.float32)}
    nodes = [n("Mul", ["x", "k"], ["m"]), n("Cos", ["m"], ["a"]), n("Tanh", ["m"], ["b"]), n("Sin", ["m"], ["c"]),
             n("Concat", ["a", "b", "c"], ["cat"], axis=axis), n("Exp", ["cat"], ["e"]),
             n("ReduceMean", ["e"], ["out"], axes=[axis], keepdims=0)]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p = _compile(model)
    regions = _regions(p.executable.main.thread_plan()[0])
    assert any(row[0].__qualname__.startswith("concat") for r in regions for row in r.rows)
    np.testing.assert_allclose(p.run({"x": x})[0], _compile(model, "ref").run({"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make, native", [
    (lambda a: a, True),                              # dense
    (lambda a: a[:, 2:5], True),                      # column slice: rows
    (lambda a: a[1:3], True),                         # row slice: dense
    (lambda a: a[:, ::2], False),                     # every other column: not rows of contiguous elements
    (lambda a: a[::-1], False),                       # backwards
    (lambda a: a.reshape(2, 3, 8)[:, 1:, 2:6], False),  # two strided levels
])
def test_copy_calls_copy_what_numpy_copies(make, native):
    from fusegraph.targets.cpu.native_program import FgCall, copy, runner

    target_or_skip("cpu")  # the runner compiles with the target's compiler
    src = make(np.arange(48, dtype=np.float32).reshape(6, 8))
    dst = np.zeros(src.shape, np.float32)
    status = np.zeros(1, np.int32)

    def run(call):
        table = (FgCall * 1)(FgCall(*call[0]))
        assert runner()(ctypes.addressof(table), 1, status.ctypes.data) == 1

    call = copy(dst, src)
    assert (call is not None) == native
    if call is not None:
        run(call)
        np.testing.assert_array_equal(dst, src)
    # into a strided destination (a concat's part) the same way
    dense = np.ascontiguousarray(src).reshape(src.shape[0], -1)
    out = np.zeros((dense.shape[0], dense.shape[1] + 3), np.float32)
    part = out[:, 1:1 + dense.shape[1]]
    run(copy(part, dense))
    np.testing.assert_array_equal(part, dense)
    assert not out[:, 0].any() and not out[:, 1 + dense.shape[1]:].any()


def _streaming_model():
    """silero-vad in small: an If whose body pads the graph input (reflect), convolves it, runs an
    LSTM from the state input's two halves (constant-index gathers) and returns the LSTM's last
    hidden state through a convolution and its new state (a concat): graph inputs, a tuple of
    results and outputs in one body."""
    h = 8
    then = helper.make_graph(
        [n("Pad", ["x", "pads"], ["p"], mode="reflect"), n("Unsqueeze", ["p", "ax1"], ["p3"]),
         n("Conv", ["p3", "wc"], ["c"], strides=[4]), n("Relu", ["c"], ["r"]),
         n("Transpose", ["r"], ["rt"], perm=[2, 0, 1]),
         n("Gather", ["state", "i0"], ["h0"]), n("Gather", ["state", "i1"], ["c0"]),
         n("Unsqueeze", ["h0", "ax0"], ["h0u"]), n("Unsqueeze", ["c0", "ax0"], ["c0u"]),
         n("LSTM", ["rt", "W", "R", "B", "", "h0u", "c0u"], ["Y", "Yh", "Yc"], hidden_size=h),
         n("Concat", ["Yh", "Yc"], ["new_state"], axis=0), n("Transpose", ["Yh"], ["yt"], perm=[1, 2, 0]),
         n("Conv", ["yt", "wo"], ["o"]), n("Sigmoid", ["o"], ["prob"])],
        "then", [], [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None),
                     helper.make_tensor_value_info("new_state", TensorProto.FLOAT, None)])
    other = helper.make_graph(
        [n("Constant", [], ["z"], value=helper.make_tensor("z", TensorProto.FLOAT, [1, 1, 1], [0.0])),
         n("Identity", ["state"], ["s2"])],
        "else", [], [helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
                     helper.make_tensor_value_info("s2", TensorProto.FLOAT, None)])
    init = {"k": np.array(16000, np.int64), "pads": np.array([0, 4, 0, 4], np.int64),
            "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64),
            "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
            "wc": (rng.standard_normal((6, 1, 8)) * 0.3).astype(np.float32),
            "W": (rng.standard_normal((1, 4 * h, 6)) * 0.3).astype(np.float32),
            "R": (rng.standard_normal((1, 4 * h, h)) * 0.3).astype(np.float32),
            "B": (rng.standard_normal((1, 8 * h)) * 0.1).astype(np.float32),
            "wo": (rng.standard_normal((1, h, 1)) * 0.3).astype(np.float32)}
    nodes = [n("Equal", ["sr", "k"], ["cond"]),
             n("If", ["cond"], ["prob", "state_out"], then_branch=then, else_branch=other)]
    feeds = {"x": rng.standard_normal((1, 32)).astype(np.float32),
             "state": rng.standard_normal((2, 1, h)).astype(np.float32), "sr": np.array(16000, np.int64)}
    return make_model(nodes, feeds, ["prob", "state_out"], init), feeds


def test_a_streaming_if_body_is_one_native_program(monkeypatch):
    # its inputs are staged into the arena, the LSTM writes its tuple into planned buffers, the pad
    # and gathers are tables of offsets, the outputs are copied out: the body is one C call
    model, feeds = _streaming_model()
    p, ref = _compile(model), _compile(model, "ref")
    (step,) = [s for s in p.executable.steps if s.name == "if"]
    bodies = step.fn.bodies
    then = next(b for b in bodies.values() if any(s.name == "lstm" for s in b.steps))
    runs = []
    for k in range(3):  # each run's inputs reach the kernels; each run's outputs are arrays of its own
        f = {**feeds, "x": feeds["x"] * (k + 1), "state": feeds["state"] - k}
        got = p.run(f)
        for g, w in zip(got, ref.run(f), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        runs.append((f, got))
    rows, _ = then.thread_plan()
    assert len(rows) == 1 and isinstance(rows[0][0], Region)
    assert runs[0][1][1] is not runs[1][1][1] and not np.array_equal(runs[0][1][1], runs[1][1][1])
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")  # bit for bit the step-by-step run
    steps = _compile(model)
    for f, got in runs:
        for g, w in zip(got, steps.run(f), strict=True):
            np.testing.assert_array_equal(g, w)
    f = {**feeds, "sr": np.array(8000, np.int64)}  # the other branch returns the state it was given
    np.testing.assert_array_equal(p.run(f)[1], feeds["state"])


@pytest.mark.parametrize("index_type", [np.int64, np.int32])
def test_a_gather_by_run_time_indices_joins_the_region_and_checks_its_range(index_type):
    # an embedding lookup (the input ids: a graph input, staged) between products: one C call; an
    # index out of range stops the region there and the step raises its error, naming the op
    table = rng.standard_normal((10, 6)).astype(np.float32)
    w = (rng.standard_normal((6, 4)) * 0.3).astype(np.float32)
    ids = np.array([[1, -1, 9, 0]], index_type)
    nodes = [n("Gather", ["table", "ids"], ["e"]), n("MatMul", ["e", "w"], ["m"]), n("Tanh", ["m"], ["out"])]
    model = make_model(nodes, {"ids": ids}, ["out"], {"table": table, "w": w})
    p, ref = _compile(model), _compile(model, "ref")
    for feeds in ({"ids": ids}, {"ids": ids[:, ::-1].copy()}):
        np.testing.assert_allclose(p.run(feeds)[0], ref.run(feeds)[0], rtol=1e-5, atol=1e-6)
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and GATHER in _kinds(row[0])
    with pytest.raises(fusegraph.errors.ExecutionError, match="(?i)gather"):
        p.run({"ids": np.array([[1, 2, 10, 0]], index_type)})
    np.testing.assert_allclose(p.run({"ids": ids})[0], ref.run({"ids": ids})[0], rtol=1e-5, atol=1e-6)


def test_a_loop_body_carrying_planned_values_is_one_native_program(monkeypatch):
    # h <- tanh(h @ W + b) + 0.5 h, acc <- acc + h: the carried values are staged in, the results
    # planned and copied out (each iteration writes over the buffers the last one's results were in),
    # the broadcast of the enclosing graph's bias folded once
    w = (rng.standard_normal((8, 8)) * 0.4).astype(np.float32)
    body = helper.make_graph(
        [n("MatMul", ["h", "W"], ["m"]), n("Add", ["m", "b"], ["a"]), n("Tanh", ["a"], ["t"]),
         n("Mul", ["h", "half"], ["hh"]), n("Add", ["t", "hh"], ["h2"]), n("Add", ["acc", "h2"], ["acc2"]),
         n("Identity", ["c"], ["c2"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 8]),
                 helper.make_tensor_value_info("acc", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(v, t, s) for v, t, s in
         (("c2", TensorProto.BOOL, []), ("h2", TensorProto.FLOAT, [2, 8]), ("acc2", TensorProto.FLOAT, [2, 8]))])
    nodes = [n("Loop", ["steps", "", "x", "zeros"], ["h_out", "acc_out"], body=body)]
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32), "steps": np.array(5, np.int64)}
    model = make_model(nodes, feeds, ["h_out", "acc_out"],
                       {"W": w, "b": rng.standard_normal(8).astype(np.float32), "half": np.array(0.5, np.float32),
                        "zeros": np.zeros((2, 8), np.float32)})
    p, ref = _compile(model), _compile(model, "ref")
    for k in (5, 1, 7):
        f = {**feeds, "steps": np.array(k, np.int64)}
        for g, want in zip(p.run(f), ref.run(f), strict=True):
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    (step,) = [s for s in p.executable.steps if s.name == "loop"]
    (loop_body,) = step.fn.bodies.values()
    rows, _ = loop_body.thread_plan()
    assert len(rows) == 1 and isinstance(rows[0][0], Region)
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    steps = _compile(model)
    for g, want in zip(p.run(feeds), steps.run(feeds), strict=True):
        np.testing.assert_array_equal(g, want)

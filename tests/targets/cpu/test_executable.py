"""The cpu executable: control-flow bodies compiled like the main module, constants folded at build
time with the strides the IR gives them, results owned by the caller."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import fusegraph
from fusegraph.targets.cpu.executable import ModuleSteps
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(5)
n = helper.make_node


def _compile(model, inputs):
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    return p, p.run(inputs)


def _if_model():
    w = (rng.standard_normal((8, 4, 3)) * 0.3).astype(np.float32)
    then = helper.make_graph(
        [n("Conv", ["x", "w"], ["c"], pads=[1, 1]), n("Relu", ["c"], ["r"]), n("ReduceMean", ["r"], ["y"], keepdims=0)],
        "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    other = helper.make_graph([n("ReduceMax", ["x"], ["y2"], keepdims=0)], "else", [],
                              [helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)])
    nodes = [n("Equal", ["sr", "k"], ["cond"]), n("If", ["cond"], ["out"], then_branch=then, else_branch=other)]
    x = rng.standard_normal((1, 4, 16)).astype(np.float32)
    model = make_model(nodes, {"x": x, "sr": np.array(16000, np.int64)}, ["out"],
                       {"w": w, "k": np.array(16000, np.int64)})
    return model, x


def test_if_bodies_run_compiled_kernels():
    model, x = _if_model()
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    for sr in (16000, 8000):  # both branches
        feeds = {"x": x, "sr": np.array(sr, np.int64)}
        assert_close(p.run(feeds), run_ort(model, feeds))
    (step,) = [s for s in p.executable.steps if s.name == "if"]
    bodies = step.fn.bodies
    assert all(isinstance(b, ModuleSteps) for b in bodies.values())
    then = next(b for b in bodies.values() if any(s.name == "convolution" for s in b.steps))
    assert then.outer  # the body reads x from the enclosing module


def test_loop_body_with_scalar_slices():
    # Scan hands its body numpy scalars sliced from a 1-D input: kernels get 0-d arrays
    body = helper.make_graph(
        [n("Add", ["acc", "v"], ["acc2"]), n("Mul", ["v", "v"], ["sq"])], "body",
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("acc2", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("sq", TensorProto.FLOAT, [])])
    v = rng.standard_normal(6).astype(np.float32)
    model = make_model([n("Scan", ["init", "v"], ["total", "squares"], body=body, num_scan_inputs=1)],
                       {"init": np.array(0.5, np.float32), "v": v}, ["total", "squares"], opset=17)
    feeds = {"init": np.array(0.5, np.float32), "v": v}
    _, got = _compile(model, feeds)
    assert_close(got, run_ort(model, feeds), rtol=1e-6, atol=1e-6)


def test_constant_broadcasts_are_folded_with_the_ir_strides():
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    init = {"b": rng.standard_normal((1, 3, 1)).astype(np.float32)}
    model = make_model([n("Add", ["x", "b"], ["s"]), n("Exp", ["s"], ["e"]),
                        n("ReduceSum", ["e", "axes"], ["out"], keepdims=1)], {"x": x}, ["out"],
                       {**init, "axes": np.array([2], np.int64)})
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}), rtol=1e-5, atol=1e-6)
    main = p.executable.main
    assert "broadcast" not in [s.name for s in main.steps]
    by_uid = {i.uid: i for i in p.main.instructions}
    for uid, value in main.constants.items():
        shape = by_uid[uid].shape
        if by_uid[uid].op.name == "broadcast":
            assert value.strides == tuple(s * value.itemsize for s in shape.strides)


def test_outputs_are_standard_arrays_of_their_own():
    # a channels-last conv's output reaches the caller as an N, C, H, W array it owns
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    model = make_model([n("Conv", ["x", "w"], ["out"], pads=[1, 1, 1, 1])], {"x": x}, ["out"],
                       {"w": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)})
    p, got = _compile(model, {"x": x})
    assert got[0].flags.c_contiguous and got[0].flags.owndata
    again = p.run({"x": x})
    assert again[0] is not got[0] and np.array_equal(again[0], got[0])


def test_views_of_arena_buffers_are_made_once_per_thread():
    # MatMul -> Reshape -> Transpose -> MatMul: the views between the products never run as steps
    x = rng.standard_normal((8, 16)).astype(np.float32)
    init = {"w": (rng.standard_normal((16, 32)) * 0.2).astype(np.float32), "shape": np.array([4, 2, 32], np.int64)}
    nodes = [n("MatMul", ["x", "w"], ["y"]), n("Reshape", ["y", "shape"], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 1]),
             n("MatMul", ["t", "r"], ["out"])]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}), rtol=1e-5, atol=1e-5)
    rows, static = p.executable.main.step_plan()  # (one row a step: no native programs)
    assert len(static) == 2 and len(rows) == len(p.executable.steps) - 2
    again = p.run({"x": 2 * x})  # the fixed views see each run's values
    assert_close(again, run_ort(model, {"x": 2 * x}), rtol=1e-5, atol=1e-5)


def test_contiguous_and_concat_kernels():
    # NCHW input read channels-last (oneDNN reorder), concat of channels-last tensors into its buffer
    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    init = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
            "w2": (rng.standard_normal((8, 3, 1, 1)) * 0.3).astype(np.float32)}
    nodes = [n("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), n("Conv", ["x", "w2"], ["b"]),
             n("Concat", ["a", "b"], ["out"], axis=1)]
    model = make_model(nodes, {"x": x}, ["out"], init)
    p, got = _compile(model, {"x": x})
    assert_close(got, run_ort(model, {"x": x}))
    names = [s.name for s in p.executable.steps]
    assert names.count("contiguous") == 1 and "concat" in names


def test_pad_modes_and_lstm_kernels():
    x = rng.standard_normal((1, 2, 5)).astype(np.float32)
    for mode in ("constant", "reflect", "edge", "wrap"):
        model = make_model([n("Pad", ["x", "pads"], ["out"], mode=mode)], {"x": x}, ["out"],
                           {"pads": np.array([0, 1, 2, 0, 0, 3], np.int64)}, opset=19)
        assert_close(_compile(model, {"x": x})[1], run_ort(model, {"x": x}))
    h = 8
    seq = rng.standard_normal((3, 2, 4)).astype(np.float32)
    init = {"W": (rng.standard_normal((2, 4 * h, 4)) * 0.5).astype(np.float32),
            "R": (rng.standard_normal((2, 4 * h, h)) * 0.5).astype(np.float32),
            "B": (rng.standard_normal((2, 8 * h)) * 0.5).astype(np.float32)}
    model = make_model([n("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=h, direction="bidirectional")],
                       {"x": seq}, ["y", "yh", "yc"], init)
    assert_close(_compile(model, {"x": seq})[1], run_ort(model, {"x": seq}), rtol=1e-5, atol=1e-6)


def test_nearest_resize_kernels():
    # integer upsampling (one broadcasting copy) and other nearest resizes (a gather per axis)
    x = rng.standard_normal((1, 3, 5, 4)).astype(np.float32)
    for scales, mode in (([1, 1, 2, 3], "asymmetric"), ([1, 1, 1.5, 0.5], "half_pixel"), ([1, 1, 2, 2], "align_corners")):
        model = make_model([n("Resize", ["x", "", "scales"], ["out"], mode="nearest", coordinate_transformation_mode=mode)],
                           {"x": x}, ["out"], {"scales": np.array(scales, np.float32)}, opset=19)
        assert_close(_compile(model, {"x": x})[1], run_ort(model, {"x": x}))


def test_runs_from_several_threads_at_once():
    # each thread has its own arenas (main and bodies): concurrent runs never share a buffer
    from concurrent.futures import ThreadPoolExecutor

    model, x = _if_model()
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    feeds = [{"x": (x * (k + 1)).astype(np.float32), "sr": np.array(16000 if k % 2 else 8000, np.int64)}
             for k in range(8)]
    want = [p.run(f) for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(p.run, feeds))
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g[0], w[0])


def test_one_step_lstm_with_and_without_initial_states():
    h = 16
    x = rng.standard_normal((1, 2, 8)).astype(np.float32)
    init = {"W": (rng.standard_normal((1, 4 * h, 8)) * 0.5).astype(np.float32),
            "R": (rng.standard_normal((1, 4 * h, h)) * 0.5).astype(np.float32),
            "B": (rng.standard_normal((1, 8 * h)) * 0.5).astype(np.float32)}
    feeds = {"x": x, "h0": rng.standard_normal((1, 2, h)).astype(np.float32),
             "c0": rng.standard_normal((1, 2, h)).astype(np.float32)}
    with_states = make_model([n("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=h)],
                             feeds, ["y", "yh", "yc"], init)
    assert_close(_compile(with_states, feeds)[1], run_ort(with_states, feeds), rtol=1e-5, atol=1e-6)
    bare = make_model([n("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=h)], {"x": x},
                      ["y", "yh", "yc"], init)
    assert_close(_compile(bare, {"x": x})[1], run_ort(bare, {"x": x}), rtol=1e-5, atol=1e-6)


def test_loop_body_returning_an_enclosing_value_unchanged():
    # TorchScript's loops return the enclosing module's `True` as their condition through an
    # Identity; with the identity gone, the body reads it through its outputs only, no step of it does
    bias = rng.standard_normal((2, 3)).astype(np.float32)
    body = helper.make_graph(
        [n("Tanh", ["h"], ["t"]), n("Add", ["t", "bias"], ["h2"]), n("Identity", ["go"], ["go_out"]),
         n("Identity", ["bias"], ["bias_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h2", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("bias_out", TensorProto.FLOAT, [2, 3])])  # a scan output: outer, unchanged
    nodes = [n("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
             n("Exp", ["b"], ["bias"]), n("Loop", ["steps", "go", "h0"], ["h_n", "biases"], body=body)]
    feeds = {"steps": np.array(4, np.int64), "h0": rng.standard_normal((2, 3)).astype(np.float32), "b": bias}
    model = make_model(nodes, feeds, ["h_n", "biases"])
    assert_close(_compile(model, feeds)[1], run_ort(model, feeds))

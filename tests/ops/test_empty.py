"""Values made out of empty tensors, on every target against ONNX Runtime: a reduction over an axis of
length 0 gives what ONNX defines (a sum's 0, a product's 1, a max's lowest value, a min's highest),
a product or convolution over nothing gives zeros (then its bias and epilogue). The cpu target's
generated reductions left such outputs unwritten (the arena's old bytes) and its oneDNN products
refused K = 0; the reference's convolutions could not reshape an empty input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.util import check_on_every_target, every_target, make_model

N = helper.make_node


def i64(*v):
    return np.array(v, np.int64)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                                "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("shape, axes", [((2, 0), [1]), ((0, 3), [0]), ((2, 0, 3), [1]), ((2, 3, 0), [2])])
def test_a_reduction_over_nothing(op, shape, axes):
    x = {"x": np.zeros(shape, np.float32)}
    model = make_model([N(op, ["x", "a"], ["y"], keepdims=0)], x, ["y"], {"a": i64(*axes)}, opset=18)
    check_on_every_target(model, x)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin"])
def test_an_integer_reduction_over_nothing(op, dtype):
    x = {"x": np.zeros((2, 0), dtype)}
    check_on_every_target(make_model([N(op, ["x", "a"], ["y"], keepdims=0)], x, ["y"], {"a": i64(1)}, opset=18), x)


def test_a_fused_reduction_over_nothing():
    x = {"x": np.zeros((2, 0, 3), np.float32), "z": np.ones((2, 3), np.float32)}
    nodes = [N("ReduceSum", ["x", "a"], ["r"], keepdims=0), N("Exp", ["r"], ["e"]), N("Add", ["e", "z"], ["y"])]
    check_on_every_target(make_model(nodes, x, ["y"], {"a": i64(1)}, opset=18), x)


@pytest.mark.parametrize("case", ["matmul", "batched", "gemm-bias", "epilogue", "einsum"])
def test_a_product_over_nothing(case):
    a = {"a": np.zeros((2, 3, 0) if case == "batched" else (3, 0), np.float32)}
    b = np.zeros((2, 0, 4) if case == "batched" else (0, 4), np.float32)
    c = np.full(4, 2.0, np.float32)
    nodes = {
        "matmul": [N("MatMul", ["a", "b"], ["y"])],
        "batched": [N("MatMul", ["a", "b"], ["y"])],
        "gemm-bias": [N("Gemm", ["a", "b", "c"], ["y"])],
        "epilogue": [N("MatMul", ["a", "b"], ["m"]), N("Add", ["m", "c"], ["s"]), N("Relu", ["s"], ["y"])],
        "einsum": [N("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
    }[case]
    inits = {"b": b, "c": c} if case in ("gemm-bias", "epilogue") else {"b": b}
    check_on_every_target(make_model(nodes, a, ["y"], inits, opset=18), a)


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_a_convolution_of_no_channels(op):
    """A sum over no input channel: the bias alone. (Against that definition, not ONNX Runtime: its
    1.30 returned uninitialized memory for the Conv, 1.32 the bias.)"""
    x = {"x": np.zeros((1, 0, 4, 4), np.float32)}
    w = np.zeros((2, 0, 3, 3) if op == "Conv" else (0, 2, 3, 3), np.float32)
    b = np.array([1.5, -2.0], np.float32)
    model = make_model([N(op, ["x", "w", "b"], ["y"])], x, ["y"], {"w": w, "b": b}, opset=18)
    size = 4 - 3 + 1 if op == "Conv" else 4 + 3 - 1
    check_on_every_target(model, x, expected=[np.broadcast_to(b.reshape(1, 2, 1, 1), (1, 2, size, size))])


def _empty_batch_cases():
    rng = np.random.default_rng(0)

    def f32(*s):
        return rng.standard_normal(s).astype(np.float32)
    return {
        "conv": ([N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], {"x": np.zeros((0, 3, 8, 8), np.float32)},
                 {"w": f32(4, 3, 3, 3), "b": f32(4)}),
        "matmul": ([N("Gemm", ["x", "w", "b"], ["y"])], {"x": np.zeros((0, 5), np.float32)}, {"w": f32(5, 4), "b": f32(4)}),
        "layernorm": ([N("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], {"x": np.zeros((0, 5), np.float32)},
                      {"s": f32(5), "b": f32(5)}),
        "instancenorm": ([N("InstanceNormalization", ["x", "s", "b"], ["y"])], {"x": np.zeros((0, 3, 4), np.float32)},
                         {"s": f32(3), "b": f32(3)}),
        "softmax": ([N("Softmax", ["x"], ["y"], axis=1)], {"x": np.zeros((0, 5), np.float32)}, {}),
        "gathered-sum": ([N("Gather", ["x", "i"], ["g"], axis=0), N("ReduceSum", ["g", "a"], ["y"], keepdims=0)],
                         {"x": f32(4, 3), "i": np.zeros((0,), np.int64)}, {"a": i64(0)}),
    }


@pytest.mark.parametrize("case", list(_empty_batch_cases()))
def test_a_batch_of_nothing(case):
    """An empty batch (a detector's second stage with no proposal): empty results, and a sum of
    nothing its zeros. On the cpu target the generated reductions of a LayerNorm or InstanceNorm over
    no row wrote past their empty buffer (heap corruption, found by valgrind): an empty value now
    runs no kernel."""
    nodes, x, inits = _empty_batch_cases()[case]
    check_on_every_target(make_model(nodes, x, ["y"], inits, opset=18), x)


def test_a_recurrence_over_no_step():
    """An LSTM over a sequence of 0 steps: Y empty, Y_h the initial state (zeros)."""
    rng = np.random.default_rng(1)
    x = {"x": np.zeros((0, 1, 3), np.float32)}
    inits = {"w": rng.standard_normal((1, 8, 3)).astype(np.float32), "r": rng.standard_normal((1, 8, 2)).astype(np.float32)}
    model = make_model([N("LSTM", ["x", "w", "r"], ["y", "h"], hidden_size=2)], x, ["y", "h"], inits, opset=18)
    check_on_every_target(model, x)


def _kept_boxes(score: float, tail: list, outputs: list[str]):
    """A detector's NonMaxSuppression and the boxes it kept ([k, 4], k known at run time: 0 when no
    score passes 0.5, 3 at most), then `tail` over them."""
    rng = np.random.default_rng(3)
    b = rng.random((1, 6, 4)).astype(np.float32)
    x = {"b": b, "s": np.linspace(0.6, 1, 6, dtype=np.float32).reshape(1, 1, 6) * score, "b0": b[0]}
    nodes = [N("NonMaxSuppression", ["b", "s", "m", "iou", "st"], ["sel"]), N("Gather", ["sel", "two"], ["idx"], axis=1),
             N("Gather", ["b0", "idx"], ["kept"], axis=0), *tail]
    inits = {"m": i64(3), "iou": np.array([0.5], np.float32), "st": np.array([0.5], np.float32),
             "two": np.array(2, np.int64), "a": i64(0), "z": np.array(0, np.int64)}
    used = {k: v for k, v in inits.items() if any(k in n.input for n in nodes)}
    return make_model(nodes, x, outputs, used, opset=18), x


@pytest.mark.parametrize("score", [0.1, 1.0], ids=["none-kept", "three-kept"])
def test_reductions_over_the_boxes_a_detector_kept(score):
    """The kept boxes reduced over k: a static value out of a dynamic tensor, which the fusion of
    reductions read as fixed (a ShapeError out of the cpu target's compile); and their mean as a sum
    over the count Shape gives, whose 0-d Gather the cpu target's native program could not place."""
    tail = [N("ReduceMax", ["kept", "a"], ["mx"], keepdims=0), N("ReduceSum", ["kept", "a"], ["sm"], keepdims=0),
            N("Exp", ["sm"], ["y"]), N("Shape", ["kept"], ["sh"]), N("Gather", ["sh", "z"], ["n"], axis=0),
            N("Cast", ["n"], ["nf"], to=1), N("Div", ["sm", "nf"], ["mean"])]
    check_on_every_target(*_kept_boxes(score, tail, ["mx", "y", "mean"]))


def test_the_best_of_the_kept_boxes():
    """A static row taken out of a dynamic tensor (the kept box of the highest summed score): the cpu
    target's Gather read the dynamic input's lens (a ShapeError out of its compile)."""
    tail = [N("ReduceSum", ["kept", "one"], ["sc"], keepdims=0), N("ArgMax", ["sc"], ["am"], axis=0, keepdims=0),
            N("Gather", ["kept", "am"], ["y"], axis=0)]
    model, x = _kept_boxes(1.0, tail, ["y"])
    model.graph.initializer.append(numpy_helper.from_array(i64(1), "one"))
    check_on_every_target(model, x)


def test_an_arg_extremum_over_an_axis_that_may_be_empty():
    """ArgMax over the kept boxes compiles (the axis is {0..3}: its shape rule refused the 0 end of
    the range, so the whole model) and runs where boxes are kept; where none is, it is the op's
    ExecutionError (ONNX Runtime refuses it too)."""
    import fusegraph
    from fusegraph.errors import ExecutionError

    check_on_every_target(*_kept_boxes(1.0, [N("ArgMax", ["kept"], ["y"], axis=0)], ["y"]))
    model, x = _kept_boxes(0.1, [N("ArgMax", ["kept"], ["y"], axis=0)], ["y"])
    for target in every_target():
        p = fusegraph.parse_onnx(model)
        p.compile(target)
        with pytest.raises(ExecutionError, match="argmax"):
            p.run(x)


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "AveragePool"])
def test_a_window_over_a_dim_that_may_be_empty(op):
    """A 2x2 window over the kept boxes as an image ([1, 1, k, 4]): the shape rule refused k's range
    (0 is smaller than the window), so the whole model; now its output is bounded from the smallest
    k it takes (ir/op.py), the run with three boxes is ONNX Runtime's, and the run with none the op's
    error (ONNX Runtime refuses it too). The cpu target's passes and oneDNN kernels read such dims
    as fixed: they leave them to the reference."""
    import fusegraph
    from fusegraph.errors import FusegraphError

    rng = np.random.default_rng(0)
    window = N(op, ["u", "w"], ["y"]) if op == "Conv" else N(op, ["u"], ["y"], kernel_shape=[2, 2])
    tail = [N("Unsqueeze", ["kept", "ax01"], ["u"]), window]
    extra = {"ax01": i64(0, 1), **({"w": rng.standard_normal((2, 1, 2, 2)).astype(np.float32)} if op == "Conv" else {})}
    for score, kept in ((1.0, True), (0.1, False)):
        model, x = _kept_boxes(score, tail, ["y"])
        model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in extra.items())
        if kept:
            check_on_every_target(model, x)
            continue
        for target in every_target():
            p = fusegraph.parse_onnx(model)
            p.compile(target)
            with pytest.raises(FusegraphError, match="does not fit|window"):
                p.run(x)

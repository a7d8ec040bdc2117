"""QLinearSoftmax, QLinearAveragePool and DynamicQuantizeLSTM against ONNX Runtime's CPU kernels."""

import numpy as np
import pytest
from onnx import helper

from tests.onnx.contrib_util import MS, contrib_model, rng
from tests.util import check_on_every_target, make_model

QTYPES = [np.uint8, np.int8]




@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("axis,opset,y_scale", [(-1, 13, 1 / 256), (1, 13, 0.0037), (1, 12, 0.0061), (0, 13, 1 / 255)])
def test_qlinear_softmax(dtype, axis, opset, y_scale):
    """Exact: ORT's table of exponentials, its in-order float32 sum and its floor(1 / y_scale)."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (3, 5, 40)).astype(dtype)
    x[0, 0] = info.max  # a constant row
    params = {"xs": np.array(0.083, np.float32), "xz": np.array(info.min + 9, dtype),
              "ys": np.array(y_scale, np.float32), "yz": np.array(info.min, dtype)}
    model = contrib_model("QLinearSoftmax", {"x": x}, {"axis": axis, "opset": opset}, initializers=params,
                          input_names=["x", "xs", "xz", "ys", "yz"])
    check_on_every_target(model, {"x": x})


@pytest.mark.parametrize("dtype", QTYPES)
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [2, 3], "strides": [1, 2], "channels_last": 1},
])
@pytest.mark.parametrize("y_zero_point", [3, 4])
def test_qlinear_average_pool(dtype, attrs, y_zero_point):
    """x_scale = y_scale = 0.5 over 2x2 windows puts averages on .5 ties: ORT adds the output zero
    point before rounding, so an odd one moves them."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 9, 8, 3) if attrs.get("channels_last") else (2, 3, 9, 8)).astype(dtype)
    for scales in [(0.5, 0.5), (0.05, 0.0371)]:
        params = {"xs": np.array(scales[0], np.float32), "xz": np.array(info.min + 100, dtype),
                  "ys": np.array(scales[1], np.float32), "yz": np.array(y_zero_point, dtype)}
        model = contrib_model("QLinearAveragePool", {"x": x}, attrs, initializers=params,
                              input_names=["x", "xs", "xz", "ys", "yz"])
        check_on_every_target(model, {"x": x})


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_lstm(direction, per_column):
    """uint8 weights: ORT's u8s8 kernels on x86 without VNNI saturate int16 pair sums (an int8-weight
    model then differs from its own float LSTM by ~27% on AVX2), its u8u8 path is exact. What is
    left is float rounding: ORT's gates use MLAS's sigmoid/tanh approximations. ORT runs on one
    thread here: with more it splits the batch across threads and quantizes each part's H with its
    own scale, so its result depends on the thread count (1e-4 apart at 2 threads); one thread
    quantizes the whole [batch, H] at once, as fusegraph does."""
    d, t, batch, size, hidden = (2 if direction == "bidirectional" else 1), 6, 3, 10, 8
    x = rng.standard_normal((t, batch, size)).astype(np.float32)
    cols = 4 * hidden if per_column else 1
    init = {
        "w": rng.integers(0, 256, (d, size, 4 * hidden)).astype(np.uint8),
        "r": rng.integers(0, 256, (d, hidden, 4 * hidden)).astype(np.uint8),
        "b": (rng.standard_normal((d, 8 * hidden)) * 0.1).astype(np.float32),
        "h0": (rng.standard_normal((d, batch, hidden)) * 0.5).astype(np.float32),
        "c0": (rng.standard_normal((d, batch, hidden)) * 0.5).astype(np.float32),
        "ws": rng.uniform(0.001, 0.004, (d, cols) if per_column else d).astype(np.float32),
        "wz": np.full((d, cols) if per_column else d, 128, np.uint8),
        "rs": rng.uniform(0.001, 0.004, (d, cols) if per_column else d).astype(np.float32),
        "rz": np.full((d, cols) if per_column else d, 127, np.uint8),
        "lens": np.array([6, 4, 1], np.int32),
    }
    node = helper.make_node("DynamicQuantizeLSTM", ["x", "w", "r", "b", "lens", "h0", "c0", "", "ws", "wz", "rs", "rz"],
                            ["y", "yh", "yc"], domain=MS, hidden_size=hidden, direction=direction)
    model = make_model([node], {"x": x}, ["y", "yh", "yc"], init, 17, {MS: 1})
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    expected = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    check_on_every_target(model, {"x": x}, expected, rtol=1e-5, atol=1e-6)

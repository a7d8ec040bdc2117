"""RNN, GRU and LSTM on the ref target against ONNX Runtime: directions, layouts, optional inputs,
activations with alpha/beta, clip, sequence lengths."""

import numpy as np
import pytest
from onnx import helper

from tests.util import assert_close, make_model, node_check, run_fusegraph, run_ort

rng = np.random.default_rng(0)
T, N, I, H = 4, 3, 5, 6


def _weights(gates: int, dirs: int, peepholes: bool = False):
    w = {
        "X": rng.standard_normal((T, N, I)).astype(np.float32),
        "W": (rng.standard_normal((dirs, gates * H, I)) * 0.5).astype(np.float32),
        "R": (rng.standard_normal((dirs, gates * H, H)) * 0.5).astype(np.float32),
        "B": (rng.standard_normal((dirs, 2 * gates * H)) * 0.2).astype(np.float32),
    }
    return w


def _states(dirs: int, n: int = 1, batch_major: bool = False):
    shape = (N, dirs, H) if batch_major else (dirs, N, H)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


OPS = [("RNN", 1, 2), ("GRU", 3, 2), ("LSTM", 4, 3)]


@pytest.mark.parametrize("op,gates,n_out", OPS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_with_initial_state(op, gates, n_out, direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = _weights(gates, dirs)
    names = ["X", "W", "R", "B", "", "h0"]
    (inputs["h0"],) = _states(dirs)
    if op == "LSTM":
        (inputs["c0"],) = _states(dirs)
        names.append("c0")
    node_check(op, inputs, {"hidden_size": H, "direction": direction}, n_outputs=n_out, input_names=names)


@pytest.mark.parametrize("op,gates,n_out", OPS)
def test_sequence_lens_bidirectional(op, gates, n_out):
    inputs = _weights(gates, 2)
    inputs["lens"] = np.array([4, 2, 1], np.int32)
    node_check(op, inputs, {"hidden_size": H, "direction": "bidirectional"}, n_outputs=n_out)


@pytest.mark.parametrize("op,gates,n_out", OPS)
def test_batch_major_layout(op, gates, n_out):
    # ONNX Runtime has no layout=1: compare with its layout=0 result, transposed.
    inputs = _weights(gates, 2)
    names = ["X", "W", "R", "B", "", "h0"] + (["c0"] if op == "LSTM" else [])
    for name in names[5:]:
        (inputs[name],) = _states(2)
    outs = [f"y{k}" for k in range(n_out)]
    attrs = {"hidden_size": H, "direction": "bidirectional"}
    expected = run_ort(make_model([helper.make_node(op, names, outs, **attrs)], inputs, outs, opset=14), inputs)
    batch_major = dict(inputs, X=inputs["X"].transpose(1, 0, 2), **{n: inputs[n].transpose(1, 0, 2) for n in names[5:]})
    batch_major = {k: np.ascontiguousarray(v) for k, v in batch_major.items()}
    model = make_model([helper.make_node(op, names, outs, layout=1, **attrs)], batch_major, outs, opset=14)
    got = run_fusegraph(model, batch_major)
    assert_close(got, [expected[0].transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in expected[1:]])


@pytest.mark.parametrize("op,gates,n_out", OPS)
def test_no_bias_only_last_state(op, gates, n_out):
    inputs = _weights(gates, 1)
    del inputs["B"]
    outs = node_check(op, inputs, {"hidden_size": H}, n_outputs=n_out)
    assert outs[1].shape == (1, N, H)


def test_rnn_activation_with_alpha_and_clip():
    inputs = _weights(1, 2)
    node_check("RNN", inputs, {"hidden_size": H, "direction": "bidirectional", "clip": 0.5,
                               "activations": ["LeakyRelu", "HardSigmoid"],
                               "activation_alpha": [0.2, 0.3], "activation_beta": [0.4]}, n_outputs=2)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset_and_clip(linear_before_reset):
    inputs = _weights(3, 1)
    node_check("GRU", inputs, {"hidden_size": H, "linear_before_reset": linear_before_reset, "clip": 0.3},
               n_outputs=2)


def test_gru_custom_activations():
    inputs = _weights(3, 1)
    node_check("GRU", inputs, {"hidden_size": H, "activations": ["HardSigmoid", "Softsign"]}, n_outputs=2)


def test_lstm_peepholes_input_forget_clip():
    inputs = _weights(4, 1)
    inputs["lens"] = np.array([3, 4, 2], np.int32)
    (inputs["h0"],) = _states(1)
    (inputs["c0"],) = _states(1)
    inputs["P"] = (rng.standard_normal((1, 3 * H)) * 0.3).astype(np.float32)
    node_check("LSTM", inputs, {"hidden_size": H, "input_forget": 1, "clip": 0.5}, n_outputs=3)


def test_lstm_activations_elu_relu_affine():
    inputs = _weights(4, 1)
    node_check("LSTM", inputs, {"hidden_size": H, "activations": ["Sigmoid", "Elu", "Affine"],
                                "activation_alpha": [0.7, 0.5], "activation_beta": [0.1]}, n_outputs=3)

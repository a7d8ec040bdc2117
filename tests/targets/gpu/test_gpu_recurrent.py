"""RNN, GRU and LSTM on the gpu target (lower_recurrent.py) against ONNX Runtime: directions,
initial states, sequence lengths, peepholes, clip, activations; the layer runs on the device (the
static mode: no host step), weights as initializers as exported models have them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(3)
T, N, I, H = 3, 2, 5, 4
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _case(op: str, direction: str = "forward", lens=None, states: bool = True, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    inits = {"W": (rng.standard_normal((dirs, g * H, I)) * 0.5).astype(np.float32),
             "R": (rng.standard_normal((dirs, g * H, H)) * 0.5).astype(np.float32),
             "B": (rng.standard_normal((dirs, 2 * g * H)) * 0.2).astype(np.float32)}
    names = ["X", "W", "R", "B", "", "", ""]
    if lens is not None:
        inits["lens"] = np.array(lens, np.int32)
        names[4] = "lens"
    feeds = {"X": rng.standard_normal((T, N, I)).astype(np.float32)}
    if states:
        feeds["h0"] = rng.standard_normal((dirs, N, H)).astype(np.float32)
        names[5] = "h0"
        if op == "LSTM":
            feeds["c0"] = rng.standard_normal((dirs, N, H)).astype(np.float32)
            names[6] = "c0"
    if op == "LSTM" and attrs.pop("peepholes", False):
        inits["P"] = (rng.standard_normal((dirs, 3 * H)) * 0.3).astype(np.float32)
        names.append("P")  # after X, W, R, B, sequence_lens, initial_h, initial_c
    while names and names[-1] == "":
        names.pop()
    outs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=H, direction=direction, **attrs)
    return make_model([node], feeds, outs, initializers=inits, opset=14), feeds


CASES = [
    ("RNN", "bidirectional", None, {}),
    ("RNN", "forward", None, {"clip": 0.5, "activations": ["LeakyRelu"], "activation_alpha": [0.2]}),
    ("GRU", "reverse", None, {}),
    ("GRU", "forward", [3, 1], {"linear_before_reset": 1, "clip": 0.3}),
    ("GRU", "forward", None, {"activations": ["HardSigmoid", "Softsign"]}),
    ("LSTM", "forward", None, {}),
    ("LSTM", "bidirectional", [2, 3], {}),
    ("LSTM", "forward", [3, 2], {"peepholes": True, "input_forget": 1, "clip": 0.5}),
    ("LSTM", "forward", None, {"activations": ["Sigmoid", "Elu", "Affine"], "activation_alpha": [0.7, 0.5],
                               "activation_beta": [0.1]}),
]


@pytest.mark.parametrize("op,direction,lens,attrs", CASES, ids=lambda v: str(v) if isinstance(v, str) else None)
def test_recurrent_layer_runs_on_the_device_like_onnx_runtime(gpu_target, op, direction, lens, attrs):
    model, feeds = _case(op, direction, lens, **dict(attrs))
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    exe = p.executable
    assert not getattr(exe, "host_ops", []), exe.describe()
    assert any(op.lower() in line for line in exe.describe())
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)


def test_without_initial_states(gpu_target):
    model, feeds = _case("LSTM", "reverse", None, states=False)
    p = fusegraph.parse_onnx(model).compile(gpu_target)
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)

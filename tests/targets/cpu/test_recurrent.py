"""LSTM/GRU/RNN on the cpu target: the generated recurrence (kernels/recurrent.py) against the ONNX
node cases (their weights made constants, as exported models have them) and against the ref target
over the variants those cases leave out (clip, activations, sequence_lens, peepholes, coupled gates,
linear-before-reset, both directions with states)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from tests.onnx.suite import cases, compare
from tests.util import target_or_skip

WEIGHTS = {"LSTM": (1, 2, 3, 7), "GRU": (1, 2, 3), "RNN": (1, 2, 3)}  # W, R, B (and P) input positions


def _kernel_source(program) -> str:
    lib = program.executable.built.library
    return lib.source if lib is not None else ""


def _constant_weights(model: onnx.ModelProto, inputs: list[np.ndarray]):
    """The one-node model with W, R, B (and P) as initializers; the feeds of the other inputs."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    (node,) = model.graph.node
    names = [vi.name for vi in model.graph.input]
    fixed = {node.input[k] for k in WEIGHTS[node.op_type] if k < len(node.input) and node.input[k]}
    feeds = {}
    for name, value in zip(names, inputs):
        if name in fixed:
            model.graph.initializer.append(numpy_helper.from_array(value, name))
        else:
            feeds[name] = value
    keep = [vi for vi in model.graph.input if vi.name not in fixed]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, feeds


NODE_CASES = [c for c in cases("node") if any(k in c.name for k in ("lstm", "gru", "rnn"))]


@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: c.name)
def test_onnx_node_cases_with_constant_weights(case):
    cpu = target_or_skip("cpu")
    model, sets = case.load()
    for inputs, refs in sets:
        const_model, feeds = _constant_weights(model, inputs)
        p = fusegraph.parse_onnx(const_model)
        p.compile(cpu)
        assert "_dir(int k" in _kernel_source(p)  # the generated recurrence ran, not the reference
        outs = p.run(feeds)
        for r, o in zip(refs, outs):
            compare(r, o, case.rtol, case.atol)


def _model(op_type: str, hidden: int, t: int, batch: int, size: int, rng, *, direction="forward", seq_lens=None,
           initial=False, peepholes=False, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    inits = [numpy_helper.from_array((rng.standard_normal((dirs, gates * hidden, size)) * 0.4).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((dirs, gates * hidden, hidden)) * 0.4).astype(np.float32), "R"),
             numpy_helper.from_array((rng.standard_normal((dirs, 2 * gates * hidden)) * 0.3).astype(np.float32), "B")]
    ins = ["X", "W", "R", "B", "seq" if seq_lens is not None else "", "h0" if initial else ""]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [t, batch, size])]
    feeds = {"X": rng.standard_normal((t, batch, size)).astype(np.float32)}
    if seq_lens is not None:
        graph_inputs.append(helper.make_tensor_value_info("seq", TensorProto.INT32, [batch]))
        feeds["seq"] = np.array(seq_lens, np.int32)
    if initial:
        graph_inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [dirs, batch, hidden]))
        feeds["h0"] = rng.standard_normal((dirs, batch, hidden)).astype(np.float32)
    outs = ["Y", "Y_h"]
    if op_type == "LSTM":
        ins += ["c0" if initial else "", "P" if peepholes else ""]
        if initial:
            graph_inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [dirs, batch, hidden]))
            feeds["c0"] = rng.standard_normal((dirs, batch, hidden)).astype(np.float32)
        if peepholes:
            inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 3 * hidden)).astype(np.float32), "P"))
        outs.append("Y_c")
    while ins and not ins[-1]:
        ins.pop()
    node = helper.make_node(op_type, ins, outs, hidden_size=hidden, direction=direction, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                          for o in outs], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


VARIANTS = [
    ("LSTM", dict(direction="bidirectional", initial=True, peepholes=True)),
    ("LSTM", dict(clip=0.7, seq_lens=[5, 2, 0])),
    ("LSTM", dict(direction="reverse", input_forget=1, seq_lens=[3, 5, 1], initial=True)),
    ("LSTM", dict(direction="bidirectional", activations=["HardSigmoid", "Elu", "Softsign"] * 2,
                  activation_alpha=[0.3, 0.9, 1.0, 0.2, 1.1, 1.0], activation_beta=[0.4, 0.0, 0.0, 0.6, 0.0, 0.0])),
    ("GRU", dict(direction="bidirectional", initial=True, linear_before_reset=1, seq_lens=[5, 4, 2])),
    ("GRU", dict(clip=0.5, activations=["Sigmoid", "Relu"])),
    ("GRU", dict(direction="bidirectional", activations=["Sigmoid", "Tanh", "HardSigmoid", "Softplus"],
                 activation_alpha=[0.0, 0.0, 0.25, 0.0], activation_beta=[0.0, 0.0, 0.5, 0.0])),
    ("RNN", dict(direction="bidirectional", initial=True, activations=["Relu", "ScaledTanh"],
                 activation_alpha=[0.0, 1.5], activation_beta=[0.0, 0.7], seq_lens=[5, 1, 3])),
    ("RNN", dict(activations=["LeakyRelu"], activation_alpha=[0.1], clip=2.0)),
]


@pytest.mark.parametrize("op_type, attrs", VARIANTS, ids=[f"{o}-{k}" for k, (o, _) in enumerate(VARIANTS)])
def test_variants_match_ref(op_type, attrs):
    cpu = target_or_skip("cpu")
    model, feeds = _model(op_type, hidden=6, t=5, batch=3, size=4, rng=np.random.default_rng(len(attrs)), **attrs)
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    p = fusegraph.parse_onnx(model)
    p.compile(cpu)
    assert "_dir(int k" in _kernel_source(p)
    for e, a in zip(ref.run(feeds), p.run(feeds), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_saved_program_keeps_the_kernel(tmp_path):
    cpu = target_or_skip("cpu")
    model, feeds = _model("LSTM", hidden=5, t=3, batch=2, size=4, rng=np.random.default_rng(1),
                          direction="bidirectional", initial=True)
    p = fusegraph.parse_onnx(model)
    p.compile(cpu)
    fusegraph.save(p, tmp_path / "m.fgx")
    q = fusegraph.load(tmp_path / "m.fgx")
    for a, b in zip(p.run(feeds), q.run(feeds), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("hidden,size,threads", [(16, 8, 1), (192, 64, 2)])
def test_a_small_recurrence_runs_its_directions_on_one_thread(hidden, size, threads):
    """Waking a second thread for a few thousand multiply-adds costs more than their half (a small
    BiLSTM: 0.49 ms at two threads on the loaded VM, 0.02 at one): below SMALL_WORK one thread."""
    from fusegraph.targets.cpu.native_program import KERNEL, Region

    cpu = target_or_skip("cpu")
    model, feeds = _model("LSTM", hidden, 12, 2, size, np.random.default_rng(2), direction="bidirectional")
    p = fusegraph.parse_onnx(model)
    p.compile(cpu, fusegraph.CompileOptions(threads=2))
    rows, _ = p.executable.main.thread_plan()
    calls = [c for r in rows if isinstance(r[0], Region) for c in r[0].table if c.kind == KERNEL]
    assert calls and {c.threads for c in calls} == {threads}
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    for got, want in zip(p.run(feeds), ref.run(feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

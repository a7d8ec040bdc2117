"""DynamicQuantizeLSTM on the cpu target: the generated kernel (kernels/int8_lstm.py) against
the ref target over the variants tests/onnx/test_contrib_quantized_layers.py (against ORT) leaves
out: int8 weights, peepholes, coupled input-forget gates, clip, items of length 0, no initial state,
zero points that differ per column, and a feed from a graph input (run-time weights: the reference)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.onnx.contrib_util import MS
from tests.util import assert_close, make_model, target_or_skip


def _model(direction="bidirectional", wdtype=np.uint8, peepholes=False, lens=(5, 0, 3), initial=True,
           attrs=None, seed=0, t=5, size=7, hidden=6):
    rng = np.random.default_rng(seed)
    d, batch = (2 if direction == "bidirectional" else 1), len(lens) if lens else 3
    info = np.iinfo(wdtype)
    cols = 4 * hidden
    init = {
        "w": rng.integers(info.min, info.max + 1, (d, size, cols)).astype(wdtype),
        "r": rng.integers(info.min, info.max + 1, (d, hidden, cols)).astype(wdtype),
        "b": (rng.standard_normal((d, 8 * hidden)) * 0.1).astype(np.float32),
        "ws": rng.uniform(0.001, 0.004, (d, cols)).astype(np.float32),
        "wz": rng.integers(info.min // 2 + info.max // 4, info.max // 2 + info.max // 4, (d, cols)).astype(wdtype),
        "rs": rng.uniform(0.001, 0.004, d).astype(np.float32),
        "rz": np.full(d, info.max // 2, wdtype),
    }
    names = ["x", "w", "r", "b", "", "", "", "", "ws", "wz", "rs", "rz"]
    if lens:
        init["lens"] = np.array(lens, np.int32)
        names[4] = "lens"
    if initial:
        init["h0"] = (rng.standard_normal((d, batch, hidden)) * 0.5).astype(np.float32)
        init["c0"] = (rng.standard_normal((d, batch, hidden)) * 0.5).astype(np.float32)
        names[5:7] = ["h0", "c0"]
    if peepholes:
        init["p"] = (rng.standard_normal((d, 3 * hidden)) * 0.3).astype(np.float32)
        names[7] = "p"
    x = rng.standard_normal((t, batch, size)).astype(np.float32)
    node = helper.make_node("DynamicQuantizeLSTM", names, ["y", "yh", "yc"], domain=MS, hidden_size=hidden,
                            direction=direction, **(attrs or {}))
    return make_model([node], {"x": x}, ["y", "yh", "yc"], init, 17, {MS: 1}), {"x": x}


def _run(model, feeds, target):
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target(target) if target == "ref" else target)
    return p, p.run(feeds)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("variant", [
    {}, {"wdtype": np.int8}, {"peepholes": True}, {"attrs": {"input_forget": 1}}, {"attrs": {"clip": 0.7}},
    {"initial": False}, {"lens": None}, {"lens": (0, 0, 0)}, {"lens": (5, 5, 5), "seed": 3},
])
def test_generated_kernel_matches_ref(direction, variant):
    cpu = target_or_skip("cpu")
    model, feeds = _model(direction, **variant)
    p, got = _run(model, feeds, cpu)
    assert "fg_dqlstm" in p.executable.built.library.source  # the generated kernel ran, not the reference
    _, expected = _run(model, feeds, "ref")
    assert_close(got, expected, 1e-5, 1e-6)


def test_threads_split_directions_with_one_answer():
    """Two threads run the directions side by side (a layer big enough to be worth the second
    thread: recurrence_threads): the same numbers as one thread."""
    cpu = target_or_skip("cpu")
    model, feeds = _model(lens=(12, 3, 6), t=12, size=64, hidden=128)
    outs = []
    for threads in (1, 2):
        p = fusegraph.parse_onnx(model)
        p.compile(cpu, fusegraph.CompileOptions(threads=threads))
        outs.append(p.run(feeds))
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_layer_joins_the_native_program(monkeypatch):
    """The kernel is a call of the region around it (states read from a graph input's transpose:
    copied into a dense scratch first); the same bits as the steps run one by one."""
    from fusegraph.targets.cpu.native_program import Region

    cpu = target_or_skip("cpu")
    model, feeds = _model(lens=None)
    graph = model.graph
    graph.node[0].input[0] = "xt"
    graph.node.insert(0, helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]))
    graph.node.append(helper.make_node("Neg", ["yh"], ["nyh"]))
    graph.output[1].name = "nyh"
    feeds = {"x": np.ascontiguousarray(feeds["x"].transpose(1, 0, 2))}
    graph.input[0].type.tensor_type.shape.dim[0].dim_value, graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3, 5
    p, got = _run(model, feeds, cpu)
    rows, _ = p.executable.main.thread_plan()
    assert all(isinstance(r[0], Region) for r in rows)
    _, expected = _run(model, feeds, "ref")
    assert_close(got, expected, 1e-5, 1e-6)
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    for a, b in zip(got, _run(model, feeds, cpu)[1], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("big,threads", [(False, 1), (True, 2)])
def test_a_small_layer_runs_its_directions_on_one_thread(big, threads):
    from fusegraph.targets.cpu.native_program import KERNEL, Region

    cpu = target_or_skip("cpu")
    model, feeds = _model(lens=None, t=12, size=64, hidden=128) if big else _model(lens=None)
    for k, o in enumerate(model.graph.output):  # (read by steps: the layer's results are planned buffers)
        model.graph.node.append(helper.make_node("Neg", [o.name], [f"n{k}"]))
        o.name = f"n{k}"
    p = fusegraph.parse_onnx(model)
    p.compile(cpu, fusegraph.CompileOptions(threads=2))
    rows, _ = p.executable.main.thread_plan()
    calls = [c for r in rows if isinstance(r[0], Region) for c in r[0].table if c.kind == KERNEL]
    # (the Negs' generated kernels take both threads and fork by their own work)
    assert calls and (1 in {c.threads for c in calls}) == (threads == 1)

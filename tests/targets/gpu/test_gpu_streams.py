"""Execution contexts and async runs of the gpu target (contexts.py, streams.py). The context and
future bookkeeping runs everywhere (on the CPU through Triton's interpreter); the `gpu`-marked tests
check streams, events and graphs on CUDA."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import make_model

rng = np.random.default_rng(0)


def _model(scale: float = 1.0):
    w = (rng.standard_normal((16, 16)) * scale).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Tanh", ["y"], ["t"]),
             helper.make_node("Add", ["t", "x"], ["z"])]
    return make_model(nodes, {"x": np.zeros((4, 16), np.float32)}, ["z"], {"w": w})


def _compiled(target, model=None) -> fusegraph.Program:
    p = fusegraph.parse_onnx(model or _model())
    p.compile(target)
    return p


def _at_once(fn, args) -> None:
    """`fn(a)` for each of `args`, each on a thread of its own, all at once."""
    threads = [threading.Thread(target=fn, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _feeds(k: int) -> dict:
    return {"x": np.random.default_rng(k).standard_normal((4, 16)).astype(np.float32)}


def test_contexts_share_weights_and_own_their_buffers(gpu_target):
    p = _compiled(gpu_target)
    ctx = p.context()
    parent, child = p.executable, ctx.executable
    assert child is not parent and ctx.output_names == p.output_names
    assert child.memory[1] is parent.memory[1]  # one weight allocation
    assert child.memory[0].data_ptr() != parent.memory[0].data_ptr()  # activations of its own
    assert {u: t.data_ptr() for u, t in child.literal_tensors.items() if t is not None} == \
           {u: t.data_ptr() for u, t in parent.literal_tensors.items() if t is not None}
    for k in range(3):
        np.testing.assert_array_equal(ctx.run(_feeds(k))[0], p.run(_feeds(k))[0])


def test_a_contexts_outputs_survive_another_contexts_run(gpu_target):
    # device outputs alias their executable's buffers: a context's are its own
    t = _torch()
    p = _compiled(gpu_target)
    ctx = p.context()
    x0, x1 = (t.from_numpy(_feeds(k)["x"]).to(p.executable.device) for k in range(2))
    out0 = p.executable.run_device({"x": x0})[0]
    out1 = ctx.executable.run_device({"x": x1})[0]
    np.testing.assert_array_equal(out0.cpu().numpy(), p.run(_feeds(0))[0])
    np.testing.assert_array_equal(out1.cpu().numpy(), ctx.run(_feeds(1))[0])


@pytest.mark.gpu  # (Triton's interpreter is not thread-safe)
def test_contexts_run_from_threads_at_once(gpu_target):
    p = _compiled(gpu_target)
    contexts = [p.context() for _ in range(3)]
    want = {k: p.run(_feeds(k))[0] for k in range(6)}
    got: dict[int, np.ndarray] = {}

    def serve(i):
        for k in range(i, 6, 3):
            got[k] = contexts[i].run(_feeds(k))[0]

    _at_once(serve, range(3))
    for k in range(6):
        np.testing.assert_array_equal(got[k], want[k])


def test_run_async_gives_what_run_gives(gpu_target):
    p = _compiled(gpu_target)
    handles = [p.run_async(_feeds(k)) for k in range(3)]
    for k, handle in enumerate(handles):
        np.testing.assert_array_equal(handle.result()[0], p.run(_feeds(k))[0])
        assert handle.done()


def test_run_async_reports_a_bad_input_typed(gpu_target):
    from fusegraph.errors import InputError

    p = _compiled(gpu_target)
    with pytest.raises(InputError):
        p.run_async({"x": np.zeros((5, 16), np.float32)}).result()


def _as_numpy(v):
    return v if isinstance(v, np.ndarray) else v.cpu().numpy()


def test_a_pipeline_of_gpu_programs_and_a_host_step(gpu_target):
    first, second = _compiled(gpu_target), _compiled(gpu_target, _model(0.5))
    pipe = fusegraph.Pipeline([first, lambda outs: [_as_numpy(outs[0]) * 2], second])
    for k in range(2):
        want = second.run({"x": first.run(_feeds(k))[0] * 2})[0]
        np.testing.assert_array_equal(_as_numpy(pipe.run(_feeds(k))[0]), want)


@pytest.mark.gpu
def test_a_pipeline_keeps_intermediates_on_the_device_and_overlaps(gpu_target):
    first, second = _compiled(gpu_target), _compiled(gpu_target, _model(0.5))
    with fusegraph.Pipeline([first, second]) as pipe:
        got = list(pipe.map(_feeds(k) for k in range(8)))
    for k, g in enumerate(got):
        assert g[0].is_cuda  # the second stage read the first's device outputs
        np.testing.assert_array_equal(g[0].cpu().numpy(), second.run({"x": first.run(_feeds(k))[0]})[0])


# -- on CUDA: streams, events, graphs ----------------------------------------------------------------
def _torch():
    import torch

    return torch


@pytest.mark.gpu
def test_device_inputs_give_device_outputs_on_the_given_stream(gpu_target):
    t = _torch()
    p = _compiled(gpu_target)
    s = t.cuda.Stream()
    x = t.from_numpy(_feeds(0)["x"]).cuda()
    handle = p.run_async({"x": x}, stream=s)
    out = handle.result()[0]
    assert out.is_cuda and handle.done()
    np.testing.assert_array_equal(out.cpu().numpy(), p.run(_feeds(0))[0])


@pytest.mark.gpu
def test_four_contexts_on_four_streams_from_four_threads(gpu_target):
    t = _torch()
    p = _compiled(gpu_target)
    contexts = [p.context() for _ in range(4)]
    want = {k: p.run(_feeds(k))[0] for k in range(16)}
    inputs = {k: t.from_numpy(_feeds(k)["x"]).cuda() for k in range(16)}
    got = {}

    def serve(i):
        stream = t.cuda.Stream()
        for k in range(i, 16, 4):
            got[k] = contexts[i].run_async({"x": inputs[k]}, stream=stream).result()[0].cpu().numpy()

    _at_once(serve, range(4))
    for k in range(16):
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.gpu
def test_one_context_queued_on_two_streams_keeps_its_runs_apart(gpu_target):
    # its buffers serve one run at a time: the second stream waits for the first's run on the device
    t = _torch()
    p = _compiled(gpu_target)
    a, b = t.cuda.Stream(), t.cuda.Stream()
    xs = [t.from_numpy(_feeds(k)["x"]).cuda() for k in range(8)]
    handles = [p.run_async({"x": x}, stream=a if k % 2 else b) for k, x in enumerate(xs)]
    for k, handle in enumerate(handles):
        np.testing.assert_array_equal(handle.result()[0].cpu().numpy(), p.run(_feeds(k))[0])


@pytest.mark.gpu
def test_two_programs_on_two_streams_ordered_by_an_event(gpu_target):
    # a pipeline on the device: the second program reads the first's outputs after its event,
    # the host waiting only for the end
    t = _torch()
    first, second = _compiled(gpu_target), _compiled(gpu_target, _model(0.5))
    s1, s2 = t.cuda.Stream(), t.cuda.Stream()
    for k in range(4):
        x = t.from_numpy(_feeds(k)["x"]).cuda()
        h1 = first.run_async({"x": x}, stream=s1)
        h2 = second.run_async({"x": h1.device_outputs[0]}, stream=s2, after=[h1])
        want = second.run({"x": first.run(_feeds(k))[0]})[0]
        np.testing.assert_array_equal(h2.result()[0].cpu().numpy(), want)


def _dynamic(target) -> fusegraph.Program:
    from fusegraph.ir import Dim

    model = _model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    return fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [Dim(1, 8), 16]}).compile(target)


def _batch(k: int, n: int) -> dict:
    return {"x": np.random.default_rng(k).standard_normal((n, 16)).astype(np.float32)}


def test_a_dynamic_programs_context_shares_its_compiles_and_owns_its_buffers(gpu_target):
    p = _dynamic(gpu_target)
    ctx = p.context()
    parent, child = p.executable, ctx.executable
    assert child is not parent
    for n in (2, 5, 2):
        np.testing.assert_array_equal(ctx.run(_batch(n, n))[0], p.run(_batch(n, n))[0])
    assert len(parent.specializations) == 2 and child.specializations is parent.specializations
    for lens in parent.cached_shapes:
        mine, theirs = child.executable_for(lens), parent.executable_for(lens)
        assert mine is not theirs and mine.memory[1] is theirs.memory[1]  # one weight allocation
        assert mine.memory[0].data_ptr() != theirs.memory[0].data_ptr()  # activations of its own
    lens = parent.cached_shapes[0]
    assert child.executable_for(lens) is child.executable_for(lens)  # made once per shape


@pytest.mark.gpu
def test_dynamic_contexts_on_streams_from_threads(gpu_target):
    t = _torch()
    p = _dynamic(gpu_target)
    contexts = [p.context() for _ in range(3)]
    want = {k: p.run(_batch(k, 1 + k % 4))[0] for k in range(12)}
    got = {}

    def serve(i):
        stream = t.cuda.Stream()
        for k in range(i, 12, 3):
            x = t.from_numpy(_batch(k, 1 + k % 4)["x"]).cuda()
            got[k] = contexts[i].run_async({"x": x}, stream=stream).result()[0].cpu().numpy()

    for ctx in contexts:  # the shapes' contexts are made before serving (each captures a graph)
        for n in range(1, 5):
            ctx.run(_batch(0, n))
    _at_once(serve, range(3))
    for k in range(12):
        np.testing.assert_array_equal(got[k], want[k])

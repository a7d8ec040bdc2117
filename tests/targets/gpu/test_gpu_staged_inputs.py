"""Staged inputs (plan._staged_inputs): an fp16 program's fp32 input that is only converted to fp16
lives in an fp16 buffer, converted by its copy-in; an input read any other way keeps its type."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import InputError
from fusegraph.ir.dtypes import DType
from fusegraph.quantize.fp16 import quantize_fp16
from fusegraph.targets.gpu.lowering import storage_mode
from fusegraph.targets.gpu.plan import STAGED_INPUT, VIEW, make_plan
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(5)


def conv_model(second_reader: bool = False):
    """Conv(x) -> Relu; with `second_reader`, x is also an output (read as it is)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    outputs = ["y"]
    if second_reader:
        nodes.append(helper.make_node("Identity", ["x"], ["x_out"]))
        outputs.append("x_out")
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    x = {"x": rng.standard_normal((2, 3, 10, 9)).astype(np.float32)}
    return make_model(nodes, x, outputs, initializers={"w": w}), x


def fp16_plan(model, stage: bool):
    p = fusegraph.parse_onnx(model)
    quantize_fp16(p)
    return p, make_plan(p.main, storage_mode, stage_inputs=stage)


def test_an_input_only_converted_is_staged():
    p, plan = fp16_plan(conv_model()[0], stage=True)
    (x,) = p.main.parameters
    assert plan.staged == {x.uid: DType.float16}
    (conversion,) = [s for s in plan.steps if x in s.inputs]
    assert conversion.kind == STAGED_INPUT and plan.storage[conversion.ins.uid] == VIEW
    assert plan.owner[conversion.ins.uid] == x.uid
    assert plan.layouts[x.uid] == (0, 2, 3, 1)  # the convolution reads the buffer itself


def test_staging_is_asked_for_and_needs_every_reader_converting():
    assert not fp16_plan(conv_model()[0], stage=False)[1].staged  # (a submodule's plan: inputs handed in)
    assert not fp16_plan(conv_model(second_reader=True)[0], stage=True)[1].staged


def test_a_staged_input_runs_and_keeps_its_declared_type(gpu_target):
    torch = pytest.importorskip("torch")
    model, x = conv_model()
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    exe = p.executable
    assert exe.input_buffers()["x"].dtype == torch.float16
    want = run_ort(model, x)
    assert_close(p.run(x), want, rtol=2e-2, atol=2e-2)  # numpy in: converted on its way
    dev = exe.device
    (y,) = exe.run_device({"x": torch.from_numpy(x["x"]).to(dev)})
    assert_close([y.float().cpu().numpy()], want, rtol=2e-2, atol=2e-2)
    with pytest.raises(InputError, match="float32"):  # the input's type is fp32, whatever its buffer holds
        exe.run_device({"x": torch.from_numpy(x["x"]).to(dev).half()})
    exe.input_buffers()["x"].copy_(torch.from_numpy(2 * x["x"]))  # zero-copy input: copy_ converts
    (y2,) = exe.run_device()
    assert_close([y2.float().cpu().numpy()], run_ort(model, {"x": 2 * x["x"]}), rtol=2e-2, atol=2e-2)


def test_an_input_read_as_it_is_keeps_its_buffer_type(gpu_target):
    torch = pytest.importorskip("torch")
    model, x = conv_model(second_reader=True)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    assert p.executable.input_buffers()["x"].dtype == torch.float32
    assert_close(p.run(x), run_ort(model, x), rtol=2e-2, atol=2e-2)


def test_float16_io_takes_and_gives_float16_buffers_on_the_device(gpu_target):
    """CompileOptions(fp16_io=True): the input's buffer is float16 with nothing to stage, and the
    output is a float16 tensor (half the bytes of the float32 one it replaces)."""
    torch = pytest.importorskip("torch")
    model, x = conv_model(second_reader=True)  # x read as it is, too: a float32 buffer without fp16_io
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True, fp16_io=True))
    exe = p.executable
    assert exe.input_buffers()["x"].dtype == torch.float16 and not exe.plan.staged
    assert [s.dtype for s in exe.output_shapes] == [DType.float16] * 2
    assert exe.peak_memory.outputs == 2 * 8 * 10 * 9 * 2  # y in float16 (x_out is the input itself)
    half = x["x"].astype(np.float16)
    y, x_out = exe.run_device({"x": torch.from_numpy(half).to(exe.device)})
    assert y.dtype == torch.float16 and torch.equal(x_out.cpu(), torch.from_numpy(half))
    assert_close([y.float().cpu().numpy()], run_ort(model, {"x": half.astype(np.float32)})[:1], rtol=2e-2, atol=2e-2)

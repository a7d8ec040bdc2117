"""The gpu target's host steps and dynamic execution mode against ONNX Runtime: ops without a device
lowering run on the host (and say so), programs with run-time shapes run step by step, and
host_fallback=False refuses what the device cannot run. They run on the GPU when there is one,
else on the CPU through Triton's interpreter (see conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import CompileError
from fusegraph.targets import CompileOptions
from fusegraph.targets.gpu import GpuTarget
from fusegraph.targets.gpu.dynamic import DynamicExecutable, HostFallbackWarning
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(1)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def compile_with(target, model, **parse_kwargs):
    p = fusegraph.parse_onnx(model, **parse_kwargs)
    p.compile(target)
    return p


def lrn_model():
    """Relu -> LRN (no gpu lowering) -> Add -> Sigmoid: a host step between device steps."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("LRN", ["r"], ["n"], size=3),
             helper.make_node("Add", ["n", "x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["y"])]
    return make_model(nodes, {"x": randn(2, 4, 3, 3)}, ["y"])


def test_unlowered_op_runs_on_the_host_and_says_so(gpu_target):
    model = lrn_model()
    x = {"x": randn(2, 4, 3, 3)}
    with pytest.warns(HostFallbackWarning, match="lrn"):
        p = compile_with(gpu_target, model)
    exe = p.executable
    assert isinstance(exe, DynamicExecutable) and exe.host_ops == ["lrn"]
    lines = exe.describe()
    assert any("lrn: host (no gpu lowering)" in line for line in lines)
    assert sum("host" in line for line in lines) == 1  # relu, add and sigmoid stay on the device
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)  # runs again from fresh tensors


def test_host_fallback_off_is_a_compile_error_naming_the_op(gpu_target):
    # gpu_target: skipped without triton, which GpuTarget needs; else sets Triton's interpreter up
    target = GpuTarget(device=gpu_target.device, host_fallback=False)
    with pytest.raises(CompileError, match="no lowering for op 'lrn'"):
        compile_with(target, lrn_model())


def test_fully_lowered_static_program_keeps_the_static_mode(gpu_target):
    model = make_model([helper.make_node("Tanh", ["x"], ["y"])], {"x": randn(3, 5)}, ["y"])
    exe = compile_with(gpu_target, model).executable
    assert not isinstance(exe, DynamicExecutable) and exe.host_ops == []
    assert exe.describe() and "host" not in " ".join(exe.describe())


def test_nonzero_then_gather_has_a_data_dependent_shape(gpu_target):
    nodes = [helper.make_node("Greater", ["x", "zero"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["g"]), helper.make_node("Mul", ["g", "g"], ["y"])]
    model = make_model(nodes, {"x": randn(4, 5)}, ["y", "idx"], initializers={"zero": np.zeros((), np.float32)})
    with pytest.warns(HostFallbackWarning, match="nonzero"):
        p = compile_with(gpu_target, model)
    for _ in range(2):  # another count of positives: another shape for the device steps after nonzero
        x = {"x": randn(4, 5)}
        assert_close(p.run(x), run_ort(model, x), rtol=1e-5, atol=1e-6)
    assert any("built per input shapes" in line for line in p.executable.describe())


def test_reshape_with_a_run_time_shape(gpu_target):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    model = make_model(nodes, {"x": randn(2, 3, 4), "shape": np.array([6, 4], np.int64)}, ["y"])
    with pytest.warns(HostFallbackWarning, match="reshape_dynamic"):
        p = compile_with(gpu_target, model)
    for shape in ([6, 4], [3, 8], [-1, 2]):
        x = {"x": randn(2, 3, 4), "shape": np.array(shape, np.int64)}
        assert_close(p.run(x), run_ort(model, x), rtol=1e-5, atol=1e-6)


def test_dynamic_batch_runs_every_step_on_the_device(gpu_target):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ReduceSum", ["r", "axes"], ["y"], keepdims=1)]
    inits = {"w": randn(6, 4), "axes": np.array([1], np.int64)}
    model = make_model(nodes, {"x": randn(2, 6)}, ["y"], initializers=inits, opset=13)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    p = fusegraph.parse_onnx(model, map_dyn_input_dims={"x": [(1, 8), 6]})
    p.compile(gpu_target, CompileOptions(dynamic_cache_size=0))  # the dynamic mode, not one compile per shape
    exe = p.executable
    assert isinstance(exe, DynamicExecutable) and exe.host_ops == []
    for batch in (1, 5):
        x = {"x": randn(batch, 6)}
        assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-5)


def test_values_torch_cannot_hold_stay_on_the_host(gpu_target):
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=TensorProto.INT4),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT)]
    model = make_model(nodes, {"x": randn(3, 4) * 4}, ["y"], opset=21)
    with pytest.warns(HostFallbackWarning):
        p = compile_with(gpu_target, model)
    x = {"x": randn(3, 4) * 4}
    ref = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"))
    assert_close(p.run(x), ref.run(x), rtol=0, atol=0)
    assert p.run(x)[0].min() >= -8 and p.run(x)[0].max() <= 7  # saturated to int4's range


def test_host_loop_whose_body_returns_its_outer_condition_unchanged(gpu_target):
    # TorchScript's loops pass the enclosing `True` both as the Loop's condition input and, through an
    # Identity the importer removes, as the body's condition output: the host step's env needs it
    # although it is one of the step's inputs
    body = helper.make_graph(
        [helper.make_node("Tanh", ["h"], ["t"]), helper.make_node("Add", ["t", "bias"], ["h2"]),
         helper.make_node("Identity", ["go"], ["go_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("go_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h2", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("Constant", [], ["go"], value=helper.make_tensor("go", TensorProto.BOOL, [], [True])),
             helper.make_node("Exp", ["b"], ["bias"]),
             helper.make_node("Loop", ["steps", "go", "h0"], ["h_n"], body=body)]
    feeds = {"steps": np.array(4, np.int64), "h0": randn(2, 3), "b": randn(2, 3)}
    model = make_model(nodes, feeds, ["h_n"])
    with pytest.warns(HostFallbackWarning, match="loop"):
        p = compile_with(gpu_target, model)
    assert_close(p.run(feeds), run_ort(model, feeds), rtol=1e-5, atol=1e-6)

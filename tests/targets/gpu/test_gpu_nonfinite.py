"""NaN and +-inf on the gpu target as the reference computes them (tests/targets/test_nonfinite.py's
cases), and indices out of range as the op's ExecutionError.

Triton's interpreter models the GPU's NaN rules (tl.maximum's default is fmax, tl.max is nanmax),
so the generated kernels are checked here too; the `gpu`-marked tests cover what only CUDA runs:
cuBLASLt's ReLU epilogue of 1x1 convolutions and the kernels as compiled for the device."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import ExecutionError
from tests.ops.test_index_range import ERROR, INDEXING, model_of
from tests.targets.gpu.conftest import cuda_available
from tests.targets.test_nonfinite import CASES, X2, _model, special
from tests.util import make_model, run_fusegraph

n = helper.make_node
F = np.float32


def run_gpu(model, inputs, target):
    p = fusegraph.parse_onnx(model)
    p.compile(target)
    return p.run(inputs)


def assert_same_nonfinite(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    for sign in (1, -1):
        np.testing.assert_array_equal(np.isinf(got) & (got * sign > 0), np.isinf(want) & (want * sign > 0))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_gives_the_references_nan_and_inf(name, gpu_target):
    model, inputs = _model(name)
    assert_same_nonfinite(run_gpu(model, inputs, gpu_target)[0], run_fusegraph(model, inputs, "ref")[0])


def _triton_version() -> tuple[int, ...]:
    import triton

    return tuple(int(p) for p in triton.__version__.split(".")[:2])


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("cols", [8, 5000])  # one block of columns, and the looped kernel
def test_a_fused_reduction_keeps_a_nan(op, cols, gpu_target, request):
    # exp -> max -> mul is one fused_reduce kernel: its max must not be tl.max's NaN-skipping one
    if cols > 1024 and not cuda_available() and _triton_version() < (3, 8):
        request.applymarker(pytest.mark.xfail(strict=True, reason=(
            "Triton 3.6/3.7's interpreter cannot run a loop bounded by a kernel argument under numpy 2 "
            "(int() of a one-element array); the CUDA arm runs this case")))
    x = special((10, cols), 9)
    nodes = [n("Exp", ["x"], ["e"]), n(op, ["e"], ["m"], axes=[1], keepdims=1), n("Mul", ["m", "two"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"two": np.array(2, F)})
    assert_same_nonfinite(run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_sums_the_references_taps(mode, gpu_target):
    # an interpolation matrix would multiply every far tap's inf by 0: NaN across the whole axis
    x = np.array([1, np.inf, np.inf, 2, -np.inf, 3, np.nan, 4], F).reshape(1, 1, 1, 8)
    model = make_model([n("Resize", ["x", "", "s"], ["y"], mode=mode)], {"x": x}, ["y"],
                       {"s": np.array([1, 1, 1, 2], F)})
    assert_same_nonfinite(run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0])


@pytest.mark.parametrize("mode, scales", [("half_pixel", [1, 1, 2, 4]), ("align_corners", [1, 1, 2, 1.5])])
def test_linear_resize_by_torch_keeps_the_references_infinities(mode, scales, gpu_target):
    # torch's interpolate (lower_resize) weighs a tap by zero at clamped edges and exact sources: those
    # outputs come from the reference's taps, so an inf beside them is no NaN there
    x = np.array([[1, np.inf, 2, -np.inf], [3, 4, np.nan, 5], [np.inf, 6, 7, 8]], F).reshape(1, 1, 3, 4)
    model = make_model([n("Resize", ["x", "", "s"], ["y"], mode="linear", coordinate_transformation_mode=mode)],
                       {"x": x}, ["y"], {"s": np.array(scales, F)})
    got, want = run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0]
    assert_same_nonfinite(got, want)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.gpu
def test_a_1x1_convolution_with_bias_and_relu_keeps_a_nan(gpu_target):
    # the conv_gemm pattern: cuBLASLt's bias + ReLU epilogue on channels-last rows
    x = np.random.default_rng(0).standard_normal((1, 16, 8, 8)).astype(F)
    x[0, 3, 2, 2] = np.nan
    x[0, 5, 4, 4] = -np.inf
    w = np.random.default_rng(1).standard_normal((32, 16, 1, 1)).astype(F)
    nodes = [n("Conv", ["x", "w", "b"], ["c"]), n("Relu", ["c"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w, "b": np.ones(32, F)})
    assert_same_nonfinite(run_gpu(model, {"x": x}, gpu_target)[0], run_fusegraph(model, {"x": x}, "ref")[0])


def test_arg_extrema_take_a_nan_as_the_reference_does(gpu_target):
    for op in ("ArgMax", "ArgMin"):
        model = make_model([n(op, ["x"], ["y"], axis=1)], {"x": X2}, ["y"])
        np.testing.assert_array_equal(run_gpu(model, {"x": X2}, gpu_target)[0],
                                      run_fusegraph(model, {"x": X2}, "ref")[0])


@pytest.mark.parametrize("index", [-4, 4, -5])
@pytest.mark.parametrize("op", sorted(INDEXING))
def test_indices_out_of_range_are_the_ops_execution_error(op, index, gpu_target):
    # the first run after the compile's warm-up: on CUDA already a replay of the captured graph
    model, inputs = model_of(op, index)
    if index == -4:  # -n is the first position
        np.testing.assert_array_equal(run_gpu(model, inputs, gpu_target)[0], run_fusegraph(model, inputs, "ref")[0])
        return
    with pytest.raises(ExecutionError, match=ERROR.format(index)):
        run_gpu(model, inputs, gpu_target)


MODES = {"static": "GpuExecutable", "dynamic": "DynamicExecutable", "segmented": "SegmentedExecutable"}


def compile_in(mode: str, model, target, monkeypatch):
    """`model` compiled for the gpu target in one of its three execution modes (this small program
    fits the static one: the others are forced by refusing it, and the split too for dynamic)."""
    import fusegraph.targets.gpu as gpu
    from fusegraph.targets.gpu import segmented

    if mode != "static":
        monkeypatch.setattr(gpu, "_fits_static", lambda program: False)
    if mode == "dynamic":
        monkeypatch.setattr(segmented, "split_program", lambda main: None)
    p = fusegraph.parse_onnx(model)
    p.compile(target)
    assert type(p.executable).__name__ == MODES[mode]
    return p


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("op", sorted(INDEXING))
def test_one_program_takes_bad_and_good_indices_in_turn(op, mode, gpu_target, monkeypatch):
    # the flags are cleared every run (a stale one would fail the good runs), and the device outlives
    # a bad run (a device-side assert kills the CUDA context: every later run would fail); host
    # arrays and device tensors in (run_device reads the flags too)
    import torch

    model, good = model_of(op, -4)
    want = run_fusegraph(model, good, "ref")[0]
    p = compile_in(mode, model, gpu_target, monkeypatch)
    device = p.executable.device
    on_device = lambda feeds: {k: torch.from_numpy(v).to(device) for k, v in feeds.items()}  # noqa: E731
    for bad_index in (4, -5, 4):
        bad = model_of(op, bad_index)[1]
        for feed in (lambda f: f, on_device):
            with pytest.raises(ExecutionError, match=ERROR.format(bad_index)):
                p.run(feed(bad))
            got = p.run(feed(good))[0]
            np.testing.assert_array_equal(got if isinstance(got, np.ndarray) else got.cpu().numpy(), want)


class HostRead(AssertionError):
    pass


@pytest.mark.parametrize("op", sorted(INDEXING))
def test_the_index_checks_read_nothing_back_while_the_steps_run(op, gpu_target, monkeypatch):
    # what a CUDA graph's capture needs: a check reading a flag back cannot be captured (it was
    # skipped there, so the graph's replays handed bad indices to torch's asserting kernels)
    import torch

    model, bad = model_of(op, 4)
    exe = compile_in("static", model, gpu_target, monkeypatch).executable
    for name, buf in exe.input_buffers().items():
        buf.copy_(torch.from_numpy(bad[name]))

    def host_read(*args, **kwargs):
        raise HostRead("a step read a device value back to the host")

    with monkeypatch.context() as m:
        for method in ("__bool__", "item", "cpu", "numpy", "tolist"):
            m.setattr(torch.Tensor, method, host_read)
        exe._launch()
    assert [o.name for o in exe.index_checks.flagged()] == [exe.plan.steps[-1].ins.op.name]

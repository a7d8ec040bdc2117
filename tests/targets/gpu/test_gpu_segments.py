"""Segmented execution on the gpu target: a static prefix (conv / matmul work) in the static mode and
a data-dependent tail (NonMaxSuppression, NonZero, TopK with a run-time k) in the dynamic mode,
against ONNX Runtime and the ref target; the split's structure, device tensors in and out, and a
.fgx round trip. They run on the GPU when there is one, else on the CPU through Triton's
interpreter (see conftest.py)."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import InputError
from fusegraph.targets.gpu.dynamic import DynamicExecutable, HostFallbackWarning
from fusegraph.targets.gpu.executable import GpuExecutable
from fusegraph.targets.gpu.segmented import SegmentedExecutable
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(7)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def compile_quiet(target, model):
    p = fusegraph.parse_onnx(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        p.compile(target)
    return p


def check(p, model, x):
    """Outputs against ONNX Runtime and the ref target; returns them."""
    got = p.run(x)
    assert_close(got, run_ort(model, x), rtol=1e-4, atol=1e-5)
    ref = fusegraph.parse_onnx(model).compile(fusegraph.get_target("ref"))
    assert_close(got, ref.run(x), rtol=1e-4, atol=1e-5)
    return got


def detector_model():
    """Conv backbone -> boxes [1,64,4] and class scores [1,2,64] -> NonMaxSuppression -> the
    selected boxes gathered on the device (a dynamic step after the host step)."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "bshape"], ["b0"]),
        helper.make_node("Transpose", ["b0"], ["boxes"], perm=[0, 2, 1]),
        helper.make_node("Conv", ["r", "w2"], ["s0"]),
        helper.make_node("Sigmoid", ["s0"], ["s1"]),
        helper.make_node("Reshape", ["s1", "sshape"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["sel"]),
        helper.make_node("Gather", ["sel", "col2"], ["idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["flat"]),
        helper.make_node("Gather", ["flat", "idx"], ["picked"], axis=0),
        helper.make_node("Neg", ["picked"], ["y"]),
    ]
    inits = {"w": randn(4, 3, 3, 3), "w2": randn(2, 4, 1, 1), "bshape": np.array([1, 4, 64], np.int64),
             "sshape": np.array([1, 2, 64], np.int64), "max_out": np.array([40], np.int64),
             "iou": np.array([0.4], np.float32), "score_min": np.array([0.5], np.float32),
             "col2": np.array(2, np.int64), "zero": np.array([0], np.int64)}
    return make_model(nodes, {"x": randn(1, 3, 8, 8)}, ["sel", "y", "scores"], initializers=inits, opset=13)


def test_detector_backbone_runs_static_and_nms_dynamic(gpu_target):
    model = detector_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostFallbackWarning)  # NMS runs on the device (targets/gpu/nms.py)
        p = fusegraph.parse_onnx(model).compile(gpu_target)
    exe = p.executable
    assert isinstance(exe, SegmentedExecutable)
    assert isinstance(exe.prefix, GpuExecutable) and isinstance(exe.rest, DynamicExecutable)
    assert exe.host_ops == []
    lines = exe.describe()
    assert lines[0].startswith("static prefix: ") and "convolution" in " ".join(lines[:4])
    dynamic = next(k for k, line in enumerate(lines) if line.startswith("dynamic: "))
    assert "non_max_suppression: value (Triton kernels" in " ".join(lines[dynamic:]) and "host" not in " ".join(lines)
    sizes = set()
    for _ in range(3):  # other data: other numbers of selected boxes after the same captured prefix
        sel = check(p, model, {"x": randn(1, 3, 8, 8)})[0]
        sizes.add(sel.shape[0])
    assert len(sizes) > 1


def test_nonzero_after_a_matmul(gpu_target):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Greater", ["r", "half"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["r", "idx"], ["g"]), helper.make_node("Mul", ["g", "g"], ["y"])]
    model = make_model(nodes, {"x": randn(4, 6)}, ["y", "idx", "r"],
                       initializers={"w": randn(6, 5), "half": np.array(0.5, np.float32)})
    p = compile_quiet(gpu_target, model)
    exe = p.executable
    assert isinstance(exe, SegmentedExecutable) and exe.host_ops == ["nonzero"]
    assert exe.prefix.plan.steps[0].kind == "gemm_epilogue"  # matmul + relu, one step
    counts = {check(p, model, {"x": randn(4, 6)})[1].shape[0] for _ in range(3)}
    assert len(counts) > 1


def test_weights_both_parts_read_are_uploaded_once(gpu_target):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "thr"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "axes0"], ["idx"]),
             helper.make_node("Gather", ["r", "idx"], ["rows"], axis=0), helper.make_node("MatMul", ["rows", "w"], ["y"])]
    inits = {"w": randn(6, 6), "axes": np.array([1], np.int64), "thr": np.array(1.0, np.float32),
             "axes0": np.array([0], np.int64)}
    model = make_model(nodes, {"x": randn(5, 6)}, ["y"], initializers=inits, opset=13)
    p = compile_quiet(gpu_target, model)
    exe = p.executable
    assert isinstance(exe, SegmentedExecutable)
    shared = exe.split.shared_literals(exe.prefix.literal_tensors)
    (w,) = shared  # the matmul weights, read by a step of each part
    assert tuple(shared[w].shape) == (6, 6)
    assert exe.rest._device_literals[w] is exe.prefix.literal_tensors[exe.split.literal_pairs[w]]  # not a copy
    for _ in range(2):
        check(p, model, {"x": randn(5, 6)})


@pytest.mark.filterwarnings("ignore::fusegraph.targets.gpu.dynamic.HostFallbackWarning")
def test_top_k_with_a_run_time_k(gpu_target):
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"]), helper.make_node("Softmax", ["h"], ["s"], axis=-1),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], axis=-1)]
    model = make_model(nodes, {"x": randn(3, 8), "k": np.array([2], np.int64)}, ["v", "i"],
                       initializers={"w": randn(8, 10), "b": randn(10)}, opset=13)
    p = compile_quiet(gpu_target, model)
    assert isinstance(p.executable, SegmentedExecutable)
    for k in (2, 5, 1):
        v, i = check(p, model, {"x": randn(3, 8), "k": np.array([k], np.int64)})
        assert v.shape == (3, k) and i.shape == (3, k)


def test_dynamic_first_op_or_a_small_prefix_stays_fully_dynamic(gpu_target):
    first = [helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Transpose", ["nz"], ["t"], perm=[1, 0]),
             helper.make_node("Cast", ["t"], ["f"], to=1), helper.make_node("MatMul", ["f", "w"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    model = make_model(first, {"x": randn(3, 4)}, ["y"], initializers={"w": randn(2, 5)})
    p = compile_quiet(gpu_target, model)
    assert isinstance(p.executable, DynamicExecutable)
    check(p, model, {"x": (randn(3, 4) > 0).astype(np.float32)})
    # one comparison before NonZero is not worth a segment (under half the steps, no conv or GEMM)
    small = [helper.make_node("Greater", ["x", "zero"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["y"], to=1)]
    model = make_model(small, {"x": randn(3, 4)}, ["y"], initializers={"zero": np.array(0, np.float32)})
    assert isinstance(compile_quiet(gpu_target, model).executable, DynamicExecutable)


def test_run_device_with_torch_tensors(gpu_target):
    import torch

    model = detector_model()
    p = compile_quiet(gpu_target, model)
    exe = p.executable
    x = randn(1, 3, 8, 8)
    expected = p.run({"x": x})
    t = torch.from_numpy(x).to(exe.device)
    got = exe.run_device({"x": t})
    assert all(isinstance(g, torch.Tensor) and g.device == exe.device for g in got)
    assert_close([g.cpu().numpy() for g in got], expected, rtol=0, atol=0)
    assert_close([g.cpu().numpy() for g in p.run({"x": t})], expected, rtol=0, atol=0)  # run() takes tensors too
    kept = exe.run_device({"x": t}, copy_outputs=True)[2]  # scores: a prefix output, copied out of its buffer
    exe.run_device({"x": torch.zeros_like(t)})
    assert_close([kept.cpu().numpy()], [expected[2]], rtol=0, atol=0)
    with pytest.raises(InputError, match="missing input"):
        exe.run_device({"y": t})


def lrn_gemm_model():
    """1x1 conv + relu (a GEMM with an epilogue) -> LRN (a host step) -> matmul + bias + sigmoid:
    the rest is static, so it keeps its GEMM epilogue pattern; both parts record GEMM choices."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("LRN", ["r"], ["n"], size=3), helper.make_node("Flatten", ["n"], ["f"]),
             helper.make_node("MatMul", ["f", "w2"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["y"])]
    inits = {"w": randn(16, 8, 1, 1), "w2": randn(64, 16), "b": randn(16)}
    return make_model(nodes, {"x": randn(2, 8, 2, 2)}, ["y"], initializers=inits)


@pytest.mark.parametrize("make", [detector_model, lrn_gemm_model])
def test_fgx_round_trip_rebuilds_the_segments(gpu_target, monkeypatch, make):
    import fusegraph.targets.gpu as gpu
    from fusegraph.targets.gpu.interpreter import interpreted_target

    model = make()
    target = interpreted_target(gemm="triton") if gpu_target.device == "cpu" else gpu.GpuTarget(gemm="triton")
    p = compile_quiet(target, model)
    exe = p.executable
    assert isinstance(exe, SegmentedExecutable)
    x = {"x": randn(*[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim])}
    expected = check(p, model, x)
    artifacts = gpu.TARGET.export_artifacts(exe)
    assert {f"triton/{n}.py" for n in {**exe.prefix.sources, **exe.rest.sources}} <= set(artifacts)
    if make is lrn_gemm_model:  # GEMM choices of both parts, reused when loaded
        assert exe.prefix.tuning and set(exe.tuning) > set(exe.prefix.tuning)
        assert json.loads(artifacts["autotune.json"]) == exe.tuning
    monkeypatch.setattr(gpu, "TARGET", gpu_target)  # what get_target("gpu") gives when the file is loaded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        loaded = fusegraph.load_buffer(fusegraph.save_buffer(p))
    lexe = loaded.executable
    assert isinstance(lexe, SegmentedExecutable)
    assert [re.sub(r"%\d+", "%", line) for line in lexe.describe()] == [re.sub(r"%\d+", "%", line) for line in exe.describe()]
    assert_close(loaded.run(x), expected, rtol=0, atol=0)
    assert lexe.tuning == exe.tuning  # (the rest chooses at its first run: its shapes may vary)


def test_if_bodies_read_prefix_values(gpu_target):
    """The If runs on the host in the rest; its branches read the prefix's matmul output from the
    enclosing graph, so that value crosses the boundary (copied submodules keep their outer reads)."""
    then = helper.make_graph([helper.make_node("Relu", ["h"], ["t"])], "then", [],
                             [helper.make_empty_tensor_value_info("t")])
    other = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [],
                              [helper.make_empty_tensor_value_info("e")])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    model = make_model(nodes, {"x": randn(3, 4), "c": np.array(True)}, ["y", "h"], initializers={"w": randn(4, 5)})
    p = compile_quiet(gpu_target, model)
    exe = p.executable
    assert isinstance(exe, SegmentedExecutable) and exe.host_ops == ["if"]
    assert len(exe.split.boundary) == 1  # h, read by the branches only
    for c in (True, False):
        check(p, model, {"x": randn(3, 4), "c": np.array(c)})


def with_nms(model, classes: int):
    """`model` (a YOLOv8 export: output0 [1, 4 + classes, anchors], centre-format boxes) ending in
    NonMaxSuppression, as models exported "with NMS" do; output0 stays an output."""
    import onnx

    g = model.graph
    inits = {"b_lo": [0], "b_hi": [4], "s_hi": [4 + classes], "axis1": [1]}
    g.initializer.extend(onnx.numpy_helper.from_array(np.array(v, np.int64), k) for k, v in inits.items())
    g.initializer.extend([onnx.numpy_helper.from_array(np.array([100], np.int64), "max_out"),
                          onnx.numpy_helper.from_array(np.array([0.45], np.float32), "iou"),
                          onnx.numpy_helper.from_array(np.array([0.25], np.float32), "score_min")])
    g.node.extend([
        helper.make_node("Slice", ["output0", "b_lo", "b_hi", "axis1"], ["xywh"]),
        helper.make_node("Transpose", ["xywh"], ["boxes"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["output0", "b_hi", "s_hi", "axis1"], ["scores"]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["selected"],
                         center_point_box=1)])
    g.output.extend([helper.make_empty_tensor_value_info(n) for n in ("boxes", "scores", "selected")])
    return model


def nms_of(boxes, scores):
    """ONNX Runtime's NonMaxSuppression of fusegraph's own boxes and scores (near-ties decided alike)."""
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_min"], ["selected"],
                              center_point_box=1)]
    inits = {"max_out": np.array([100], np.int64), "iou": np.array([0.45], np.float32),
             "score_min": np.array([0.25], np.float32)}
    return run_ort(make_model(nodes, {"boxes": boxes, "scores": scores}, ["selected"], initializers=inits, opset=13),
                   {"boxes": boxes, "scores": scores})[0]


def test_small_yolo_with_nms(gpu_target):
    from fusegraph.models.yolo import build_yolov8, sample_yolov8

    model = with_nms(build_yolov8(num_classes=3, width=0.0625, depth=0.33, image_size=64), 3)
    x = sample_yolov8(1, rng, image_size=64)
    p = fusegraph.parse_onnx(model, map_input_dims={"images": [1, 3, 64, 64]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HostFallbackWarning)
        p.compile(gpu_target)
    exe = p.executable
    assert isinstance(exe, SegmentedExecutable) and exe.host_ops == []  # NMS on the device
    out, boxes, scores, selected = p.run(x)
    want = run_ort(model, x)[0]
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4 * float(np.abs(want).max()))
    np.testing.assert_array_equal(selected, nms_of(boxes, scores))


@pytest.mark.gpu
def test_yolov8n_with_nms_captures_its_backbone_and_beats_the_dynamic_mode(monkeypatch):
    """On a GPU: YOLOv8n at 640 ending in NMS replays its backbone as one CUDA graph and runs faster
    than the same program entirely in the dynamic mode (what it ran in before segmentation)."""
    import time

    import torch

    from fusegraph.models import get_model, sample_inputs
    from fusegraph.targets.gpu import GpuTarget

    model = with_nms(get_model("yolov8n"), 80)
    x = sample_inputs("yolov8n", batch=1)

    def build():
        p = fusegraph.parse_onnx(model, map_input_dims={"images": [1, 3, 640, 640]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HostFallbackWarning)
            return p.compile(GpuTarget())

    def per_run(p, n=20):
        t = torch.from_numpy(x["images"]).cuda()
        for _ in range(3):
            p.executable.run_device({"images": t})
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            p.executable.run_device({"images": t})
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / n

    seg = build()
    exe = seg.executable
    assert isinstance(exe, SegmentedExecutable) and exe.graph is not None
    out, boxes, scores, selected = seg.run(x)
    want = run_ort(model, x)[0]
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4 * float(np.abs(want).max()))
    np.testing.assert_array_equal(selected, nms_of(boxes, scores))
    monkeypatch.setattr(GpuTarget, "_lower_segmented", lambda *a: None)
    dyn = build()
    assert isinstance(dyn.executable, DynamicExecutable)
    t_seg, t_dyn = per_run(seg), per_run(dyn)
    print(f"yolov8n+NMS batch 1: segmented {t_seg * 1e3:.2f} ms, dynamic {t_dyn * 1e3:.2f} ms per run")
    assert t_seg < t_dyn

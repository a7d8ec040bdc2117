"""Per-step profiles and captures of the gpu target (CUDA events on a GPU, host times through
Triton's interpreter elsewhere): every step named by its ONNX nodes, the outputs those of a plain run."""

from __future__ import annotations

import numpy as np
from onnx import helper

import fusegraph
from fusegraph.profile import by_onnx_op, chrome_trace
from tests.profile.models import feeds, small_cnn
from tests.util import make_model


def test_profile_names_steps_and_keeps_outputs(gpu_target):
    p = fusegraph.parse_onnx(small_cnn())
    p.compile(gpu_target)
    expected = p.run(feeds())
    prof = p.executable.profile(feeds(), runs=3)
    assert len(prof.runs) == 3
    named = {n.name for info in prof.steps for n in info.origin}
    assert {"conv", "pool", "fc"} <= named
    assert all(min(ts) >= 0 for ts in prof.step_times().values())
    assert any("Conv" in r.key for r in by_onnx_op(prof))
    if p.executable.device.type == "cuda":  # device times from events, launches on a host lane
        assert prof.lanes["host"] and len(prof.lanes["host"]) == 3
        lanes = {e["tid"] for e in chrome_trace(prof)["traceEvents"] if e["ph"] == "X"}
        assert len(lanes) == 2
    np.testing.assert_allclose(p.run(feeds())[0], expected[0], rtol=0, atol=0)  # the graph still replays


def test_capture_keeps_every_step_value(gpu_target):
    p = fusegraph.parse_onnx(small_cnn())
    p.compile(gpu_target)
    values = p.executable.capture(feeds())
    out = p.main.outputs[0]
    np.testing.assert_allclose(np.asarray(values[out.uid]), p.run(feeds())[0], rtol=1e-6, atol=1e-6)


def test_a_pattern_step_is_named_by_its_pattern(gpu_target):
    # a product with its bias add runs as one library call: the profile names it so, not by the
    # last instruction it covers (an attention's would read "dot")
    from onnx import helper

    from tests.util import make_model

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    inits = {"w": rng.standard_normal((16, 8)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)}
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    p = fusegraph.parse_onnx(make_model(nodes, x, ["y"], initializers=inits, opset=13))
    p.compile(gpu_target)
    gemm = next(s for s in p.executable.plan.steps if s.kind == "gemm_bias")
    assert gemm.ins.op.name != "gemm_bias"  # the pattern's last instruction is the add
    prof = p.executable.profile(x, runs=1)
    assert {info.uid: info.kernel for info in prof.steps}[gemm.ins.uid] == "gemm_bias"


def test_a_static_compile_logs_where_its_time_goes(gpu_target, monkeypatch, tmp_path):
    """Executable.compile_log: the plan and the lowering everywhere; on a GPU also the kernel compiles
    (each in the lane of its compile thread, inside the compile-all phase), cuDNN's first calls, every
    GEMM problem's timing (inside the choices made after the walk, while the kernels compile), the
    first run and the graph capture, in that order. `fusegraph trace` draws them."""
    from fusegraph.targets.gpu import kernels

    p = fusegraph.parse_onnx(small_cnn())
    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)  # on a GPU: tuned afresh, its problems timed
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    log = p.executable.compile_log
    top = [name for name, lane, _, _ in log if lane == "compile" and not name.startswith(("tune ", "step "))]
    if p.executable.device.type != "cuda":
        assert top == ["plan and weights", "lower steps"]
        return
    # the convolution is cuDNN's: its first call (its plan) is made after the walk, before the choices
    assert top == ["plan and weights", "lower steps", "compile kernels", "submit compiles",
                   "library first calls while compiling", "choices while compiling", "first run", "capture graph"]
    spans = {name: (t0, t1) for name, lane, t0, t1 in log if lane == "compile"}
    threads = [(name, t0, t1) for name, lane, t0, t1 in log if lane.startswith("compile thread")]
    compiles = [(t0, t1) for name, t0, t1 in threads if name.startswith("compile ")]
    assert compiles and {name for name, _, _ in threads if not name.startswith(("compile ", "worker "))} <= {"launcher"}
    compiled = {(name.split(" ", 1)[1], lane) for name, lane, _, _ in log if name.startswith("compile ")}
    assert {(name.split(" ", 1)[1], lane) for name, lane, _, _ in log if name.startswith("worker ")} <= compiled
    first, submit = spans["compile kernels"], spans["submit compiles"]
    assert first[0] <= submit[0] <= submit[1] <= first[1]
    assert min(t0 for t0, _ in compiles) >= first[0]
    assert all(t1 <= first[1] for t0, t1 in compiles if t0 < first[1])  # the phase waits for what it began
    # a GEMM large enough for tuning to time several configs (more than autotune.SMALL_MACS)
    x = {"x": np.random.default_rng(0).standard_normal((4096, 256)).astype(np.float32)}
    w = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                       x, ["y"], initializers={"w": w})
    q = fusegraph.parse_onnx(model)
    q.compile(gpu_target, fusegraph.CompileOptions(fp16=True))
    log = q.executable.compile_log
    run = next((t0, t1) for name, lane, t0, t1 in log if name == "choices while compiling")
    tunes = [(t0, t1) for name, lane, t0, t1 in log if name.startswith("tune dot 4096x256x256")]
    assert tunes and all(run[0] <= t0 <= t1 <= run[1] for t0, t1 in tunes)

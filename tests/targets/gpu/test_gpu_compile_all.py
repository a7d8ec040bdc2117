"""kernels.compile_all: a first pass over a program's steps in which launches only compile, all at
once, before its real first run. The tuner there chooses nothing and submits the compiles of the
candidates its choice will time; generated kernels are compiled and not launched."""

from __future__ import annotations

import numpy as np
import pytest

H200 = {"device": "NVIDIA H200", "torch": "2.x", "triton": "3.x"}


@pytest.fixture()
def compile_all(gpu_target, tmp_path, monkeypatch):
    """kernels.compile_all, its tuning cache under tmp_path; skipped where Triton cannot compile asynchronously."""
    from fusegraph.targets.gpu import kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    with kernels.compile_all() as able:
        if not able:
            pytest.skip("this Triton has no asynchronous compiles (Triton < 3.4)")
    return kernels.compile_all


def candidates(log: list[str]):
    """A library candidate and three template configs whose compile hooks log what they compile (the
    second cannot be built)."""
    from fusegraph.targets.gpu.autotune import Candidate

    def template(name):
        def make():
            def run(*args):
                log.append(f"run {name}")
            run.compile = lambda *args: log.append(f"compile {name}")
            return run
        return Candidate(name, make)

    def broken():
        raise RuntimeError("out of shared memory")

    return [Candidate("library", lambda: lambda *args: log.append("run library")), template("64x64x32"),
            Candidate("fast_but_broken", broken), template("128x128x32")]


def test_inside_compile_all_nothing_is_chosen_or_timed(compile_all):
    from fusegraph.targets.gpu.autotune import Tuner

    def measure(run):
        run()
        return {"run library": 2.0, "run 64x64x32": 1.0, "run 128x128x32": 3.0}[log[-1]]

    log: list[str] = []
    tuner = Tuner(H200, measure=measure)
    with compile_all():
        name, run = tuner.choose("dot 64x64x64", candidates(log), (1, 2))
        run()
    assert name is None and log == ["compile 64x64x32", "compile 128x128x32", "run library"]
    assert tuner.timed == 0 and tuner.cache.load() == {}
    log.clear()
    assert tuner.choose("dot 64x64x64", candidates(log))[0] == "64x64x32"  # after it: timed as ever
    assert tuner.timed == 1


def test_a_known_choice_or_a_forced_mode_compiles_only_what_it_will_run(compile_all):
    from fusegraph.targets.gpu.autotune import Tuner

    def no_timing(run):
        raise AssertionError("not timed")

    for tuner, compiled, ran in (
            (Tuner(H200, recorded={"k": {"name": "128x128x32"}}, measure=no_timing), ["compile 128x128x32"], "128x128x32"),
            (Tuner(H200, mode="library", measure=no_timing), [], "library"),
            (Tuner(H200, mode="triton", measure=no_timing), ["compile 64x64x32", "compile 128x128x32"], "64x64x32")):
        log: list[str] = []
        with compile_all():
            name, run = tuner.choose("k", candidates(log))
            run()
        assert name is None and log == [*compiled, f"run {ran}"]
    log = []
    with compile_all():  # a float32 GEMM: the library alone, no template compiled
        name, run = Tuner(H200, measure=no_timing).choose("k", candidates(log), library_first=True)
        run()
    assert name is None and log == ["run library"]
    log = []
    with compile_all():  # "triton" mode where no template builds: the library's run, as outside the pass
        broken = [c for c in candidates(log) if c.name in ("library", "fast_but_broken")]
        name, run = Tuner(H200, mode="triton", measure=no_timing).choose("k", broken)
        run()
    assert name is None and log == ["run library"]


@pytest.mark.gpu
def test_a_launch_inside_compile_all_compiles_and_does_not_run(compile_all):
    import torch

    from fusegraph.ir.dtypes import DType
    from fusegraph.ops.scalar import Var, call
    from fusegraph.targets.gpu.launch import PointwiseLauncher

    body = call("add", Var(0), Var(0))  # x + x, a kernel no other test generates with this launch form
    launcher = PointwiseLauncher(body, [DType.float32], DType.float32)
    x = torch.arange(3 * 77, dtype=torch.float32, device="cuda").reshape(3, 77)
    out = torch.zeros_like(x)
    with compile_all():
        launcher(out, x)
    torch.cuda.synchronize()
    assert not out.any()  # compiled, not launched
    launcher(out, x)
    np.testing.assert_array_equal(out.cpu().numpy(), 2 * x.cpu().numpy())


@pytest.mark.gpu
def test_index_wrapping_inside_compile_all_submits_its_kernel_and_reads_zeros(compile_all):
    """An indexing step's wrap kernel in the pass that only compiles: positions 0 (safe for the
    gather after it), its flag untouched; after the pass it wraps and flags as it should."""
    import torch

    from fusegraph.targets.gpu.index_checks import wrapped

    idx = torch.tensor([3, -1, 9], device="cuda")
    cell = torch.zeros(1, dtype=torch.bool, device="cuda")
    with compile_all():
        got = wrapped(idx, 5, cell)
    assert got.tolist() == [0, 0, 0] and not cell.item()
    assert wrapped(idx, 5, cell).tolist() == [3, 4, 4] and cell.item()


def test_calls_after_the_walk_run_when_the_body_is_done(compile_all):
    """kernels.after_walk: inside compile_all a call waits for the scope's body (the warm-up's walk)
    and runs before the scope is left, a failing one dropped; outside it runs at once."""
    from fusegraph.targets.gpu import kernels

    log = []

    def broken():
        raise RuntimeError("the library cannot take this shape")
    with compile_all():
        kernels.after_walk(lambda: log.append("first"))
        kernels.after_walk(broken)
        kernels.after_walk(lambda: log.append("second"))
        log.append("walked")
    assert log == ["walked", "first", "second"]
    kernels.after_walk(lambda: log.append("now"))
    assert log[-1] == "now"
    with pytest.raises(RuntimeError):
        kernels.after_walk(broken)  # outside the scope its error is the caller's


def test_library_first_calls_come_before_the_choices(compile_all):
    """after_walk(library=True): a library's first call (which waits for no compile) runs right after
    the walk, before the tuned steps' choices registered ahead of it (which wait for theirs)."""
    from fusegraph.targets.gpu import kernels

    log = []
    with compile_all():
        kernels.after_walk(lambda: log.append("choice"))
        kernels.after_walk(lambda: log.append("cudnn plan 1"), library=True)
        kernels.after_walk(lambda: log.append("cudnn plan 2"), library=True)
    assert log == ["cudnn plan 1", "cudnn plan 2", "choice"]


def test_choices_that_compile_nothing_come_after_those_that_may(compile_all):
    """after_walk(compiles=False): a choice that submits no compile (attention's) runs after the
    choices that may submit one (a GEMM's chosen kernel), whichever was registered first, so those
    compiles overlap its timing; the library's first calls still come first."""
    from fusegraph.targets.gpu import kernels

    log = []
    with compile_all():
        kernels.after_walk(lambda: log.append("attention"), compiles=False)
        kernels.after_walk(lambda: log.append("gemm 1"))
        kernels.after_walk(lambda: log.append("cudnn plan"), library=True)
        kernels.after_walk(lambda: log.append("gemm 2"))
    assert log == ["cudnn plan", "gemm 1", "gemm 2", "attention"]


def test_a_library_convolution_runs_after_the_walk_and_right(gpu_target):
    """A grouped convolution (the library's: cuDNN on a GPU) in compile_all's walk writes nothing;
    it runs when the walk is done (its plan for the shapes built while the kernels compile), and the
    program's result is ONNX Runtime's."""
    from onnx import helper

    import fusegraph
    from fusegraph.targets.gpu import kernels
    from tests.util import assert_close, make_model, run_ort

    rng = np.random.default_rng(3)
    x = {"x": rng.standard_normal((2, 4, 9, 9)).astype(np.float32)}
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])], x, ["y"],
                       initializers={"w": w})
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    exe = p.executable
    out = exe._outputs[0][0].t
    kinds = [s.kind for s in exe.plan.steps]
    assert kinds == ["convolution"], kinds
    with kernels.compile_all() as able:
        if not able:
            pytest.skip("this Triton has no asynchronous compiles (Triton < 3.4)")
        exe._inputs["x"][0].copy_(exe._inputs["x"][0].new_tensor(x["x"]))
        out.fill_(7.0)
        exe._run_steps()
        assert bool((out == 7.0).all())  # not yet run
    want = run_ort(model, x)[0]
    assert_close([out.cpu().numpy()], [want], rtol=1e-4, atol=1e-4)
    assert_close(p.run(x), [want], rtol=1e-4, atol=1e-4)


def test_the_attention_pass_computes_nothing_and_calls_the_library_after_the_walk(compile_all, monkeypatch):
    """Attention in compile_all's pass: an unwritten output in the query's dim order comes back at
    once; the candidate the pass would have run (the library's first call on these shapes: cuDNN's
    graph build) runs after the walk."""
    import torch

    from fusegraph.targets.gpu import lower_attention
    from fusegraph.targets.gpu.autotune import Tuner

    calls = []
    monkeypatch.setattr(lower_attention.TunedAttention, "_sdpa", lambda self, backend: lambda *a: calls.append(a))
    tuned = lower_attention.TunedAttention(Tuner.for_device(torch.device("cpu")), None, False)
    q = torch.zeros(2, 5, 3, 8, dtype=torch.float16).transpose(1, 2)  # [B, H, L, D] over [B, L, H, D]
    k = v = torch.zeros(2, 3, 5, 8, dtype=torch.float16)
    with compile_all():
        out = tuned(q, k, v, None, None)
        assert calls == [] and tuned.run is None
        assert out.shape == q.shape and out.stride() == q.stride()
    assert len(calls) == 1 and calls[0][0] is q


def test_the_compile_scopes_hand_the_gil_back_quickly_and_restore_the_interval(compile_all):
    """Inside the compile scopes the switch interval is kernels.HANDOFF_S (the walk's tensor calls take
    the GIL back from the compile threads sooner); scopes open in several threads at once restore the
    caller's interval only when the last one closes."""
    import sys
    import threading

    from fusegraph.targets.gpu import kernels

    before = sys.getswitchinterval()
    with compile_all():
        assert sys.getswitchinterval() == pytest.approx(min(before, kernels.HANDOFF_S))
    assert sys.getswitchinterval() == before
    opened, release = threading.Event(), threading.Event()

    def other():
        with kernels.quick_gil_handoff():
            opened.set()
            release.wait(10)
    thread = threading.Thread(target=other)
    thread.start()
    opened.wait(10)
    with kernels.quick_gil_handoff():
        pass
    assert sys.getswitchinterval() == pytest.approx(min(before, kernels.HANDOFF_S))  # the other's is still open
    release.set()
    thread.join()
    assert sys.getswitchinterval() == before

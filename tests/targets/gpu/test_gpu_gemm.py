"""GEMMs with fused epilogues on the gpu target: which matmuls absorb which reader (patterns.py), the
Triton template forced over cuBLAS (results against ONNX Runtime, on the GPU or through Triton's
interpreter), and the autotuner's choices: timed once, cached on disk per device, failing candidates
dropped, recorded on the executable and saved with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.passes import generic_pipeline, run_pipeline
from fusegraph.targets.gpu.patterns import match_groups
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(5)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def compile_check(target, model, x, fp16=False):
    p = fusegraph.parse_onnx(model)
    p.compile(target, fusegraph.CompileOptions(fp16=fp16))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)
    return p


def conv_silu_model():
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    x = {"x": randn(2, 24, 5, 7)}
    return make_model(nodes, x, ["y"], initializers={"w": randn(40, 24, 1, 1) * 0.3, "b": randn(40)}), x


def gelu_residual_model():
    # BERT's FFN output: MatMul + bias, GELU, residual add (the dot's rows split back into [B, S])
    nodes = [helper.make_node("MatMul", ["h", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Gelu", ["mb"], ["g"]), helper.make_node("Add", ["g", "h"], ["y"])]
    x = {"h": randn(2, 9, 48)}
    return make_model(nodes, x, ["y"], initializers={"w": randn(48, 48) * 0.2, "b": randn(48)}, opset=20), x


def k_form(source: str) -> str:
    """Whether a GEMM template's kernel takes K as a "constant" (tl.constexpr) or an "argument"."""
    (params,) = [line for line in source.splitlines() if line.startswith("def mm_")]
    return "constant" if ", K: tl.constexpr," in params else "argument" if ", K, " in params else "none"


def optimized(model):
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, generic_pipeline())
    return p


# -- pattern decisions ---------------------------------------------------------------------------------
def test_matmuls_absorb_the_readers_the_library_epilogues_leave():
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]), helper.make_node("Sigmoid", ["c2"], ["s2"]),
             helper.make_node("Mul", ["c2", "s2"], ["y2"]),
             helper.make_node("Conv", ["y2", "w3", "b3"], ["c3"]), helper.make_node("Add", ["c3", "y2"], ["s3"]),
             helper.make_node("Relu", ["s3"], ["y"])]
    inits = {"w1": randn(16, 8, 1, 1), "b1": randn(16), "w2": randn(16, 16, 1, 1), "b2": randn(16),
             "w3": randn(16, 16, 1, 1), "b3": randn(16)}
    p = optimized(make_model(nodes, {"x": randn(1, 8, 4, 4)}, ["y"], initializers=inits))
    groups = sorted(match_groups(p.main).values(), key=lambda g: p.main.index(g.root))
    assert [g.kind for g in groups] == ["conv_gemm", "conv_gemm_epilogue", "conv_gemm_epilogue"]
    assert groups[0].data["relu"]  # bias + ReLU stays with cuBLASLt's epilogue
    assert groups[1].data["roles"] == ("acc", "col")  # SiLU over the biased conv
    assert groups[2].data["roles"] == ("acc", "col", "full")  # bias, then the residual
    assert [m.op.name for m in groups[2].members] == ["fused_pointwise", "convolution"]


def test_dot_epilogue_through_a_row_split_reshape():
    p = optimized(gelu_residual_model()[0])
    (g,) = match_groups(p.main).values()
    assert g.kind == "gemm_epilogue" and g.data["split"] and g.data["roles"] == ("acc", "col", "full")
    assert [m.op.name for m in g.members] == ["fused_pointwise", "reshape", "dot"]
    assert g.inputs[1].is_literal and g.inputs[2].op.name == "broadcast"


def test_no_epilogue_for_a_matmul_with_two_readers_or_a_plain_bias():
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["t"]),
             helper.make_node("Add", ["m", "t"], ["y"]),
             helper.make_node("MatMul", ["a", "w"], ["m2"]), helper.make_node("Add", ["m2", "b"], ["z"])]
    x = {"a": randn(6, 8), "w": randn(8, 4)}
    p = optimized(make_model(nodes, x, ["y", "z"], initializers={"b": randn(4)}))
    kinds = sorted(g.kind for g in match_groups(p.main).values())
    assert "gemm_epilogue" not in kinds


# -- the Triton template, forced ----------------------------------------------------------------------
@pytest.mark.parametrize("fp16", [False, True])
def test_triton_conv_silu_epilogue(target_of, fp16):
    model, x = conv_silu_model()
    p = compile_check(target_of("triton"), model, x, fp16)
    (step,) = [s for s in p.executable.plan.steps if s.kind == "conv_gemm_epilogue"]
    (choice,) = p.executable.tuning.values()
    assert choice["name"] != "library"
    assert any(name.startswith("mm_") for name in p.executable.sources)
    import torch

    (source,) = [s for n, s in p.executable.sources.items() if n.startswith("mm_")]
    # tuning timed the generic kernel (K an argument); a static program's warm-up on a GPU compiles the
    # chosen config's K-constant kernel in the background and runs it; elsewhere the timed one stays
    assert k_form(source) == ("constant" if torch.cuda.is_available() else "argument")
    if not fp16:
        assert 'input_precision="ieee"' in source


@pytest.mark.parametrize("fp16", [False, True])
def test_triton_gelu_and_residual_epilogue(target_of, fp16):
    model, x = gelu_residual_model()
    p = compile_check(target_of("triton"), model, x, fp16)
    assert [s.kind for s in p.executable.plan.steps if "gemm" in s.kind] == ["gemm_epilogue"]


def test_triton_reads_a_channel_slice_and_writes_into_a_concat(target_of):
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c0"], ["a"]),
             helper.make_node("Split", ["a", "sizes"], ["a0", "a1"], axis=1),
             helper.make_node("Conv", ["a1", "w1", "b1"], ["c1"]), helper.make_node("Sigmoid", ["c1"], ["s1"]),
             helper.make_node("Mul", ["c1", "s1"], ["y1"]),
             helper.make_node("Concat", ["a0", "a1", "y1"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w0": randn(16, 3, 3, 3) * 0.3, "w1": randn(24, 8, 1, 1) * 0.3, "b1": randn(24),
             "w2": randn(4, 40, 3, 3) * 0.1, "sizes": np.array([8, 8], np.int64)}
    x = {"x": randn(2, 3, 5, 6)}
    p = compile_check(target_of("triton"), make_model(nodes, x, ["y"], initializers=inits, opset=13), x)
    plan = p.executable.plan
    (step,) = [s for s in plan.steps if s.kind == "conv_gemm_epilogue"]
    assert plan.slices[step.ins.uid][1:] == (1, 16)  # written into the concat's channels 16..40
    src = step.inputs[0]  # channels 8..16 of the same channels-last buffer, read in place
    assert src.op.name == "slice" and plan.owner[src.uid] == plan.owner[step.ins.uid] in plan.layouts


# -- autotuning ---------------------------------------------------------------------------------------
@pytest.fixture()
def cache_root(tmp_path, monkeypatch):
    from fusegraph.targets.gpu import kernels

    monkeypatch.setattr(kernels, "CACHE_ROOT", tmp_path)
    return tmp_path


H200 = {"device": "NVIDIA H200", "torch": "2.x", "triton": "3.x"}


def candidates(log: list[str]):
    from fusegraph.targets.gpu.autotune import Candidate

    def ok(name):
        return Candidate(name, lambda: lambda *args: log.append(name))  # a run logs who ran

    def broken_compile():
        raise RuntimeError("out of shared memory")

    def broken_run(*args):
        raise ValueError("bad launch")

    return [ok("library"), Candidate("fast_but_broken", broken_compile),
            Candidate("fails_when_run", lambda: broken_run), ok("64x64x32"), ok("128x128x32")]


def test_an_unknown_gemm_mode_is_a_compile_error():
    from fusegraph.errors import CompileError
    from fusegraph.targets.gpu import GpuTarget
    from fusegraph.targets.gpu.autotune import Tuner

    for make in (lambda: GpuTarget(gemm="fastest"), lambda: Tuner(H200, mode="fastest")):
        with pytest.raises(CompileError, match="gemm='fastest', expected one of"):
            make()


def test_tuner_drops_failing_candidates_and_caches_the_fastest_per_device(cache_root):
    from fusegraph.targets.gpu.autotune import Tuner

    times = {"library": 3.0, "64x64x32": 1.0, "128x128x32": 2.0}
    log: list[str] = []

    def measure(run):
        run()
        return times[log[-1]]

    tuner = Tuner(H200, measure=measure)
    assert tuner.choose("dot 64x64x64", candidates(log))[0] == "64x64x32"
    assert tuner.timed == 1 and tuner.timings == {"dot 64x64x64": times}  # the broken two are not timed
    (path,) = (cache_root / "autotune").glob("*.json")
    saved = json.loads(path.read_text())
    assert saved["identity"] == H200 and saved["choices"]["dot 64x64x64"]["name"] == "64x64x32"

    def no_timing(run):
        raise AssertionError("a cached choice is not timed again")

    again = Tuner(H200, measure=no_timing)
    assert again.choose("dot 64x64x64", candidates([]))[0] == "64x64x32" and again.timed == 0
    other = Tuner({**H200, "device": "NVIDIA A100"}, measure=measure)  # another device times afresh
    times["64x64x32"] = 5.0
    assert other.choose("dot 64x64x64", candidates(log))[0] == "128x128x32" and other.timed == 1


def test_recorded_choices_and_modes_decide_without_timing(cache_root):
    from fusegraph.targets.gpu.autotune import Tuner

    def no_timing(run):
        raise AssertionError("not timed")

    recorded = {"k": {"name": "128x128x32"}}
    assert Tuner(H200, recorded=recorded, measure=no_timing).choose("k", candidates([]))[0] == "128x128x32"
    assert Tuner(H200, mode="library", measure=no_timing).choose("k", candidates([]))[0] == "library"
    assert Tuner(H200, measure=None).choose("k", candidates([]))[0] == "library"  # a CPU device
    # untimed, the first candidate that builds and runs: the broken ones are dropped
    assert Tuner(H200, mode="triton", measure=None).choose("k", candidates([]))[0] == "64x64x32"
    assert not (cache_root / "autotune").exists()


def test_a_float32_gemm_is_the_librarys_unless_it_cannot_run_it(cache_root):
    """library_first (a float32 GEMM): in "auto" mode the library alone, untimed; the templates are
    timed only where it fails, or when asked for (exhaustive tuning, "triton" mode). choose_first
    prefers any first side so."""
    from fusegraph.targets.gpu.autotune import Candidate, Tuner

    times = {"library": 3.0, "64x64x32": 1.0, "128x128x32": 2.0}
    log: list[str] = []

    def measure(run):
        run()
        return times[log[-1]]

    def no_timing(run):
        raise AssertionError("not timed")

    assert Tuner(H200, measure=no_timing).choose("k", candidates(log), library_first=True)[0] == "library"
    assert Tuner(H200, measure=measure).choose("k", candidates(log), library_first=False)[0] == "64x64x32"
    assert Tuner(H200, measure=measure, exhaustive=True).choose("k2", candidates(log), library_first=True)[0] == "64x64x32"
    assert Tuner(H200, mode="triton", measure=measure).choose("k3", candidates(log), library_first=True)[0] == "64x64x32"

    def failing_library():
        raise RuntimeError("cuBLAS cannot take this layout")

    without = [Candidate("library", failing_library), *candidates(log)[1:]]
    tuner = Tuner(H200, measure=measure)
    assert tuner.choose("k4", without, library_first=True)[0] == "64x64x32" and tuner.timed == 1
    # choose_first (attention's short-sequence kernel) the same way, with any first side
    library, *templates = candidates(log)
    assert Tuner(H200, measure=no_timing).choose_first("k5", [library], templates)[0] == "library"
    assert Tuner(H200, measure=measure, exhaustive=True).choose_first("k6", [library], templates)[0] == "64x64x32"
    tuner = Tuner(H200, measure=measure)
    assert tuner.choose_first("k7", [Candidate("small", failing_library)], templates)[0] == "64x64x32"
    assert tuner.timed == 1


def test_exhaustive_grid_is_wider_and_fits_the_problem():
    from fusegraph.targets.gpu.autotune import DEFAULT_CONFIGS, Tuner

    small = Tuner(H200).configs(20, 40, 24, 2)
    assert all(c.block_m <= 32 and c.block_n <= 64 and c.block_k <= 32 and c.block_m >= 16 for c in small)
    wide = Tuner(H200, exhaustive=True).configs(4096, 4096, 4096, 2)
    assert len(wide) > 3 * len(DEFAULT_CONFIGS) and len(set(wide)) == len(wide)


def test_tuning_times_the_configs_that_can_win_the_problem():
    from fusegraph.targets.gpu.autotune import Tuner

    def names(m, n, k):
        return sorted(c.name().split("_g")[0] for c in Tuner(H200).to_time(m, n, k, 2))

    # latency-bound: one small tile, picked without timing (DenseNet-121 b1's 196x128x512 and its
    # 3136x128x64, which the H200 ran fastest with these), fitted to the problem
    assert names(196, 128, 512) == ["64x32x64"]
    assert names(3136, 128, 64) == ["64x64x32"]
    assert names(12544, 64, 16) == ["64x64x16"] and names(1, 24, 72) == ["16x32x64"]
    # ResNet-50 b32's 100352x256x64: every tile fills the device; the smallest would run 12 waves more
    big = names(100352, 256, 64)
    assert "64x32x64" not in big and "32x64x64" not in big and len(big) == 5
    # 128x64x32 is never timed for its own sake (UNTIMED), but is 128x128x32 fitted to a narrow problem,
    # and a recorded or cached choice may still name it
    assert "128x64x32" not in names(6272, 112, 480) and "128x64x32" in names(401408, 48, 32)
    assert "128x64x32_g8_w4_s4" in {c.name() for c in Tuner(H200).configs(6272, 112, 480, 2)}
    # tiles past 128x128 only for the largest problems (BERT-base b32's 4096x3072x768), not for its 1.6e9
    assert "128x256x64" not in big and "128x256x64" in names(4096, 3072, 768)
    # 32-row tiles only for problems of fewer than 64 rows or columns (the narrow one below keeps its)
    assert "32x64x64" not in names(6272, 208, 208) and "32x64x64" in names(48, 4096, 4096)
    # 1568x512x2048: 128x128 tiles make 52 blocks on 132 multiprocessors, while 64x32 ones make 400
    mid = names(1568, 512, 2048)
    assert "128x128x64" not in mid and "64x128x64" in mid and "64x32x64" in mid
    # a narrow output (N = 16): every tile is small, none is left out for that
    assert len(names(401408, 16, 64)) == len(Tuner(H200).configs(401408, 16, 64, 2)) >= 3
    # exhaustive tuning times the whole grid; a recorded choice may name any default config
    assert Tuner(H200, exhaustive=True).to_time(196, 128, 512, 2) == Tuner(H200, exhaustive=True).configs(196, 128, 512, 2)
    assert len(Tuner(H200).configs(196, 128, 512, 2)) > 2


def test_the_configs_tuning_times_keep_every_recorded_winner():
    """worth_timing's rules leave out no config that won a problem in the H200 tuner's timings kept in
    benchmarks/results (within 1 %: ties): each rule that trims the configs, checked against every
    recorded problem past SMALL_MACS (small_tile's pick has its own test above)."""
    from benchmarks.gpu_config_wins import problem_dims, recorded
    from fusegraph.targets.gpu.autotune import H100_SMS, LIBRARY, SMALL_MACS, worth_timing

    checked = 0
    for (row, problem), times in recorded(Path(__file__).parents[3] / "benchmarks" / "results").items():
        m, n, k = problem_dims(problem)
        if m * n * k <= SMALL_MACS:
            continue
        kept = {c.name() for c in worth_timing(m, n, k, H100_SMS)} | {LIBRARY}
        best_kept = min((us for name, us in times.items() if name in kept), default=float("inf"))
        assert best_kept <= 1.01 * min(times.values()), (row, problem, min(times, key=times.__getitem__))
        checked += 1
    assert checked >= 50


def test_the_products_left_to_the_library_were_the_librarys_in_every_recorded_timing():
    """autotune.library_alone (no template timed for a large float16 dot) against the H200 tuner's
    timings kept in benchmarks/results: every recorded problem it covers was won by the library (within
    1 %: ties), and it covers no convolution."""
    from benchmarks.gpu_config_wins import problem_dims, recorded
    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.gpu.autotune import LIBRARY, library_alone

    covered = 0
    for (row, problem), times in recorded(Path(__file__).parents[3] / "benchmarks" / "results").items():
        m, n, k = problem_dims(problem)
        in_type = DType(problem.split()[2].split("->")[0])
        assert not library_alone(m, n, k, True, in_type)
        if library_alone(m, n, k, problem.startswith("conv"), in_type):
            assert times[LIBRARY] <= 1.01 * min(times.values()), (row, problem, min(times, key=times.__getitem__))
            covered += 1
    assert covered >= 7


def test_a_large_half_product_is_the_librarys_and_shares_no_kernels():
    """EpilogueGemm.library_first: a float16 dot past LIBRARY_MACS (not a convolution of that size) is
    the library's in "auto" mode, and a runner of its family with another K then shares no generic
    kernel with it (it compiles none); in "triton" mode it still times templates, so it shares them."""
    from types import SimpleNamespace

    from fusegraph.ir.dtypes import DType
    from fusegraph.targets.gpu.autotune import LIBRARY_MACS, Tuner
    from fusegraph.targets.gpu.gemm_runner import EpilogueGemm

    def runner(rows, n, k, conv=False):
        r = object.__new__(EpilogueGemm)
        r.conv, r.split, r.body, r.var_types, r.roles, r.acc = conv, False, "x0", [DType.float32], ["acc"], [0]
        r.in_type = r.out_type = DType.float16
        r.mm_shape, r.k = ((rows // 4, 4, n) if not conv else (4, n, rows // 4)), k
        return r

    large, small = runner(4096, 3072, 768), runner(4096, 768, 3072 // 8)
    assert 4096 * 3072 * 768 > LIBRARY_MACS and large.library_first and not small.library_first
    assert not runner(4096, 3072, 768, conv=True).library_first
    int8 = runner(4096, 3072, 768)
    int8.in_type = DType.int8  # (a quantized GEMM: its library is another, untried at this size)
    assert not int8.library_first
    for mode, shared in (("auto", False), ("triton", True)):
        ctx = SimpleNamespace(tuner=Tuner(H200, mode=mode, measure=None), kernels=[large, small])
        large.ctx = small.ctx = ctx
        small.__dict__.pop("shares_kernels", None)
        assert small.shares_kernels is shared


def test_choices_are_exported_and_reused_when_loaded(target_of):
    model, x = conv_silu_model()
    p = compile_check(target_of("triton"), model, x)
    target = target_of("auto")
    artifacts = target.export_artifacts(p.executable)
    recorded = json.loads(artifacts["autotune.json"])
    assert recorded == p.executable.tuning and any(k.startswith("triton/mm_") for k in artifacts)
    loaded = target.load(p, p.executable.options, {k: memoryview(v) for k, v in artifacts.items()})
    assert loaded.tuning == recorded  # "auto" alone would take the library on a CPU device
    assert loaded.sources.keys() == p.executable.sources.keys()  # a recorded choice's kernel is saved too
    assert_close(loaded.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)


def test_precompile_submits_every_candidates_kernel_and_skips_broken_ones(gpu_target):
    from fusegraph.targets.gpu.autotune import precompile

    compiled: list[str] = []

    def run_of(name, fails=False):
        def run(*args):
            raise AssertionError("precompile never launches")

        def compile(*args):
            if fails:
                raise RuntimeError("out of shared memory")
            compiled.append(name)
        run.compile = compile
        return run

    precompile([run_of("a"), run_of("broken", fails=True), lambda *args: None, run_of("b")], (1, 2))
    assert sorted(compiled) == ["a", "b"]


def test_steps_share_one_scratch_buffer(gpu_target):
    import torch

    from fusegraph.targets.gpu.build import BuildContext

    ctx = BuildContext(torch.device("cpu"))
    small = ctx.scratch((4, 8), torch.float16)
    big = ctx.scratch((16, 8), torch.float32)  # grows: 512 bytes
    again = ctx.scratch((4, 8), torch.float16)
    assert small.shape == (4, 8) and big.dtype == torch.float32 and big.shape == (16, 8)
    assert again.data_ptr() == big.data_ptr() and ctx.scratch((2, 2), torch.int64).data_ptr() == big.data_ptr()


def test_library_epilogues_of_different_sizes_through_the_shared_scratch(target_of):
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Sigmoid", ["m1"], ["s1"]),
             helper.make_node("Mul", ["m1", "s1"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["m2"]),
             helper.make_node("Sigmoid", ["m2"], ["s2"]), helper.make_node("Mul", ["m2", "s2"], ["y"])]
    r = np.random.default_rng(3)
    inits = {"w1": r.standard_normal((16, 48)).astype(np.float32), "w2": r.standard_normal((48, 8)).astype(np.float32)}
    x = {"x": r.standard_normal((5, 16)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], inits)
    p = compile_check(target_of("library"), model, x)
    assert len(p.executable.tuning) == 2 and all(c["name"] == "library" for c in p.executable.tuning.values())


def test_choices_timed_another_way_are_not_reused(cache_root, gpu_target):
    import torch

    from fusegraph.targets.gpu.autotune import TIMING, TuningCache, device_identity

    identity = device_identity(torch.device("cpu"))
    assert identity["timing"] == TIMING
    TuningCache({**identity, "timing": "launch-timing-1"}).store("k", {"name": "64x64x32"})
    assert TuningCache(identity).load() == {}


def test_a_dynamic_programs_choices_and_sources_are_saved(target_of):
    from fusegraph.targets.gpu.dynamic import DynamicExecutable, HostFallbackWarning

    nodes = [helper.make_node("LRN", ["x"], ["n"], size=3),  # on the host: the program runs dynamically
             helper.make_node("MatMul", ["n", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]),
             helper.make_node("Mul", ["m", "s"], ["y"])]
    x = {"x": randn(1, 4, 3, 8)}
    model = make_model(nodes, x, ["y"], initializers={"w": randn(8, 6)})
    with pytest.warns(HostFallbackWarning):
        p = compile_check(target_of("triton"), model, x)
    exe = p.executable
    assert isinstance(exe, DynamicExecutable) and len(exe.tuning) == 1
    artifacts = target_of("auto").export_artifacts(exe)
    assert json.loads(artifacts["autotune.json"]) == exe.tuning and any(k.startswith("triton/mm_") for k in artifacts)

"""Triton compiles in worker processes (compile_pool.py, compile_worker.py).

A worker compiles for an explicit target, so these run wherever Triton and its bundled ptxas are
installed (no GPU needed): a kernel a worker compiled must be the one Triton's own compile in this
process then finds in the cache (the same key), a failed job must leave the worker serving, and the
executor must hand each compile's job to a worker before the compile itself runs.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import inspect
import json
from pathlib import Path

import pytest

from fusegraph.targets.gpu import compile_pool
from fusegraph.targets.gpu.triton_key import ours

SOURCE = '''import triton
import triton.language as tl


@triton.jit
def scale(x, y, n, factor, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, tl.load(x + i, mask=i < n) * factor, mask=i < n)
'''


def _triton_for_cuda():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("needs triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.backends.nvidia.compiler import CUDABackend
    except ImportError:
        pytest.skip("needs Triton's NVIDIA backend")
    return GPUTarget("cuda", 90, 32), CUDABackend


def _job(tmp_path: Path, block: int) -> tuple[dict, tuple]:
    """A worker's job for `scale` at one BLOCK, and the (fn, signature, constants, attrs, options)
    this process compiles it with."""
    target, backend = _triton_for_cuda()  # (skips without Triton)
    from triton.runtime.jit import JITFunction, serialize_specialization_data

    path = tmp_path / "fusegraph_triton_test.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("fusegraph_triton_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "factor": "fp32", "BLOCK": "constexpr"}
    constants = {(4,): block}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    options = backend(target).parse_options({"num_warps": 4})
    args = ["fusegraph_triton_test.scale", signature, constants, attrs, options, "key"]
    if "target" in inspect.signature(serialize_specialization_data).parameters:  # Triton >= 3.7
        args.append(target)
    fn = module.scale
    if not isinstance(fn, JITFunction):  # (under TRITON_INTERPRET=1) the function compiled for the GPU
        fn = JITFunction(fn.fn)
    job = {"path": str(path), "module": "fusegraph_triton_test", "name": "scale",
           "spec": serialize_specialization_data(*args), "target": [target.backend, target.arch, target.warp_size],
           "cache_dir": str(tmp_path / "cache"), "triton_key": compile_pool._triton_key()}  # (as _Executor's jobs)
    return job, (fn, signature, constants, attrs, options, target)


def _cubins(tmp_path: Path) -> int:
    return sum(1 for _ in (tmp_path / "cache").rglob("*.cubin"))


def test_a_worker_compiles_the_kernel_this_process_then_finds(tmp_path, monkeypatch):
    job, (fn, signature, constants, attrs, options, target) = _job(tmp_path, 128)
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    pool = compile_pool._Pool(1)
    try:
        assert pool.run(job)
        assert _cubins(tmp_path) == 1
        monkeypatch.setattr(knobs.cache, "dir", job["cache_dir"])
        with ours():  # (as in the compile scopes of kernels.py)
            compiled = triton.compile(ASTSource(fn, signature, constants, attrs), target=target, options=options.__dict__)
        assert _cubins(tmp_path) == 1  # found, not compiled again: the worker's key is this process's
        assert compiled.metadata.num_warps == 4
    finally:
        pool.close_idle()


def test_a_worker_takes_the_parents_hash_of_triton(tmp_path, monkeypatch):
    """The job's triton_key is the one the worker's cache key holds (it computes none of its own):
    under another key its kernel is another cache entry; under the parent's, the parent finds it."""
    job, (fn, signature, constants, attrs, options, target) = _job(tmp_path, 64)
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    pool = compile_pool._Pool(1)
    try:
        assert pool.run({**job, "triton_key": "another installation"})
        assert _cubins(tmp_path) == 1
        assert pool.run({**job, "triton_key": compile_pool._triton_key()})
        assert _cubins(tmp_path) == 2  # not the entry of the other key
        monkeypatch.setattr(knobs.cache, "dir", job["cache_dir"])
        with ours():
            triton.compile(ASTSource(fn, signature, constants, attrs), target=target, options=options.__dict__)
        assert _cubins(tmp_path) == 2  # found under this process's key
    finally:
        pool.close_idle()


def test_a_failed_job_leaves_the_worker_serving(tmp_path):
    job, _ = _job(tmp_path, 128)
    pool = compile_pool._Pool(1)
    try:
        assert not pool.run({**job, "name": "no_such_kernel"})
        assert not pool.run({**job, "spec": json.dumps({**json.loads(job["spec"]), "constant_vals": [100]})})  # not a power of 2
        assert pool.run(job)
        assert pool._started == 1
    finally:
        pool.close_idle()
    assert pool._started == 0


class _RecordingPool:
    def __init__(self):
        self.jobs = []

    def run(self, job):
        self.jobs.append(job)
        return True


def test_the_executor_runs_each_compiles_job_first(monkeypatch):
    _triton_for_cuda()
    pool = _RecordingPool()
    with concurrent.futures.ThreadPoolExecutor(2) as threads:
        executor = compile_pool._Executor(threads, pool, ["cuda", 90, 32])
        compile_pool._pending.job = {"name": "k"}
        first = executor.submit(lambda: len(pool.jobs))
        second = executor.submit(lambda: "not a generated kernel")  # no job recorded for it
        assert first.result() == 1 and second.result() == "not a generated kernel"
    assert [j["name"] for j in pool.jobs] == ["k"]
    assert pool.jobs[0]["target"] == ["cuda", 90, 32] and "cache_dir" in pool.jobs[0]
    assert pool.jobs[0]["triton_key"] == compile_pool._triton_key()


def test_the_executor_starts_the_kernels_launcher_while_its_worker_compiles(monkeypatch):
    """The launcher (a C build per argument signature) is built from the job's signature beside the
    worker's compile, not after it; a job without a readable signature starts nothing."""
    _triton_for_cuda()
    import queue

    from fusegraph.targets.gpu import binaries

    started = queue.Queue()
    monkeypatch.setattr(binaries, "build_launcher", started.put)

    class Pool:
        def run(self, job):
            self.seen = started.get(timeout=10)  # begun before the worker answered
            return True
    pool = Pool()
    spec = json.dumps({"signature": {"a_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr", "t": ["*fp16", "i32"]}})
    with concurrent.futures.ThreadPoolExecutor(1) as threads:
        executor = compile_pool._Executor(threads, pool, ["cuda", 90, 32])
        compile_pool._pending.job = {"name": "k", "spec": spec}
        executor.submit(lambda: None).result()
    assert pool.seen == ("*fp16", "i32", "constexpr", ("*fp16", "i32"))
    for job in ({"spec": "not json"}, {"spec": json.dumps({"signature": ["*fp16"]})}, {}):
        compile_pool.early_launcher(job)
    with pytest.raises(queue.Empty):
        started.get(timeout=0.2)


def test_the_executor_logs_each_jobs_wait_and_worker():
    """In a compile log, a job's wait for a thread (one lane) and its worker's span (its thread's
    lane), under the kernel's name: where a cold compile waited on one kernel, the log names it."""
    _triton_for_cuda()
    from fusegraph.profile import phases

    pool = _RecordingPool()
    with phases.recording() as log, concurrent.futures.ThreadPoolExecutor(1) as threads:
        executor = compile_pool._Executor(threads, pool, ["cuda", 90, 32])
        compile_pool._pending.job = {"name": "k"}
        executor.submit(lambda: None).result()
        executor.submit(lambda: None).result()  # no job: nothing logged
    spans = {name: (lane, t0, t1) for name, lane, t0, t1 in log.spans}
    assert set(spans) == {"queued k", "worker k"}
    (queue_lane, q0, q1), (lane, w0, w1) = spans["queued k"], spans["worker k"]
    assert queue_lane == compile_pool.QUEUE_LANE and lane.startswith("compile thread ")
    assert q0 <= q1 == w0 <= w1


@pytest.mark.parametrize("module, getter, name", [("triton_attention", "kernel", "attention_small"),
                                                  ("index_checks", "wrap_kernel", "wrap_indices")])
def test_the_fixed_kernels_are_workers_jobs(module, getter, name, monkeypatch):
    """The short-sequence attention and index-wrapping kernels are generated modules too: a thread
    compiling them held the GIL (attention_small 0.5-0.7 s of GPT-2 b32's and DistilBERT b32's cold
    compiles on the H200; GPT-2 b32's two index-wrapping compiles 0.26 s)."""
    _triton_for_cuda()
    import importlib

    from triton.runtime.jit import JitFunctionInfo  # what Triton's jit_cache_hook is given

    from fusegraph.targets.gpu import kernels

    found = importlib.import_module(f"fusegraph.targets.gpu.{module}")
    # loaded here for the GPU, not Triton's interpreter: kept out of the caches later tests use
    monkeypatch.setattr(kernels, "_kernels", {})
    monkeypatch.setattr(kernels, "_modules", {})
    monkeypatch.setattr(found, "_kernel" if getter == "kernel" else "_wrap_kernel", None)
    fn = getattr(found, getter)().fn  # (Triton's interpreter's function where an earlier test set it up)
    info = JitFunctionInfo(fn.fn.__module__, fn.fn.__qualname__, fn)  # as Triton's JIT makes it
    job = compile_pool._job(info, {"specialization_data": "{}"})
    assert job is not None and job["name"] == name and Path(job["path"]).is_file()


@pytest.mark.parametrize("setting, cores, want", [("0", 16, 0), ("3", 16, 3), ("x", 16, 0), ("", 16, 16), ("", 2, 0)])
def test_workers_wanted(monkeypatch, setting, cores, want):
    monkeypatch.setenv("FUSEGRAPH_COMPILE_WORKERS", setting)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(compile_pool, "cores", lambda: cores)
    assert compile_pool.workers_wanted() == want

"""Triton compiles in worker processes, for the scopes of `kernels.compile_all`/`compile_async`.

Those scopes compile kernels in threads (Triton's AsyncCompileMode). Part of a compile holds the GIL
(Triton's front end, Python around its passes), so many threads on many cores contend for it. Here
each thread's compile first runs in a worker process (`compile_worker.py`, one job a line over pipes,
JSON: never a pickle): the worker writes the binary into Triton's on-disk cache, then the thread runs
Triton's own compile, which finds it there and only loads it. The job is Triton's specialization data
for the launch, which Triton hands to `knobs.runtime.jit_cache_hook` just before it submits the
compile; only fusegraph's generated kernels go to workers. A worker that fails or dies costs nothing
but time: the thread's compile then compiles (and raises) as it would have.

On the H200 machine (16 cores) threads alone spent 0.6-0.7 s of a thread per kernel and the walk that
submits them waited for the GIL (ResNet-50 at batch 32: 48 kernels, 5.8 s cold; MobileNetV3-Large: 93,
13.5 s); with workers 3.9 s and 7.2 s (benchmarks/gpu_cold_compile.py, issue 23). A job carries the
parent's hash of the Triton installation (triton_key.py; Triton's own took 0.9 s to compute there), which
the worker then takes as its own.

Workers start when a target begins to compile (`prestart`: in the passes, with Triton's set-up, where
there is a CUDA device), serve every compile of the process, and exit after `IDLE_S` without work or
when the process ends (their stdin closes). `FUSEGRAPH_COMPILE_WORKERS` sets how many (0: threads
alone); by default one a core where there are at least `MIN_CORES`, since on fewer the threads do not
contend.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import contextvars
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ... import debug
from ...ir.limits import cores
from ...profile import phases
from .kernels import MODULE_PREFIX, compile_lane

IDLE_S = 30.0
QUEUE_LANE = "compile queue"  # the compile log's lane of the jobs' waits for a thread
MIN_CORES = 4
_SCRIPT = str(Path(__file__).with_name("compile_worker.py"))
_pending = threading.local()  # the job the hook saw last, on the thread that launched the compile


def workers_wanted() -> int:
    """How many compile workers this process uses (0: compiles stay in threads)."""
    setting = debug.compile_workers()
    if setting is not None:
        return setting
    if debug.triton_interpreter():
        return 0
    n = cores()
    return n if n >= MIN_CORES else 0


class _Pool:
    def __init__(self, size: int):
        self.size = size
        self._idle: list[subprocess.Popen] = []
        self._started = 0
        self._busy = 0
        self._cond = threading.Condition()
        self._timer: threading.Timer | None = None

    def prestart(self) -> None:
        with self._cond:
            n = self.size - self._started
            self._started += n
        started = []
        for _ in range(n):
            try:
                started.append(_start())
            except OSError:
                with self._cond:
                    self._started -= 1
        with self._cond:
            self._idle.extend(started)
            self._cond.notify_all()

    def run(self, job: dict) -> bool:
        """Compile `job` in a worker; whether it succeeded."""
        worker = self._borrow()
        if worker is None:
            return False
        line = ""
        try:
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write(json.dumps(job) + "\n")
            worker.stdin.flush()
            line = worker.stdout.readline()
        except (OSError, ValueError):
            pass
        ok = False
        if line:
            try:
                ok = json.loads(line).get("ok") is True
            except ValueError:
                line = ""
        self._give_back(worker if line else None)
        return ok

    def _borrow(self) -> subprocess.Popen | None:
        with self._cond:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            while not self._idle and self._started >= self.size:
                self._cond.wait()
            self._busy += 1
            if self._idle:
                return self._idle.pop()
            self._started += 1
        try:
            return _start()
        except OSError:
            self._give_back(None)
            return None

    def _give_back(self, worker: subprocess.Popen | None) -> None:
        with self._cond:
            self._busy -= 1
            if worker is None:
                self._started -= 1
            else:
                self._idle.append(worker)
            if self._busy == 0:
                self._timer = threading.Timer(IDLE_S, self.close_idle)
                self._timer.daemon = True
                self._timer.start()
            self._cond.notify()

    def close_idle(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._started -= len(idle)
        for worker in idle:
            _stop(worker)


def _start() -> subprocess.Popen:
    import triton

    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # a worker compiles for the GPU
    site = str(Path(triton.__file__).resolve().parent.parent)  # the parent's Triton, whatever sys.path says
    env["PYTHONPATH"] = os.pathsep.join([site, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else site
    return subprocess.Popen([sys.executable, _SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True, bufsize=1)


def _stop(worker: subprocess.Popen) -> None:
    with contextlib.suppress(OSError, ValueError):
        if worker.stdin is not None:
            worker.stdin.close()  # the worker's loop ends
    try:
        worker.wait(timeout=5)
    except subprocess.TimeoutExpired:
        worker.kill()


_lock = threading.Lock()
_pool: _Pool | None = None


def _the_pool() -> _Pool | None:
    global _pool
    with _lock:
        if _pool is None:
            size = workers_wanted()
            if size == 0:
                return None
            _pool = _Pool(size)
            atexit.register(_pool.close_idle)
        return _pool


def prestart() -> None:
    """Start the workers now, in the background (a compile is coming)."""
    pool = _the_pool()
    if pool is not None:
        threading.Thread(target=pool.prestart, daemon=True, name="fusegraph-compile-workers").start()


class _Executor(concurrent.futures.Executor):
    """The threads of an AsyncCompileMode, each of whose compiles first runs in a worker."""

    def __init__(self, threads: concurrent.futures.Executor, pool: _Pool, target: list):
        self.threads, self.pool = threads, pool
        self.setting = {"target": target, "triton_key": _triton_key()}  # every job's, for the scope

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        job = getattr(_pending, "job", None)
        _pending.job = None
        return self.threads.submit(self._compile, phases.current(), time.perf_counter_ns(), job, fn, args, kwargs)

    def _compile(self, log: phases.PhaseLog | None, queued_ns: int, job: dict | None, fn: Callable[..., Any],
                 args: tuple, kwargs: dict) -> Any:
        """The job in a worker, then `fn` (Triton's compile, which loads the worker's binary). The log
        gets the job's wait for a free thread (lane "compile queue") and its worker's span (a wait for a
        free worker counts), each under the kernel's name."""
        if job is not None:
            from triton import knobs

            early_launcher(job)
            start_ns = time.perf_counter_ns()
            self.pool.run({**job, **self.setting, "cache_dir": knobs.cache.dir})
            if log is not None:
                log.add(f"queued {job['name']}", QUEUE_LANE, queued_ns, start_ns)
                log.add(f"worker {job['name']}", compile_lane(), start_ns, time.perf_counter_ns())
        return fn(*args, **kwargs)


def early_launcher(job: dict) -> None:
    """Start building the launcher of a job's kernel (binaries.build_launcher: a C extension per
    argument signature, 0.2-0.35 s of the system compiler on the H200 machine) in a thread of its
    own while the worker compiles the kernel, not after: the last kernel of a cold compile had its
    launcher built on the compile's critical path (DistilBERT b32's attention, 0.27 s). The compile
    thread's own build after the compile then finds it built (or waits for nothing new); whatever
    fails here is built there, or at the kernel's first launch."""
    try:
        signature = json.loads(job["spec"])["signature"]
    except (KeyError, TypeError, ValueError):
        return
    if not isinstance(signature, dict):
        return
    from .binaries import build_launcher
    from .compile_worker import tuples

    def build() -> None:
        try:
            build_launcher(tuple(tuples(v) for v in signature.values()))
        except Exception:  # noqa: BLE001 - built after the compile, or at the first launch, instead
            pass
    threading.Thread(target=build, daemon=True, name="fusegraph-early-launcher").start()


@contextlib.contextmanager
def executor(threads: concurrent.futures.Executor) -> Iterator[concurrent.futures.Executor]:
    """`threads`, or where workers are wanted, an executor whose compiles run in them first."""
    pool = _the_pool()
    target = _target() if pool is not None else None
    if pool is None or target is None:
        yield threads
        return
    _install_hook()
    token = _active.set(True)
    try:
        yield _Executor(threads, pool, target)
    finally:
        _active.reset(token)


_active: contextvars.ContextVar[bool] = contextvars.ContextVar("fusegraph_compile_workers", default=False)
_hooked = False


def _install_hook() -> None:
    """Triton's jit_cache_hook, once per process: inside an `executor` scope it keeps each compile's
    specialization data for the submit that follows on the same thread (any hook set before it is
    still called, and its answer returned)."""
    global _hooked
    from triton import knobs

    with _lock:
        if _hooked:
            return
        _hooked = True
        previous = knobs.runtime.jit_cache_hook

        def record(*, key: Any, repr: Any, fn: Any, compile: dict, is_manual_warmup: bool,
                   already_compiled: bool) -> Any:
            _pending.job = _job(fn, compile) if _active.get() else None
            if previous is None:
                return None
            return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                            already_compiled=already_compiled)

        knobs.runtime.jit_cache_hook = record


def _job(fn: Any, compile: dict) -> dict | None:
    """A worker's job for one of fusegraph's generated kernels; None for any other kernel."""
    module = sys.modules.get(fn.module) if isinstance(fn.module, str) else fn.module
    path, name = getattr(module, "__file__", None), getattr(module, "__name__", "")
    if not (path and name.startswith(MODULE_PREFIX)):
        return None
    return {"path": path, "module": name, "name": fn.name, "spec": compile["specialization_data"]}


def _triton_key() -> str:
    """The hash of this Triton installation in fusegraph's compiles' cache keys (triton_key.py): a
    worker takes the parent's, and finds it the same files."""
    from .triton_key import fusegraph_key

    return fusegraph_key()


def _target() -> list | None:
    try:
        from triton.runtime.driver import driver

        target = driver.active.get_current_target()
        return [target.backend, target.arch, target.warp_size]
    except Exception:  # noqa: BLE001 - no target to name: compiles stay in threads
        return None

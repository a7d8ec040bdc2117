"""Generated Triton sources -> launchable kernels.

`triton.jit` reads a kernel's source from its file, so each generated module is written once to a
cache folder (named by the hash of its text) and imported from there. Kernels are cached per source
for the process; Triton keeps its own on-disk cache of the compiled binaries.

`compile_all()` is a scope in which launches compile and do not run: each launch submits its
kernel's compile to a pool of threads (Triton releases the GIL in LLVM and ptxas), and leaving the
scope waits for them all. A static program's warm-up runs its steps once in that scope before its
real first run, so the kernels of all steps compile at once instead of one by one as the first run
reaches them. The tuned steps choose right after that walk (`after_walk`), while the kernels
compile: each candidate is timed once its compile ends, and the chosen config's K-constant kernel is
submitted with the others. The real first run is a `compile_async()` scope, in which a launch of a
kernel still compiling waits for it. In both, a compile thread builds its kernel's host-side
launcher as soon as the kernel is done.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import hashlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...profile import phases
from .device import triton

CACHE_ROOT = Path.home() / ".cache" / "fusegraph"  # generated sources and autotuning choices
_lock = threading.Lock()
_modules: dict[str, Any] = {}
_kernels: dict[tuple[str, str], Any] = {}  # (source, name) -> Kernel: no hashing of the text per launch
MODULE_PREFIX = "fusegraph_triton_"  # the generated modules' names (compile_pool sends only these to workers)
_compiling: contextvars.ContextVar[Any] = contextvars.ContextVar("fusegraph_compile_all", default=None)
# compile_all's calls for after its walk, in this order: a library's first calls, the tuned steps'
# choices that may submit a compile, those that submit none (after_walk)
_after_walk: contextvars.ContextVar[tuple[list, list, list] | None] = contextvars.ContextVar(
    "fusegraph_after_walk", default=None)
# Called on every generated module once it is imported (tests use it to give Triton's CPU
# interpreter numpy forms of the libdevice functions it lacks).
MODULE_HOOKS: list[Callable[[Any], None]] = []


def cache_dir() -> Path:
    path = CACHE_ROOT / "triton_src"
    path.mkdir(parents=True, exist_ok=True)
    return path


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def loaded_module(source: str) -> Any:
    """The module this process imported for `source`, or None."""
    with _lock:
        return _modules.get(source_hash(source))


class Kernel:
    """A generated JIT function: `kernel[grid](*args, **meta)` launches it, or inside `compile_all()`
    only submits its compile. `fn` is Triton's JIT function."""

    def __init__(self, fn: Any):
        self.fn = fn

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        fn, launch = self.fn, self.fn[grid]

        def run(*args: Any, **meta: Any) -> Any:
            if _compiling.get() is None:
                return launch(*args, **meta)
            return fn.warmup(*args, grid=grid, **meta)  # compiled for these arguments, not launched
        return run

    def warmup(self, *args: Any, grid: Any, **meta: Any) -> Any:
        return self.fn.warmup(*args, grid=grid, **meta)


def set_up_triton() -> None:
    """Start Triton's per-process set-up in the background, while a program is lowered: the hash of
    its installation that every compile's cache key needs (triton_key.py: 3 ms; Triton's own, where
    its library has no build ID: 0.92 s on the H200 machine) and its CUDA driver (0.47 s there in a
    fresh process: it builds and loads a C extension), in two threads. Both are kept for the
    process; the compile scopes wait for this work before they begin."""
    global _set_up

    def work() -> None:
        try:  # (imported in one thread: two importing at once can deadlock on the module locks)
            triton()  # (which installs the quick hash for fusegraph's compiles)
            from triton.runtime.driver import driver

            from .triton_key import fusegraph_key
        except Exception:  # noqa: BLE001 - whatever fails here fails again, with its error, where it is used
            return
        key = threading.Thread(target=_quietly(fusegraph_key), daemon=True, name="fusegraph-triton-key")
        key.start()  # the two at once (Triton's own hash: mostly outside the GIL, as the C compiler is)
        try:
            driver.active.get_current_target()
        except Exception:  # noqa: BLE001 - no device: no compile workers either
            key.join()
            return
        from .compile_pool import prestart

        prestart()  # the compile workers (compile_pool.py), importing Triton while the key is hashed
        key.join()  # (their jobs carry it: the compile scopes wait for this thread)

    with _lock:
        if _set_up is None:
            _set_up = threading.Thread(target=work, daemon=True, name="fusegraph-triton-set-up")
            _set_up.start()


_set_up: threading.Thread | None = None


def _quietly(fn: Callable[[], Any]) -> Callable[[], None]:
    def call() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001 - whatever fails here fails again, with its error, where it is used
            pass
    return call


def _set_up_done() -> None:
    """Wait for `set_up_triton`'s work, if it began (so that nothing sets Triton's driver up twice)."""
    if _set_up is not None:
        _set_up.join()


def compiling_all() -> bool:
    """Whether launches only compile (inside `compile_all()`)."""
    return _compiling.get() is not None


def compile_all() -> contextlib.AbstractContextManager[bool]:
    """A scope in which launches compile their kernels in threads without running them (its value:
    whether this Triton can; when not, launches run as usual). On leaving, every compile has ended
    and each new kernel's host-side launcher is built (by the thread that compiled it); a kernel that failed
    to compile raises its error at its first real launch."""
    return _async_compiles(launch=False)


def compile_async() -> contextlib.AbstractContextManager[bool]:
    """A scope in which kernels compile in threads and launches run: a launch of a kernel whose
    compile is pending waits for it; a `warmup` (GemmLauncher.compile) only submits. Leaving it
    waits for every compile, as `compile_all` does."""
    return _async_compiles(launch=True)


@contextlib.contextmanager
def _async_compiles(launch: bool) -> Iterator[bool]:
    try:
        from triton.runtime._async_compile import AsyncCompileMode  # Triton >= 3.4; private
    except ImportError:
        yield False
        return
    from ..asynchronous import cores
    from .compile_pool import executor
    from .compile_queue import PriorityThreads
    from .triton_key import mark_thread, ours

    _set_up_done()
    with ours(), quick_gil_handoff(), PriorityThreads(cores(), initializer=mark_thread) as pool, \
            executor(pool) as compiles:
        mode = AsyncCompileMode(_WithLauncher(compiles), ignore_errors=True)
        token, later = _compiling.set(None if launch else mode), _after_walk.set(None if launch else ([], [], []))
        try:
            with mode:
                yield True
                first_calls, choices, last = _after_walk.get() or ([], [], [])
                _compiling.set(None)  # launches run again (waiting for their kernels' compiles)
                if first_calls:  # each releases the GIL: the compile threads run on
                    with phases.span("library first calls while compiling"):
                        for call in first_calls:  # (on this thread: torch keeps cuDNN's plans per thread)
                            _quietly(call)()
                if choices or last:
                    with phases.span("choices while compiling"):
                        for call in choices + last:
                            _quietly(call)()
        finally:
            _compiling.reset(token)
            _after_walk.reset(later)


HANDOFF_S = 0.0005  # the interpreter's switch interval inside the compile scopes (quick_gil_handoff)
_handoff_lock = threading.Lock()
_handoff: list = [0, None]  # [open scopes, the interval before the first]


@contextlib.contextmanager
def quick_gil_handoff() -> Iterator[None]:
    """The interpreter's switch interval lowered to HANDOFF_S while the scope is open (in every thread:
    the first scope to open saves the interval, the last to close restores it). Each torch or Triton
    call that releases the GIL (a tensor made, a view, a launch) gives it to a compile thread, and at
    the default 5 ms the walk then waited up to 5 ms to take it back, a few times a step: a Python loop
    of tensor calls beside one (two) threads running Triton's code generation ran 103x (567x) slower
    than alone on the 2-core VM, 22x (51x) at 0.5 ms, where two such threads switching between
    themselves lost 10 % of their rate (benchmarks/gil_handoff.py)."""
    with _handoff_lock:
        if _handoff[0] == 0:
            _handoff[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(_handoff[1], HANDOFF_S))
        _handoff[0] += 1
    try:
        yield
    finally:
        with _handoff_lock:
            _handoff[0] -= 1
            if _handoff[0] == 0:
                sys.setswitchinterval(_handoff[1])


def after_walk(call: Callable[[], Any], library: bool = False, compiles: bool = True) -> None:
    """Inside compile_all(): call `call` when the scope's body is done (the warm-up's walk over the
    steps), while the kernels it submitted compile, with launches running as in compile_async();
    elsewhere, now. A tuned step makes its choice there: its candidates' kernels are timed as their
    compiles end and the chosen K-constant kernel joins the compiles in flight, instead of a wave of
    its own after them, and a library's first call on the step's shapes (cuDNN builds its attention
    graph per shape: 0.7 s on the H200) no longer holds the walk, and the next steps' compiles, back.
    `library`: a call that waits for no kernel (a library's first call, which builds its plan for the
    shapes: cuDNN's depthwise convolutions took 0.2-1.3 s each on the H200, 5.4 s for MobileNetV3's 12
    at batch 32), made before the choices, which wait for their candidates' compiles.
    `compiles=False`: a choice that submits no compile once made (attention's: its candidates are
    libraries' and a kernel compiled in the walk), made after those that may (a GEMM's chosen
    K-constant kernel), whose compiles then overlap its timing: GPT-2 b1 on the H200 made two of its
    GEMM choices, and so began their kernels' compiles, after 1.5 s of its attention's choice
    (cuDNN's first calls). The step's buffers hold nothing meaningful in that walk, so calling it
    late changes no result. What fails there fails again, with its error, where it is used."""
    calls = _after_walk.get()
    if calls is None or not compiling_all():  # (outside compile_all, or in its choices already)
        call()
    else:
        calls[0 if library else 1 if compiles else 2].append(call)


def async_compiling() -> bool:
    """Whether a scope of asynchronous compiles (compile_all, compile_async) is open here."""
    try:
        from triton.runtime._async_compile import active_mode
    except ImportError:
        return False
    return active_mode.get() is not None


class _WithLauncher(concurrent.futures.Executor):
    """Runs each compile, then builds its kernel's host-side launcher in the same thread (binaries.py):
    the launchers build while other kernels compile, not all after the last."""

    def __init__(self, compiles: concurrent.futures.Executor):
        self.compiles = compiles

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self.compiles.submit(_compile_and_launcher, phases.current(), fn, *args, **kwargs)


def compile_lane() -> str:
    """The compile log's lane of this compile thread (their spans overlap: a lane each)."""
    return f"compile thread {threading.current_thread().name.rsplit('_', 1)[-1]}"


def _compile_and_launcher(log: phases.PhaseLog | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    from .binaries import build_launcher

    lane = compile_lane()
    t0 = time.perf_counter_ns()
    kernel = fn(*args, **kwargs)
    t1 = time.perf_counter_ns()
    if log is not None:
        log.add(f"compile {getattr(kernel, 'name', 'kernel')}", lane, t0, t1)
    signature = getattr(getattr(kernel, "src", None), "signature", None)
    if isinstance(signature, dict):
        try:
            build_launcher(tuple(signature.values()))
        except Exception:  # noqa: BLE001 - built at the kernel's first launch instead
            pass
        if log is not None:
            log.add("launcher", lane, t1, time.perf_counter_ns())
    return kernel


def load_kernel(source: str, name: str) -> Kernel:
    """The kernel `name` defined by the module `source` (imported once per process)."""
    found = _kernels.get((source, name))
    if found is not None:
        return found
    triton()  # a clear TargetError when triton is missing
    digest = source_hash(source)
    with _lock:
        module = _modules.get(digest)
        if module is None:
            path = cache_dir() / f"fg_{digest}.py"
            if not path.exists() or path.read_text() != source:
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(source)
                os.replace(tmp, path)  # atomic: concurrent compiles never read half a file
            spec = importlib.util.spec_from_file_location(f"{MODULE_PREFIX}{digest}", path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[spec.name] = module  # type: ignore[union-attr]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            for hook in MODULE_HOOKS:
                hook(module)
            _modules[digest] = module
        found = _kernels[(source, name)] = Kernel(getattr(module, name))
    return found


class Launcher:
    """Launches a generated kernel, configured (kernel, grid, arguments) for the strides and shapes it
    is called with, and configured again only when they change: a captured program's steps always
    see the same ones."""

    key: tuple | None = None

    def _configure(self, *args: Any) -> None:
        raise NotImplementedError

    def _configured_for(self, key: tuple, *args: Any) -> None:
        """Configure from `args` unless already configured for `key`."""
        if key != self.key:
            self._configure(*args)
            self.key = key

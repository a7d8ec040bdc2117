"""Generated Triton sources -> launchable kernels.

`triton.jit` reads a kernel's source from its file, so each generated module is written once to a
cache folder (named by the hash of its text) and imported from there. Kernels are cached per source
for the process; Triton keeps its own on-disk cache of the compiled binaries.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .device import triton

CACHE_ROOT = Path.home() / ".cache" / "fusegraph"  # generated sources and autotuning choices
_lock = threading.Lock()
_modules: dict[str, Any] = {}
_kernels: dict[tuple[str, str], Any] = {}  # (source, name) -> JIT function: no hashing of the text per launch
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


def load_kernel(source: str, name: str) -> Any:
    """The JIT function `name` defined by the module `source` (imported once per process)."""
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
            spec = importlib.util.spec_from_file_location(f"fusegraph_triton_{digest}", path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[spec.name] = module  # type: ignore[union-attr]
            spec.loader.exec_module(module)  # type: ignore[union-attr]
            for hook in MODULE_HOOKS:
                hook(module)
            _modules[digest] = module
        found = _kernels[(source, name)] = getattr(module, name)
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

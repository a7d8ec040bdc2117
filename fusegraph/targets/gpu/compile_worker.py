"""A Triton compile worker: run as a script (`python compile_worker.py`) by `compile_pool.py`.

It reads one job a line on stdin (JSON: the generated module's file, the kernel's name, Triton's
specialization data for the launch, the target, the cache folder), compiles the kernel into that
Triton cache, and answers one line on stdout (`{"ok": true}` or the error). It imports only the
standard library and Triton (not fusegraph: a worker starts in a fraction of a second), reads nothing
but the files a job names, and exits when its stdin closes.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    del sys.path[0]  # this script's folder (fusegraph's gpu modules) is not where anything is imported from

import importlib.util  # noqa: E402
import json  # noqa: E402
from typing import Any

_modules: dict[str, Any] = {}


def _module(path: str, name: str) -> Any:
    module = _modules.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        _modules[path] = module
    return module


def tuples(value: Any) -> Any:
    """JSON's lists back to the tuples Triton wrote (its signatures and options hold no lists)."""
    return tuple(tuples(v) for v in value) if isinstance(value, list) else value


def compile_job(job: dict) -> None:
    """Compile the kernel a job describes, as `JITFunction.preload` would, for an explicit target (no
    CUDA set-up here)."""
    import triton
    import triton.language as tl
    import triton.runtime.cache
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(_module(job["path"], job["module"]), job["name"])
    data = json.loads(job["spec"])

    def constant(value: Any) -> Any:
        if isinstance(value, str) and tl.dtype.is_dtype(value):
            return tl.dtype(value)
        if isinstance(value, dict) and "constexpr" in value:
            return tl.constexpr(tuples(value["constexpr"]))
        if isinstance(value, dict):
            raise ValueError(f"a constant this worker cannot rebuild: {value}")
        return tuples(value)

    constants = {tuple(k): constant(v) for k, v in zip(data["constant_keys"], data["constant_vals"])}
    attrs = {tuple(k): v for k, v in zip(data["attrs_keys"], data["attrs_vals"])}
    signature = {k: tuples(v) for k, v in data["signature"].items()}
    options = {k: tuples(v) for k, v in data["options"].items()}
    knobs.cache.dir = job["cache_dir"]
    key = job.get("triton_key")
    if key:  # the parent's hash of the same installation (not computed again here: 0.9 s)
        triton.runtime.cache.triton_key = lambda: key
    triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget(*job["target"]), options=options)


def main() -> None:
    import triton.compiler  # noqa: F401 - imported while the parent still lowers (compile_pool.prestart)

    for line in sys.stdin:
        try:
            compile_job(json.loads(line))
            reply: dict = {"ok": True}
        except Exception as e:  # noqa: BLE001 - the parent compiles the kernel itself and meets the error there
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

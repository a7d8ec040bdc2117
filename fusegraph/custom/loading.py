"""Importing the modules that define custom ops, for the CLI (`fusegraph --custom-ops MODULE ...`):
a dotted module name, or the path of a .py file."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from ..errors import ArgumentError, FusegraphError


def load_custom_ops(spec: str) -> None:
    """Import `spec` (a module name or a .py file); the custom_op calls it makes register its ops."""
    path = Path(spec)
    if spec.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ArgumentError(f"--custom-ops {spec}: no such file")
        name = f"fusegraph_custom_ops_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ArgumentError(f"--custom-ops {spec}: not a Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        _run(spec, lambda: module_spec.loader.exec_module(module))  # type: ignore[union-attr]
        return
    try:
        _run(spec, lambda: importlib.import_module(spec))
    except ModuleNotFoundError as e:
        raise ArgumentError(f"--custom-ops {spec}: no module {e.name!r}") from None


def _run(spec: str, load) -> None:
    """`load()`; the user's module failing is a user error naming it, not a bug in fusegraph."""
    try:
        load()
    except (FusegraphError, ModuleNotFoundError):
        raise
    except Exception as e:
        raise ArgumentError(f"--custom-ops {spec}: importing it failed: {type(e).__name__}: {e}") from e

"""Targets by name. A target is imported only when asked for, so its heavy dependencies load late."""

from __future__ import annotations

import importlib

from ..errors import TargetError
from .base import CompileOptions, Executable, Target

# name -> module that defines `TARGET`
_TARGETS = {"ref": "fusegraph.targets.ref", "cpu": "fusegraph.targets.cpu", "gpu": "fusegraph.targets.gpu"}


def available_targets() -> list[str]:
    return list(_TARGETS)


def get_target(name: str) -> Target:
    if isinstance(name, Target):
        return name
    if name not in _TARGETS:
        raise TargetError(f"unknown target {name!r}; choose one of {available_targets()}")
    try:
        module = importlib.import_module(_TARGETS[name])
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("fusegraph.targets"):
            raise TargetError(f"target {name!r} is not available in this version of fusegraph") from None
        raise TargetError(f"target {name!r} needs {e.name!r}, which is not installed") from None
    target = getattr(module, "TARGET", None)
    if target is None:  # a folder without its package (a target being written, stale __pycache__)
        raise TargetError(f"target {name!r} is not available in this version of fusegraph")
    return target


__all__ = ["CompileOptions", "Executable", "Target", "available_targets", "get_target"]

"""Running pass pipelines over a program's modules, verifying the IR after each change."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..ir.program import Program

Pass = Callable[..., bool]


def pass_name(p: Pass) -> str:
    return getattr(p, "pass_name", getattr(p, "__name__", repr(p)))


def run_pipeline(program: Program, passes: Sequence[Pass], options: Any = None, verify: bool = True) -> None:
    disabled = set(getattr(options, "disabled_passes", ()) or ())
    for p in passes:
        if pass_name(p) in disabled:
            continue
        changed = False
        for mod in program.modules_in_order():
            changed |= bool(p(mod))
        if changed and verify:
            program.verify()

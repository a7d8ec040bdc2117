"""Pass pipelines: run passes (and fixpoints of passes) over every module, verify after changes,
trace, time, dump and disable passes by name, and record per-pass statistics."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import debug
from ..ir.module import Instruction, Module
from ..ir.program import Program

Pass = Callable[..., bool]


def rewrite_each(module: Module, rewrite: Callable[[Module, Instruction], bool]) -> bool:
    """A pass made of one local rewrite: `rewrite(module, ins)` on every instruction still read by
    another, in order; True if any changed the module."""
    changed = False
    for ins in module:
        if ins.users and rewrite(module, ins):
            changed = True
    return changed


def pass_name(p: Any) -> str:
    return getattr(p, "pass_name", None) or getattr(p, "__name__", None) or repr(p)


@dataclasses.dataclass(frozen=True)
class Fixpoint:
    """Repeat `passes` in order until none changes anything (at most `max_iterations` rounds)."""

    passes: tuple[Any, ...]
    max_iterations: int = 8

    @property
    def pass_name(self) -> str:
        return "fixpoint(" + ",".join(pass_name(p) for p in self.passes) + ")"


@dataclasses.dataclass
class PassRecord:
    name: str
    seconds: float
    changed: bool
    stats: Any = None  # ProgramStats after the pass, when collected
    start_ns: int = 0  # time.perf_counter_ns() when it began (the compile phases of a trace)


class PassManager:
    def __init__(self, disabled: Sequence[str] = (), collect_stats: bool = False,
                 verify: str | None = None, trace: bool | None = None, dump_dir: str | None = None):
        self.disabled = set(disabled) | set(debug.disabled_passes())
        self.collect_stats = collect_stats
        self.verify = verify or debug.verify_level()
        self.trace = debug.trace_passes() if trace is None else trace
        self.dump_dir = dump_dir if dump_dir is not None else debug.dump_dir()
        self.records: list[PassRecord] = []
        self._step = 0

    def run(self, program: Program, pipeline: Sequence[Any]) -> bool:
        changed = False
        for p in pipeline:
            changed |= self._run_one(program, p)
        return changed

    def _run_one(self, program: Program, p: Any) -> bool:
        if isinstance(p, Fixpoint):
            any_change = False
            for _ in range(p.max_iterations):
                round_changed = False
                for sub in p.passes:
                    round_changed |= self._run_one(program, sub)
                any_change |= round_changed
                if not round_changed:
                    break
            return any_change
        name = pass_name(p)
        if name in self.disabled:
            return False
        start_ns = time.perf_counter_ns()
        t0 = time.perf_counter()
        changed = False
        for mod in program.modules_in_order():
            changed |= bool(p(mod))
        if changed:
            program.remove_unused_modules()
        seconds = time.perf_counter() - t0
        if changed and self.verify != "off":
            program.verify(check_shapes=self.verify == "full")
        stats = None
        if self.collect_stats:
            from .stats import program_stats

            stats = program_stats(program)
        self.records.append(PassRecord(name, seconds, changed, stats, start_ns))
        if self.trace:
            print(f"[fusegraph] pass {name:<32} {seconds * 1e3:8.2f} ms  {'changed' if changed else '-'}"
                  f"  {len(program.main)} instructions")
        if changed and self.dump_dir:
            self._step += 1
            out = Path(self.dump_dir)
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{self._step:03d}_{name}.txt").write_text(program.to_text(full=False))
        return changed


def run_pipeline(program: Program, passes: Sequence[Any], options: Any = None,
                 manager: PassManager | None = None) -> PassManager:
    disabled = getattr(options, "disabled_passes", ()) or ()
    if manager is None:
        manager = PassManager(disabled=disabled)
    else:  # a caller's manager (recording records) still honours the options' disabled passes
        manager.disabled |= set(disabled)
    manager.run(program, passes)
    return manager

"""The analyze report: what each pass of a pipeline did to a program, in numbers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..ir.program import Program
from .manager import PassManager
from .stats import ProgramStats, program_stats


@dataclasses.dataclass
class PassRow:
    name: str
    runs: int
    changed: int        # how many of the runs changed the program
    seconds: float
    stats: ProgramStats  # after the pass's last run (rows are ordered by that run)


@dataclasses.dataclass
class Analysis:
    parsed: ProgramStats
    rows: list[PassRow]
    final: ProgramStats
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"parsed": self.parsed.as_dict(), "final": self.final.as_dict(), "seconds": self.seconds,
                "passes": [{"name": r.name, "runs": r.runs, "changed": r.changed, "seconds": r.seconds,
                            **r.stats.as_dict()} for r in self.rows]}


def analyze(program: Program, pipeline: Sequence[Any]) -> Analysis:
    """Run `pipeline` on `program` in place, recording statistics after every pass."""
    parsed = program_stats(program)
    pm = PassManager(collect_stats=True)
    pm.run(program, pipeline)
    rows: dict[str, PassRow] = {}
    for rec in pm.records:
        row = rows.pop(rec.name, None) or PassRow(rec.name, 0, 0, 0.0, rec.stats)
        row.runs += 1
        row.changed += rec.changed
        row.seconds += rec.seconds
        row.stats = rec.stats
        rows[rec.name] = row  # re-inserted: rows end up ordered by each pass's last run
    return Analysis(parsed, list(rows.values()), program_stats(program), sum(r.seconds for r in pm.records))

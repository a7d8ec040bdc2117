"""Roll-ups of a Profile: per step, per kernel, per ONNX op type. Times are medians over the runs."""

from __future__ import annotations

import dataclasses
import statistics

from .record import Profile, StepInfo


@dataclasses.dataclass
class Row:
    key: str                 # the step's instruction, kernel name or ONNX op type
    seconds: float           # median per run
    share: float             # of the sum over all steps
    count: int               # steps in the row
    flops: float = 0.0
    bytes: float = 0.0
    nodes: str = ""          # ONNX node names (step rows)
    kernel: str = ""         # step rows

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds * 1e-9 if self.seconds else 0.0

    @property
    def gbytes(self) -> float:
        return self.bytes / self.seconds * 1e-9 if self.seconds else 0.0


def _medians(profile: Profile, lane: str | None = None) -> dict[int, float]:
    return {uid: statistics.median(ts) for uid, ts in profile.step_times(lane).items()}


def step_rows(profile: Profile, lane: str | None = None) -> list[Row]:
    """One row per step, slowest first."""
    from ..ir.provenance import describe

    med = _medians(profile, lane)
    total = sum(med.values()) or 1.0
    rows = [Row(info.instruction, med[uid], med[uid] / total, 1, info.flops, info.bytes,
                describe(info.origin), info.kernel) for uid, info in profile.infos.items() if uid in med]
    return sorted(rows, key=lambda r: -r.seconds)


def _group(profile: Profile, key, lane: str | None = None) -> list[Row]:
    med = _medians(profile, lane)
    total = sum(med.values()) or 1.0
    groups: dict[str, Row] = {}
    for uid, info in profile.infos.items():
        if uid not in med:
            continue
        r = groups.setdefault(key(info), Row(key(info), 0.0, 0.0, 0))
        r.seconds += med[uid]
        r.count += 1
        r.flops += info.flops
        r.bytes += info.bytes
    for r in groups.values():
        r.share = r.seconds / total
    return sorted(groups.values(), key=lambda r: -r.seconds)


def by_kernel(profile: Profile, lane: str | None = None) -> list[Row]:
    """Steps grouped by the kernel the target runs (conv_epilogue, fused_pointwise, dot, ...)."""
    return _group(profile, lambda i: i.kernel, lane)


def by_onnx_op(profile: Profile, lane: str | None = None) -> list[Row]:
    """Steps grouped by the ONNX op types they compute ('Conv+BatchNormalization+Relu' for a fused
    step, '(compiler)' for a layout change the compiler added)."""
    return _group(profile, StepInfo.onnx_op.fget, lane)  # type: ignore[attr-defined]


def as_dict(profile: Profile) -> dict:
    """The profile as plain data (`perf --profile --json`)."""
    def rows(rs: list[Row]) -> list[dict]:
        return [{**dataclasses.asdict(r), "gflops_per_s": r.gflops, "gbytes_per_s": r.gbytes} for r in rs]

    out = {"target": profile.target, "runs": len(profile.runs), "run_seconds": profile.run_seconds(),
           "steps": rows(step_rows(profile)), "by_kernel": rows(by_kernel(profile)),
           "by_onnx_op": rows(by_onnx_op(profile))}
    for lane in profile.lanes:
        out[f"steps_{lane}"] = rows(step_rows(profile, lane))
    return out

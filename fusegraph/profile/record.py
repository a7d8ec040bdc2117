"""A profile's records: one `StepInfo` per kernel step, and per run the start and end of each step."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..ir.module import Instruction
from ..ir.provenance import OnnxNode, merged
from ..ir.shape import Shape


@dataclasses.dataclass(frozen=True)
class StepInfo:
    uid: int
    kernel: str                   # the op the target runs for the step (conv_epilogue, fused_pointwise)
    instruction: str              # its IR line, shortened: '%12 = conv_epilogue(%3, %4) -> float32[1,64,56,56]'
    origin: tuple[OnnxNode, ...]  # the ONNX nodes it computes
    flops: float = 0.0
    bytes: float = 0.0            # read and written

    @property
    def onnx_op(self) -> str:
        """The ONNX op types it computes, joined ('Conv+BatchNormalization+Relu'), or '(compiler)'."""
        return "+".join(dict.fromkeys(n.op_type for n in self.origin)) or "(compiler)"


def _bytes(shape: Any) -> int:
    return shape.bytes if isinstance(shape, Shape) and not shape.is_dynamic else 0


def step_info(ins: Instruction, flops: Callable[[Instruction], float] | None = None,
              members: Sequence[Instruction] = (), kind: str | None = None) -> StepInfo:
    """`ins` as a step; `flops` (the targets pass passes/flops.py's count, a layer above this one).
    `members`: the instructions a target computes in this one step beyond `ins` (a gpu GEMM with its
    epilogue), whose ONNX nodes and FLOPs the step carries too; bytes stay what the step reads and writes.
    `kind`: the kernel the step runs where it is not `ins`'s op (a gpu pattern: attention, whose last
    instruction is its second product, a dot)."""
    args = ", ".join(f"%{i.uid}" for i in ins.inputs)
    moved = _bytes(ins.shape) + sum(_bytes(i.shape) for i in ins.inputs)
    covered = [m for m in members if m is not ins]
    origin = merged(*(m.origin for m in covered), ins.origin) if covered else ins.origin
    work = sum(float(flops(m)) for m in (*covered, ins)) if flops else 0.0
    return StepInfo(ins.uid, kind or ins.op.name, f"%{ins.uid} = {ins.op.name}({args}) -> {ins.shape}", origin,
                    work, float(moved))


class Recorder:
    """What an instrumented run loop calls: `begin_run()`, then `step(uid, t0, t1, value)` per step
    (clock: `time.perf_counter_ns`, or device times in ns from a common origin), then `end_run()`."""

    clock = staticmethod(time.perf_counter_ns)

    def __init__(self, target: str, instructions: Mapping[int, Instruction],
                 flops: Callable[[Instruction], float] | None = None,
                 members: Mapping[int, Sequence[Instruction]] | None = None,
                 kinds: Mapping[int, str] | None = None):
        self.target = target
        self._instructions = instructions
        self._flops = flops
        self._members = members or {}  # uid -> the instructions its step computes with it (step_info)
        self._kinds = kinds or {}  # uid -> the kernel its step runs, where not its instruction's op
        self.infos: dict[int, StepInfo] = {}
        self.runs: list[list[tuple[int, int, int]]] = []  # per run: (uid, start ns, end ns) in order
        self.lanes: dict[str, list[list[tuple[int, int, int]]]] = {}  # extra lanes (gpu: host launches)

    def begin_run(self) -> None:
        self.runs.append([])

    def step(self, uid: int, t0: int, t1: int, value: Any = None, lane: str | None = None) -> None:
        if uid not in self.infos:
            self.infos[uid] = step_info(self._instructions[uid], self._flops, self._members.get(uid, ()),
                                        self._kinds.get(uid))
        if lane is None:
            self.runs[-1].append((uid, t0, t1))
        else:
            runs = self.lanes.setdefault(lane, [])
            while len(runs) < len(self.runs):
                runs.append([])
            runs[-1].append((uid, t0, t1))

    def end_run(self) -> None:
        pass

    def profile(self, meta: dict[str, Any] | None = None) -> Profile:
        return Profile(self.target, self.infos, self.runs, self.lanes, dict(meta or {}))


@dataclasses.dataclass
class Profile:
    target: str
    infos: dict[int, StepInfo]
    runs: list[list[tuple[int, int, int]]]
    lanes: dict[str, list[list[tuple[int, int, int]]]] = dataclasses.field(default_factory=dict)
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)  # compile phases, model name, ...

    @property
    def steps(self) -> list[StepInfo]:
        """The steps in the order the first run ran them."""
        return [self.infos[uid] for uid, _, _ in self.runs[0]] if self.runs else []

    def step_times(self, lane: str | None = None) -> dict[int, list[float]]:
        """Seconds per step uid, one entry per run (a step run twice in a run counts its sum)."""
        out: dict[int, list[float]] = {}
        for run in (self.runs if lane is None else self.lanes.get(lane, [])):
            per: dict[int, float] = {}
            for uid, t0, t1 in run:
                per[uid] = per.get(uid, 0.0) + (t1 - t0) * 1e-9
            for uid, s in per.items():
                out.setdefault(uid, []).append(s)
        return out

    def run_seconds(self) -> list[float]:
        return [(run[-1][2] - run[0][1]) * 1e-9 for run in self.runs if run]


class Capture(Recorder):
    """A Recorder that also keeps a copy of every step's value (arena buffers are reused later in
    the run), by uid: what `verify --bisect` compares."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.values: dict[int, Any] = {}

    def step(self, uid: int, t0: int, t1: int, value: Any = None, lane: str | None = None) -> None:
        super().step(uid, t0, t1, value, lane)
        if lane is None:
            self.values[uid] = _copy(value)


def _copy(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.copy()
    if hasattr(value, "detach"):  # a device tensor
        return value.detach().cpu().numpy().copy()
    return value

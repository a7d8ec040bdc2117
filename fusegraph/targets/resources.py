"""What a compiled program needs in memory, known before any kernel is built, and refused past the limit.

A run holds the weights (every literal of every module), the intermediate tensors of the main module
(the arena of a target that planned one; otherwise the most bytes live at once over the steps, each
value from its writer to its last reader, views not counted) and its outputs (never in an arena).
`peak_memory` adds these up from the IR alone, so `Target.compile` and `fusegraph.load` check them
against `CompileOptions.max_memory` (default: the target's memory, `Target.memory_capacity`) before
lowering: a model mapped to a batch of 2**40 is a ResourceError naming its largest tensor, not a
native library's integer overflow or a MemoryError after seconds of work. Every static tensor must
also fit the kernels' int64 byte offsets (ir/limits.py), whatever the limit.
"""

from __future__ import annotations

import dataclasses

from ..errors import ResourceError
from ..ir.limits import MAX_BYTES, format_bytes
from ..ir.module import Instruction
from ..ir.program import Program
from ..ir.shape import Shape
from ..passes.memory_coloring import max_live, plan_buffers


@dataclasses.dataclass(frozen=True)
class MemoryUse:
    weights: int
    intermediates: int
    outputs: int
    largest: Instruction | None  # the largest tensor the program makes: the culprit when it is too much
    largest_bytes: int

    @property
    def total(self) -> int:
        return self.weights + self.intermediates + self.outputs

    def describe(self) -> str:
        return (f"{format_bytes(self.total)} (weights {format_bytes(self.weights)}, intermediates "
                f"{format_bytes(self.intermediates)}, outputs {format_bytes(self.outputs)})")


def _static_bytes(ins: Instruction) -> int | None:
    s = ins.shape
    return s.bytes if isinstance(s, Shape) and not s.is_dynamic else None


def _culprit(ins: Instruction) -> str:
    m = ins.module
    where = f", instruction {m.instructions.index(ins)} of module {m.name}" if m is not None else ""
    return f"{ins.op.name} : {ins.shape}{where}"


def peak_memory(program: Program) -> MemoryUse:
    """The bytes one run of `program` holds at once; ResourceError for a tensor past int64 bytes."""
    weights, largest, largest_bytes = 0, None, 0
    for m in program.modules_in_order():
        for ins in m.instructions:
            if ins.is_literal:
                weights += getattr(ins.literal, "nbytes", 0)
            n = _static_bytes(ins)
            if n is not None and n > largest_bytes and not ins.is_param:
                largest, largest_bytes = ins, n
    if largest is not None and largest_bytes > MAX_BYTES:
        raise ResourceError(f"{_culprit(largest)} would take {format_bytes(largest_bytes)}, past what the "
                            f"kernels' 64-bit byte offsets address")
    main = program.main
    plan = main.memory_plan
    intermediates = plan.arena_bytes if plan is not None else max_live(plan_buffers(main))
    outputs = sum(_static_bytes(o) or 0 for o in main.outputs if not (o.is_param or o.is_literal))
    return MemoryUse(weights, intermediates, outputs, largest, largest_bytes)


def check_memory(program: Program, limit: int, what: str = "the program") -> MemoryUse:
    """`peak_memory(program)`, or ResourceError when it is above `limit` bytes."""
    use = peak_memory(program)
    if use.total > limit:
        big = f"; its largest tensor is {_culprit(use.largest)}, {format_bytes(use.largest_bytes)}" if use.largest else ""
        raise ResourceError(f"{what} needs {use.describe()}, more than max_memory {format_bytes(limit)}{big}")
    return use

"""Which inputs a program may be specialized on by value: small integer inputs that decide an `if`.

An audio model that takes its sample rate as an input (silero-vad's `sr`, int64 scalar) branches on
it: `if sr == 16000` runs one network, else another. Run as is, the `if` is a host step each call.
Given the value, the condition folds to a constant, inline_constant_if replaces the `if` by the
branch it takes, and what is left is one static program (on gpu: one CUDA graph). The targets that
do it (targets/specialize.py) compile one program per value seen, behind a guard on the value.

`condition_inputs(program)` names the inputs worth it: one-element tensors of an integer type whose
value decides the condition of some `if` (in any module) on its own, i.e. the condition is computed
from those inputs, literals and tensor shapes only (the latter are constants once the shapes are),
through deterministic ops. A condition that also reads data (an activation, a loop counter) would
not fold, so its inputs are not named. `specialize(program, lens, values)`
(passes/specialize_shapes.py) makes the named inputs' readers read a literal of the value.
"""

from __future__ import annotations

from ..ir.module import Instruction
from ..ir.op import OpKind
from ..ir.program import Program
from ..ir.shape import Shape

SHAPE_READERS = frozenset({"shape_of", "size_of"})  # their value is their input's shape, not its data


def _candidate(p: Instruction) -> bool:
    s = p.shape
    return isinstance(s, Shape) and not s.is_dynamic and s.elements == 1 and s.dtype.is_int


def _sources(cond: Instruction, candidates: set[int]) -> set[int] | None:
    """uids of the candidate inputs `cond` is computed from, or None when it reads anything else
    than those, literals and shapes (or goes through an op whose value cannot be folded)."""
    found: set[int] = set()
    seen: set[int] = set()
    stack = [cond]
    while stack:
        x = stack.pop()
        if x.uid in seen or x.is_literal:
            continue
        seen.add(x.uid)
        if x.is_param:
            if x.uid not in candidates:
                return None
            found.add(x.uid)
        elif x.op.name not in SHAPE_READERS:
            if x.module_args or x.op.kind is OpKind.CONTROL or not x.op.deterministic:
                return None
            stack.extend(x.inputs)
    return found


def condition_inputs(program: Program) -> list[str]:
    """Names of the inputs that decide an `if` on their own (see the module docstring), in
    parameter order; none when some input is not a tensor (sequences, optionals)."""
    params = program.main.parameters
    if not all(isinstance(p.shape, Shape) for p in params):
        return []
    candidates = {p.uid for p in params if _candidate(p)}
    if not candidates:
        return []
    found: set[int] = set()
    for mod in program.modules_in_order():
        for ins in mod.instructions:
            if ins.op.name == "if":
                sources = _sources(ins.inputs[0], candidates)
                found |= sources or set()
    return [p.op.param_name for p in params if p.uid in found]

"""`verify --bisect`: which pass makes a target's outputs wrong, and where the compiled program
first diverges.

1. Passes: the program is compiled again with each pass that changed it disabled in turn (through
   CompileOptions.disabled_passes, the pass manager's own mechanism); a pass without which the outputs
   match is a culprit. When disabling any one does not help, the fault is below the passes (a kernel).
2. Instructions: the failing program runs once with every step's value kept (Executable.capture).
   Each step is evaluated again by its op's numpy reference on the values the target gave its inputs:
   the first that differs is a wrong kernel. Each step that still equals an ONNX tensor (provenance)
   is compared with the reference's value of that tensor: the first that differs is where the program
   departs from the model, a wrong rewrite showing there even when its kernel is right.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import FusegraphError
from ..ir.module import Instruction
from ..ir.op import OpKind


@dataclasses.dataclass
class PassTrial:
    name: str
    outcome: str  # "fixes it", "still fails", "compile fails: ..."


@dataclasses.dataclass
class Divergence:
    ins: Instruction
    diff: Any          # verify.OutputDiff
    what: str          # "kernel" (its op's reference disagrees) or "tensor" (the ONNX tensor disagrees)
    tensor: str = ""


def passes_that_ran(manager: Any) -> list[str]:
    """Names of the passes that changed the program, in first-run order, each once."""
    return list(dict.fromkeys(r.name for r in manager.records if r.changed))


def bisect_passes(names: list[str], fails_without: Callable[[str], bool | str]) -> list[PassTrial]:
    """`fails_without(name)`: True when the outputs still differ with `name` disabled, False when
    they match, or the message of the error compiling without it."""
    trials = []
    for name in names:
        r = fails_without(name)
        outcome = f"compile fails: {r}" if isinstance(r, str) else ("still fails" if r else "fixes it")
        trials.append(PassTrial(name, outcome))
    return trials


class _Values:
    """Each instruction's value in the run: kept by the capture, or (views and constants the target
    folded away) evaluated by the reference from its inputs' values."""

    def __init__(self, captured: Mapping[int, Any], feeds: Mapping[str, Any]):
        self.known = dict(captured)
        self.feeds = feeds

    def of(self, ins: Instruction) -> Any:
        from ..targets.ref.interpreter import evaluate

        stack = [ins]
        while stack:
            x = stack[-1]
            if x.uid in self.known:
                stack.pop()
            elif x.is_literal:
                self.known[x.uid] = x.literal
            elif x.is_param:
                self.known[x.uid] = self.feeds[x.op.param_name]
            else:
                pending = [i for i in x.inputs if i.uid not in self.known]
                if pending:
                    stack.extend(pending)
                    continue
                self.known[x.uid] = evaluate(x, [self.known[i.uid] for i in x.inputs], self.known)
        return self.known[ins.uid]


def localize(program: Any, feeds: Mapping[str, Any], reference: Mapping[str, Any], atol: float,
             rtol: float) -> tuple[Divergence | None, Divergence | None, int]:
    """The first wrong kernel, the first step departing from the ONNX tensors of `reference` (tensor
    name -> value), and how many steps were compared with a tensor."""
    from ..targets.ref.interpreter import evaluate
    from .commands.verify import compare_one

    captured = program.executable.capture(feeds)
    values = _Values(captured, feeds)
    kernel = tensor = None
    compared = 0
    for ins in program.main.instructions:
        if ins.op.kind is OpKind.BUILTIN:
            continue
        if ins.uid not in captured:  # a view made once, a folded constant: the target's data seen through it
            if tensor is None and ins.tensor in reference:
                tensor = _departs(ins, values.of(ins), reference, atol, rtol) or tensor
                compared += 1
            continue
        got = captured[ins.uid]
        if kernel is None:
            try:
                want = evaluate(ins, [values.of(i) for i in ins.inputs], values.known)
            except FusegraphError:
                want = None  # an op the reference cannot run on these values: no verdict
            if want is not None:
                d = compare_one(f"%{ins.uid}", got, want, atol, rtol)
                if not d.ok:
                    kernel = Divergence(ins, d, "kernel")
        if tensor is None and ins.tensor in reference:
            tensor = _departs(ins, got, reference, atol, rtol)
            compared += 1
        if kernel is not None and tensor is not None:
            break
    return kernel, tensor, compared


def _departs(ins: Instruction, got: Any, reference: Mapping[str, Any], atol: float, rtol: float) -> Divergence | None:
    """A Divergence when `got` (the value of `ins` in the run) differs from its ONNX tensor's."""
    from .commands.verify import compare_one

    d = compare_one(ins.tensor or "", got, reference[ins.tensor], atol, rtol)
    return None if d.ok else Divergence(ins, d, "tensor", ins.tensor or "")

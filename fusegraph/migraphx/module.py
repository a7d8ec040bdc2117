"""`migraphx.module` and `instruction_ref`: building a program by hand on fusegraph's IR builder.

add_instruction takes a `migraphx.op` and the instructions it reads; the op becomes a fusegraph op
once their shapes are known (ops.py), and its shape comes from the op's shape rule, as every
instruction's does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentError
from ..ir.module import Instruction, Module
from .argument import _as_array
from .ops import op
from .shape import shape


class instruction_ref:  # noqa: N801  (MIGraphX's name)
    """An instruction of a module: its shape() and op()."""

    def __init__(self, ins: Instruction):
        self.fusegraph_instruction = ins

    def shape(self) -> shape:
        return shape.wrap(self.fusegraph_instruction.shape)

    def op(self) -> Any:
        return self.fusegraph_instruction.op

    def __repr__(self) -> str:
        return f"instruction_ref(%{self.fusegraph_instruction.uid} = {self.fusegraph_instruction.op})"


def _ins(x: Any, what: str) -> Instruction:
    if not isinstance(x, instruction_ref):
        raise ArgumentError(f"module.{what}: expected instruction_refs (from add_parameter, add_literal, "
                            f"add_instruction), got {type(x).__name__}")
    return x.fusegraph_instruction


class module:  # noqa: N801
    """A module of a program (program.get_main_module(), program.create_module(name))."""

    def __init__(self, m: Module):
        self.fusegraph_module = m

    def add_parameter(self, name: str, shape: shape) -> instruction_ref:  # noqa: A002
        if not isinstance(shape, globals()["shape"]):
            raise ArgumentError(f"module.add_parameter({name!r}): expected a migraphx.shape, got {shape!r}")
        return instruction_ref(self.fusegraph_module.add_parameter(name, shape.fusegraph_shape))

    def add_literal(self, data: Any) -> instruction_ref:
        return instruction_ref(self.fusegraph_module.add_literal(_as_array(data).copy()))

    def add_instruction(self, op: op, args: Sequence[instruction_ref], mod_args: Sequence[module] = ()) -> instruction_ref:  # noqa: A002
        if not isinstance(op, globals()["op"]):
            raise ArgumentError(f"module.add_instruction: expected a migraphx.op, got {op!r}")
        inputs = [_ins(a, "add_instruction") for a in args]
        subs = [m.fusegraph_module for m in mod_args]
        fg_op = op.build([i.shape for i in inputs])
        return instruction_ref(self.fusegraph_module.add(fg_op, *inputs, module_args=subs))

    def add_return(self, args: Sequence[instruction_ref]) -> instruction_ref:
        return instruction_ref(self.fusegraph_module.add_return(*[_ins(a, "add_return") for a in args]))

    def print(self) -> None:  # noqa: A003
        print(self)

    def __repr__(self) -> str:
        m = self.fusegraph_module
        if m.program is None:
            return f"module {m.name}"
        text = m.program.to_text(full=False).splitlines()
        start = next(k for k, line in enumerate(text) if line.split(" ")[:2] == ["module", m.name])
        end = next((k for k in range(start + 1, len(text)) if text[k].startswith("module ")), len(text))
        return "\n".join(text[start:end])

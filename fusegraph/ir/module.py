"""Instructions and modules: the single-level IR.

A `Module` is an ordered, topologically sorted list of `Instruction`s ending in one `@return`.
Every instruction knows its op, its inputs, its users and its shape from the moment it is made.
Instructions of a submodule (If/Loop bodies) may use instructions of the enclosing modules.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import FusegraphError, IRError, ShapeError
from .builtin import GetTupleElem, Literal, Param, Return
from .op import Op, OpKind
from .provenance import OnnxNode, inherit
from .shape import AnyShape

_ids = itertools.count()


class Instruction:
    # origin: the ONNX nodes it computes; tensor: the ONNX tensor it equals (ir/provenance.py)
    __slots__ = ("op", "inputs", "shape", "module_args", "users", "module", "uid", "origin", "tensor")

    def __init__(self, op: Op, inputs: Sequence[Instruction], shape: AnyShape,
                 module_args: Sequence[Module] = ()):
        self.op = op
        self.inputs: list[Instruction] = list(inputs)
        self.shape = shape
        self.module_args: list[Module] = list(module_args)
        self.users: list[Instruction] = []
        self.module: Module | None = None
        self.uid = next(_ids)  # creation order; stable tie-breaker for passes
        self.origin: tuple[OnnxNode, ...] = ()
        self.tensor: str | None = None

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_param(self) -> bool:
        return isinstance(self.op, Param)

    @property
    def is_literal(self) -> bool:
        return isinstance(self.op, Literal)

    @property
    def literal(self) -> np.ndarray:
        assert isinstance(self.op, Literal)
        return self.op.value

    def __repr__(self) -> str:
        return f"<{self.op.name} #{self.uid} {self.shape}>"


def _compute_shape(op: Op, inputs: Sequence[Instruction], module_args: Sequence[Module]) -> AnyShape:
    try:
        if module_args:
            return op.compute_shape_with_modules([i.shape for i in inputs], module_args)  # type: ignore[attr-defined]
        return op.infer_shape([i.shape for i in inputs])
    except FusegraphError:
        raise
    except (ValueError, IndexError, TypeError, ArithmeticError, AssertionError) as e:
        shapes = ", ".join(str(i.shape) for i in inputs)
        raise ShapeError(f"{op}: cannot compute the output shape from ({shapes}): {e}") from e


INDEX_WINDOW = 64  # Module.index looks this far before the last position found, then onwards


def _in_prologue(ins: Instruction) -> bool:
    return isinstance(ins.op, (Param, Literal))


class Module:
    def __init__(self, name: str = "main", parent: Module | None = None):
        self.name = name
        self.parent = parent
        self.instructions = []
        self.memory_plan: Any = None  # set by passes.memory_coloring
        self.program: Any = None      # the Program that owns this module (set by Program)

    @property
    def instructions(self) -> list[Instruction]:
        """The instructions in order. Edit them through the module's methods: a list edited in
        place past them leaves `_prologue_end`'s count stale (assigning a new list is fine)."""
        return self._instructions

    @instructions.setter
    def instructions(self, value: list[Instruction]) -> None:
        self._instructions = value
        self._prologue: int | None = None  # leading params and literals, counted when next asked
        self._last_index = 0  # where `index` found the last instruction it was asked for

    # -- building ---------------------------------------------------------------------------------
    def _attach(self, ins: Instruction, index: int | None) -> Instruction:
        ins.module = self
        for i in ins.inputs:
            i.users.append(ins)
        self._place(ins, len(self._instructions) if index is None else index)
        return ins

    def _place(self, ins: Instruction, index: int) -> None:
        """Put `ins` at `index` of the list, keeping the prologue's count (an insert inside the
        prologue lengthens it if `ins` is a param or literal, else ends it there)."""
        self._instructions.insert(index, ins)
        end = self._prologue
        if end is not None and index <= end:
            self._prologue = end + 1 if _in_prologue(ins) else index

    def add(self, op: Op, *inputs: Instruction, module_args: Sequence[Module] = ()) -> Instruction:
        """Append an instruction before the return (if any) and infer its shape."""
        ins = Instruction(op, inputs, _compute_shape(op, inputs, module_args), module_args)
        ret = self.return_ins
        return self._attach(ins, None if ret is None else len(self.instructions) - 1)

    def insert(self, before: Instruction, op: Op, *inputs: Instruction,
               module_args: Sequence[Module] = ()) -> Instruction:
        ins = Instruction(op, inputs, _compute_shape(op, inputs, module_args), module_args)
        return self._attach(ins, self.index(before))

    def add_parameter(self, name: str, shape: AnyShape) -> Instruction:
        if any(p.op.param_name == name for p in self.parameters):
            raise IRError(f"module {self.name}: parameter {name!r} defined twice")
        ins = Instruction(Param(name, shape), [], shape)
        # parameters come first, in declaration order
        return self._attach(ins, len(self.parameters))

    def add_literal(self, value) -> Instruction:
        value = np.asarray(value)
        op = Literal(value)
        ins = Instruction(op, [], op.compute_shape([]))
        return self._attach(ins, self._prologue_end())

    def _prologue_end(self) -> int:
        """Index after the leading parameters and literals (where new literals go, in order). Kept
        as a count between edits: rescanning the prologue at every new literal made fp16
        conversion and constant folding quadratic (Swin-T at batch 32: 1,371 literals, 2.5 s)."""
        if self._prologue is None:
            k, ins = 0, self._instructions
            while k < len(ins) and _in_prologue(ins[k]):
                k += 1
            self._prologue = k
        return self._prologue

    def add_return(self, *outputs: Instruction) -> Instruction:
        if self.return_ins is not None:
            self.remove(self.return_ins)
        ins = Instruction(Return(), outputs, Return().infer_shape([o.shape for o in outputs]))
        return self._attach(ins, None)

    def tuple_elem(self, ins: Instruction, index: int) -> Instruction:
        return self.insert_after(ins, GetTupleElem(index), ins)

    def insert_after(self, after: Instruction, op: Op, *inputs: Instruction) -> Instruction:
        ins = Instruction(op, inputs, _compute_shape(op, inputs, ()))
        return self._attach(ins, self.index(after) + 1)

    # -- editing ----------------------------------------------------------------------------------
    def replace(self, old: Instruction, new: Instruction) -> None:
        """Make every user of `old` use `new` instead (old stays until dead-code elimination)."""
        if old is new:
            return
        inherit(old, new)
        users = list(old.users)
        for u in users:
            u.inputs = [new if i is old else i for i in u.inputs]
            new.users.append(u)
        old.users = []
        if str(old.shape) != str(new.shape):  # same values, another layout: views of it change
            self._refresh_shapes(users)

    def _refresh_shapes(self, users: Sequence[Instruction]) -> None:
        """Re-derive the shapes of `users` and of everything downstream whose shape changes."""
        stack = list(users)
        while stack:
            u = stack.pop()
            if u.op.kind is OpKind.BUILTIN and not isinstance(u.op, Return):
                continue
            shape = _compute_shape(u.op, u.inputs, u.module_args)
            if str(shape) != str(u.shape):
                u.shape = shape
                stack.extend(u.users)

    def replace_inputs(self, ins: Instruction, inputs: Sequence[Instruction]) -> None:
        for i in ins.inputs:
            i.users.remove(ins)
        ins.inputs = list(inputs)
        for i in ins.inputs:
            i.users.append(ins)
        self._refresh_shapes([ins])

    def remove(self, ins: Instruction) -> None:
        if ins.users:
            raise IRError(f"cannot remove {ins}: still used by {ins.users}")
        for i in ins.inputs:
            i.users.remove(ins)
        self._unplace(ins)
        ins.module = None

    def _unplace(self, ins: Instruction) -> None:
        k = self.index(ins)
        del self._instructions[k]
        end = self._prologue
        if end is not None and k <= end:  # inside the prologue: one shorter; at its end: it may run on
            self._prologue = end - 1 if k < end else None

    def move_before(self, ins: Instruction, before: Instruction) -> None:
        if ins is before:
            return
        self._unplace(ins)
        self._place(ins, self.index(before))

    def adopt(self, ins: Instruction, index: int) -> None:
        """Move `ins` out of its module (a branch being inlined) to `index` of this one; its inputs,
        users and submodules stay as they are."""
        ins.module._unplace(ins)
        ins.module = self
        self._place(ins, index)

    # -- queries ----------------------------------------------------------------------------------
    def index(self, ins: Instruction) -> int:
        """`ins`'s position, looked for first near the last one found: passes edit a module in
        order (inserting before the instruction they are at, removing dead ones backwards), so the
        next position asked for is most often a few places away (list.index compares by identity:
        Instruction has no __eq__)."""
        items = self._instructions
        start = max(0, self._last_index - INDEX_WINDOW)
        try:
            k = items.index(ins, start)
        except ValueError:
            try:
                k = items.index(ins, 0, start)
            except ValueError:
                raise IRError(f"{ins} is not in module {self.name}") from None
        self._last_index = k
        return k

    def __iter__(self) -> Iterator[Instruction]:
        return iter(list(self.instructions))

    def __len__(self) -> int:
        return len(self.instructions)

    @property
    def parameters(self) -> list[Instruction]:
        return [i for i in self.instructions if i.is_param]

    @property
    def return_ins(self) -> Instruction | None:
        if self.instructions and isinstance(self.instructions[-1].op, Return):
            return self.instructions[-1]
        return None

    @property
    def outputs(self) -> list[Instruction]:
        ret = self.return_ins
        return list(ret.inputs) if ret is not None else []

    def get_parameter(self, name: str) -> Instruction:
        for p in self.parameters:
            if p.op.param_name == name:
                return p
        raise IRError(f"module {self.name} has no parameter {name!r}")

    def visible(self) -> set[int]:
        """uids of instructions this module's instructions may use (its own and its ancestors')."""
        seen: set[int] = set()
        m: Module | None = self
        while m is not None:
            seen.update(i.uid for i in m.instructions)
            m = m.parent
        return seen

    # -- checking ---------------------------------------------------------------------------------
    def verify(self, check_shapes: bool = True) -> None:
        """Raise IRError unless the module is well formed: SSA order, consistent use lists, and
        (with `check_shapes`) every shape equal to what its op's rule gives now."""
        defined: set[int] = set()
        m = self.parent
        while m is not None:
            defined.update(i.uid for i in m.instructions)
            m = m.parent
        for pos, ins in enumerate(self.instructions):
            if ins.module is not self:
                raise IRError(f"{self.name}[{pos}] {ins}: belongs to another module")
            for i in ins.inputs:
                if i.uid not in defined:
                    raise IRError(f"{self.name}[{pos}] {ins.op}: input {i} is not defined before use")
                if ins not in i.users:
                    raise IRError(f"{self.name}[{pos}] {ins.op}: missing from the users of {i}")
            for u in ins.users:
                if ins not in u.inputs:
                    raise IRError(f"{self.name}[{pos}] {ins.op}: stale user {u}")
            if isinstance(ins.op, Return) and pos != len(self.instructions) - 1:
                raise IRError(f"{self.name}: @return is not the last instruction")
            if check_shapes and (ins.op.kind is not OpKind.BUILTIN or isinstance(ins.op, Return)):
                expected = _compute_shape(ins.op, ins.inputs, ins.module_args)
                if str(expected) != str(ins.shape):
                    raise IRError(f"{self.name}[{pos}] {ins.op}: shape {ins.shape} but its rule gives {expected}")
            defined.add(ins.uid)
        if self.return_ins is None:
            raise IRError(f"module {self.name} has no @return")

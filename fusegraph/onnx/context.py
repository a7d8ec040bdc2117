"""What a converter works with: the module being built, constant evaluation, broadcasting helpers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FusegraphError, ParseError, ShapeError, ValueDependentError
from ..ir.dtypes import DType
from ..ir.module import Instruction, Module
from ..ir.op import Op, OpKind, make_op
from ..ir.provenance import OnnxNode
from ..ir.shape import Shape

if TYPE_CHECKING:
    from .parser import OnnxParser


class Context:
    """Builder handed to converters. `add` appends an instruction to the current module."""

    def __init__(self, parser: OnnxParser, module: Module, opsets: dict[str, int]):
        self.parser = parser
        self.module = module
        self.opsets = opsets
        self.node: Any = None  # the Node being converted, for error messages

    @property
    def opset(self) -> int:
        return self.opsets.get("", 1)

    @property
    def program(self):
        return self.parser.program

    # -- building ---------------------------------------------------------------------------------
    def add(self, op: Op | str, *inputs: Instruction, module_args: Sequence[Module] = (), **attrs: Any) -> Instruction:
        if isinstance(op, str):
            op = make_op(op, **attrs)
        for i, x in enumerate(inputs):
            if not isinstance(x, Instruction):
                raise ParseError(f"{self._where()}input {i} of {op.name} is missing")
        try:
            ins = self.module.add(op, *inputs, module_args=module_args)
        except ShapeError as e:
            raise ShapeError(f"{self._where()}{e}") from None
        if self.node is not None:  # provenance: the node this instruction computes (ir/provenance.py)
            ins.origin = (OnnxNode(self.node.name, self.node.op_type),)
        return ins

    def literal(self, value: Any, dtype: DType | None = None) -> Instruction:
        arr = np.asarray(value) if dtype is None else np.asarray(value, dtype=dtype.np)
        return self.module.add_literal(arr)

    def tuple_elems(self, ins: Instruction, n: int) -> list[Instruction]:
        """Split a multi-output instruction into its `n` results."""
        return [self.add("get_tuple_elem", ins, index=k) for k in range(n)]

    def scalar_like(self, value: Any, like: Instruction) -> Instruction:
        return self.literal(np.asarray(value, dtype=like.shape.dtype.np))

    def _where(self) -> str:
        n = self.node
        return f"node {n.name!r} ({n.op_type}): " if n is not None else ""

    def error(self, msg: str, kind: type[ParseError] = ParseError) -> ParseError:
        return kind(f"{self._where()}{msg}")

    # -- constants --------------------------------------------------------------------------------
    def const(self, ins: Instruction | None) -> np.ndarray | None:
        """The value of `ins` if it can be computed now (from literals only), else None."""
        if ins is None:
            return None
        if ins.is_literal:
            return ins.literal
        cache = self.parser.const_cache
        if ins.uid in cache:
            return cache[ins.uid]
        # Iterative post-order walk over the constant cone; give up at the first non-constant.
        stack, memo = [ins], {}
        while stack:
            top = stack[-1]
            if top.uid in cache or top.is_literal:
                stack.pop()
                continue
            op = top.op
            if self._shape_const(top, memo) is not None:  # e.g. Shape(x)[-1] of a fixed dim of a dynamic x
                stack.pop()
                continue
            if (op.kind in (OpKind.BUILTIN, OpKind.CONTROL) or not op.deterministic or top.module_args):
                return None
            pending = [i for i in top.inputs if i.uid not in cache and not i.is_literal]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            args = [i.literal if i.is_literal else cache[i.uid] for i in top.inputs]
            try:
                cache[top.uid] = op.compute(args)
            except FusegraphError:
                return None
            except (ValueError, TypeError, IndexError, ArithmeticError):
                return None
        return cache.get(ins.uid)

    def _shape_const(self, ins: Instruction, memo: dict) -> np.ndarray | None:
        """A shape value that is a constant although it reads a dynamic tensor's shape: the fixed
        dims of Shape(x) and arithmetic on them (ir/symbolic_values.py)."""
        from ..ir.symbolic_values import value_of

        value = value_of(ins, memo)
        consts = None if value is None else [None if v is None else v.constant for v in value]
        if consts is None or None in consts:
            return None
        out = np.array(consts, dtype=ins.shape.dtype.np).reshape(ins.shape.lens)
        self.parser.const_cache[ins.uid] = out
        return out

    def const_ints(self, ins: Instruction | None, what: str) -> list[int] | None:
        """The values of a constant list input (shape, axes, pads, repeats, ...): 1-D in ONNX, or a
        scalar where ORT allows one; a tensor of more dims is refused, not flattened."""
        v = self.const(ins)
        if v is None:
            return None
        v = np.asarray(v)
        if v.ndim > 1:
            raise self.error(f"{what} must be a 1-D list of integers, it is {ins.shape}")
        if v.dtype.kind not in "iub":
            raise self.error(f"{what} must hold integers, it is {ins.shape}")
        return [int(x) for x in v.reshape(-1)]

    def require_scalar(self, ins: Instruction, what: str) -> None:
        """A ParseError unless `ins` is scalar-like: a scalar, or a 1-element 1-D tensor (which ORT
        accepts for ONNX's scalar inputs). A larger rank would broadcast, or be read as its first value."""
        s = ins.shape
        if s.is_dynamic or s.ndim > 1 or s.elements != 1:
            raise self.error(f"{what} must be a scalar (or of shape [1]), it is {s}")

    def require_const(self, ins: Instruction | None, what: str) -> np.ndarray:
        v = self.const(ins)
        if v is None:
            raise self.error(f"{what} must be a constant (computed at run time is not supported)",
                             ValueDependentError)
        return v

    # -- helpers ----------------------------------------------------------------------------------
    def broadcast(self, *xs: Instruction) -> list[Instruction]:
        """Numpy-style multidirectional broadcast: every result has the common lens."""
        shapes = [x.shape for x in xs]
        if all(s.dims == shapes[0].dims for s in shapes):
            return list(xs)
        if any(s.is_dynamic for s in shapes):
            out = []
            for x in xs:
                others = [y for y in xs if y is not x]
                out.append(self.add("broadcast_like", x, *others))
            return out
        try:
            lens = np.broadcast_shapes(*[s.lens for s in shapes])
        except ValueError:
            raise ShapeError(f"{self._where()}cannot broadcast {', '.join(map(str, shapes))}") from None
        return [x if x.shape.lens == tuple(lens) else self.add("broadcast", x, out_lens=tuple(lens)) for x in xs]

    def pointwise(self, name: str, *xs: Instruction, **attrs: Any) -> Instruction:
        return self.add(name, *self.broadcast(*xs), **attrs)

    def convert(self, x: Instruction, dtype: DType) -> Instruction:
        if x.shape.dtype == dtype:
            return x
        return self.add("convert", x, to=dtype)

    def reshape(self, x: Instruction, lens: Sequence[int]) -> Instruction:
        lens = tuple(int(n) for n in lens)
        if isinstance(x.shape, Shape) and not x.shape.is_dynamic and x.shape.lens == lens:
            return x
        return self.add("reshape", x, dims=lens)

    def parse_subgraph(self, graph: Any, name: str, input_shapes: Sequence[Any] | None = None) -> Module:
        return self.parser.parse_subgraph(graph, name, self, input_shapes)

    def inline_subgraph(self, graph: Any, inputs: Sequence[Instruction] = ()) -> list[Instruction]:
        """Parse a subgraph into this module with its inputs bound to `inputs` (none for an If
        branch known at parse time); return its outputs."""
        return self.parser.inline_subgraph(graph, self, inputs)

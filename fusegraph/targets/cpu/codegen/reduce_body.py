"""A fused_reduce body as values per element (F) or per row (R), with the accumulators it needs.

`Body` checks what the C generator handles (reduced axes a trailing block of the reduced lens, ops it
knows, dtypes with a C type) and raises CodegenUnsupported otherwise; reduce.py writes the C.
Views (parameters and broadcasts of them) are loads from a parameter's buffer with its strides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ....ir.dtypes import DType
from ....ir.module import Instruction, Module
from ....ir.shape import Shape
from .c_expr import CodegenUnsupported, c_type

REDUCE_OPS = {"reduce_sum": "sum", "reduce_mean": "mean", "reduce_prod": "prod",
              "reduce_max": "max", "reduce_min": "min"}
NORMALIZE_OPS = ("softmax", "log_softmax")
BUFFER_BYTES = 64 * 1024  # per-thread row buffers for kept values, on the stack


@dataclass(eq=False)
class Acc:
    """An accumulator: `op` (sum | mean | prod | max | min | sq) of F node `src` in pass `pass_`;
    `sq` sums (x - center)^2, center being an R node (centred moments) or None (raw moments)."""

    name: str
    op: str
    src: Node
    pass_: int
    result: str  # the C name of the finished per-row value
    dtype: DType  # of the finished value
    center: Node | None = None


@dataclass(eq=False)
class Node:
    kind: str  # view | pw | alias | acc | tuple | exp | log | softmax
    cls: str  # F (per element) | R (per row) | raw (a parameter only broadcast)
    dtype: DType
    level: int  # R values it needs are known after this pass
    ins: Instruction | None = None
    inputs: list[Node] = field(default_factory=list)
    name: str = ""
    param: int = -1  # views: which parameter
    shape: Shape | None = None  # views: lens and strides into the parameter's buffer
    accs: list[Acc] = field(default_factory=list)
    index: int = 0  # alias of a tuple element: which
    uses: set[int] = field(default_factory=set)
    kept: bool = False


class Body:
    """A fused_reduce body as per-row and per-element nodes, with its accumulators."""

    def __init__(self, body: Module, axes: Sequence[int]):
        self.module = body
        red = [i for i in body.instructions
               if i.op.name in REDUCE_OPS or i.op.name == "moments" or i.op.name in NORMALIZE_OPS]
        if not red:
            raise CodegenUnsupported(f"{body.name}: no reduction in the body")
        self.full = tuple(red[0].inputs[0].shape.lens)
        nd = len(self.full)
        self.axes = tuple(sorted(a % nd for a in axes))
        # (reducing size-1 axes only, R is 1: a row is one element, its per-row and per-element
        # values the same numbers, so either reading of an ambiguous lens is right)
        self.reduced = tuple(1 if k in self.axes else n for k, n in enumerate(self.full))
        self.outer = [k for k in range(nd) if k not in self.axes and self.full[k] > 1]
        self.red = [k for k in self.axes if self.full[k] > 1]
        if self.outer and self.red and max(self.outer) > min(self.red):
            raise CodegenUnsupported(f"{body.name}: reduced axes {list(self.axes)} of {list(self.full)} "
                                     "are not a trailing block")
        self.rows = math.prod(self.full[k] for k in self.outer)
        self.R = math.prod(self.full[k] for k in self.red)
        self.nodes: list[Node] = []  # in a topological order
        self.accs: list[Acc] = []
        self.out: Node | None = None
        by_uid: dict[int, Node] = {}
        for ins in body.instructions:
            node = self._node(ins, [by_uid.get(i.uid) for i in ins.inputs])
            if node is not None:
                by_uid[ins.uid] = node
        if self.out is None:
            raise CodegenUnsupported(f"{body.name}: no @return")

    def _fail(self, why: str) -> CodegenUnsupported:
        return CodegenUnsupported(f"{self.module.name}: {why}")

    def _cls(self, lens) -> str:
        return "F" if tuple(lens) == self.full else "R" if tuple(lens) == self.reduced else "raw"

    def _push(self, node: Node) -> Node:
        node.name = f"n{len(self.nodes)}"
        self.nodes.append(node)
        return node

    def _acc(self, node: Node, op: str, src: Node, pass_: int, center: Node | None = None) -> Acc:
        if src.cls != "F":
            raise self._fail("reduces a value that is not per element")
        if src.dtype == DType.bool and op not in ("max", "min"):
            raise self._fail(f"{op} of booleans")
        a = Acc(f"a{len(self.accs)}", op, src, pass_, f"{node.name}_{len(node.accs)}", node.dtype, center)
        node.accs.append(a)
        self.accs.append(a)
        return a

    def _node(self, ins: Instruction, xs: list) -> Node | None:
        op, name, shape = ins.op, ins.op.name, ins.shape
        level = max((x.level for x in xs if x is not None), default=0)
        if name == "@return":
            if len(xs) != 1 or xs[0].kind in ("view", "alias"):
                raise self._fail("returns several values, or an input view")
            self.out = xs[0]
            return None
        if name != "@param" and (not isinstance(shape, Shape) and name != "moments"):
            raise self._fail(f"{name} gives {shape}")
        if name == "@param" or (name == "broadcast" and xs[0].kind == "view"):
            # A parameter, or a broadcast view of one: loads from the parameter's buffer.
            cls = self._cls(shape.lens)
            param = self.module.parameters.index(ins) if name == "@param" else xs[0].param
            if cls != "raw":
                c_type(shape.dtype)
            return self._push(Node("view", cls, shape.dtype, 0, ins, param=param, shape=shape))
        if name == "broadcast":
            (src,) = xs
            if src.cls != "R" or self._cls(shape.lens) == "raw":
                raise self._fail(f"broadcast of {ins.inputs[0].shape} to {shape}")
            return self._push(Node("alias", self._cls(shape.lens), src.dtype, src.level, ins, [src]))
        if name == "get_tuple_elem":
            (src,) = xs
            if src.kind != "tuple":
                raise self._fail(f"get_tuple_elem of {src.kind}")
            return self._push(Node("alias", "R", src.dtype, src.accs[op.index].pass_, ins, [src],
                                    index=op.index))
        if getattr(op, "expr", None) is not None:  # a pointwise op: its scalar body
            cls = self._cls(shape.lens)
            if cls == "raw" or any(x.cls != cls for x in xs):
                raise self._fail(f"{name} on {shape} mixes per-row and per-element values")
            c_type(shape.dtype)
            return self._push(Node("pw", cls, shape.dtype, level, ins, xs))
        if name in REDUCE_OPS or name == "moments" or name in NORMALIZE_OPS:
            axes = tuple(sorted(op.axes)) if hasattr(op, "axes") else (op.axis % len(self.full),)
            if axes != self.axes or tuple(ins.inputs[0].shape.lens) != self.full:
                raise self._fail(f"{op} does not reduce axes {list(self.axes)} of {list(self.full)}")
            (src,) = xs
            c_type(src.dtype)
            if name in REDUCE_OPS:
                node = self._push(Node("acc", "R", shape.dtype, level + 1, ins, [src]))
                self._acc(node, REDUCE_OPS[name], src, level + 1)
                return node
            if not src.dtype.is_float:
                raise self._fail(f"{name} of {src.dtype}")
            if name == "moments":
                node = self._push(Node("tuple", "R", src.dtype, level + 1, ins, [src]))
                mean = self._acc(node, "mean", src, level + 1)
                if op.centered:  # the second pass subtracts the finished mean
                    center = self._push(Node("alias", "R", src.dtype, mean.pass_, None, [node], index=0))
                    self._acc(node, "sq", src, level + 2, center)
                else:
                    self._acc(node, "sq", src, level + 1)
                return node
            mx = self._push(Node("acc", "R", src.dtype, level + 1, None, [src]))
            self._acc(mx, "max", src, level + 1)
            e = self._push(Node("exp", "F", src.dtype, level + 1, None, [src, mx]))
            total = self._push(Node("acc", "R", src.dtype, level + 2, None, [e]))
            self._acc(total, "sum", e, level + 2)
            if name == "softmax":
                return self._push(Node("softmax", "F", src.dtype, level + 2, ins, [e, total]))
            log = self._push(Node("log", "R", src.dtype, level + 2, None, [total]))
            return self._push(Node("softmax", "F", src.dtype, level + 2, ins, [src, mx, log]))
        raise self._fail(f"no C kernel for {name} inside a fused reduction")


def view_offsets(b: Body, n: Node) -> tuple[str, int]:
    """(row offset, step along the row) of a view; the offset is `row * k` when the outer strides are
    a scaled contiguous layout, else a sum over the outer indices i<k>."""
    s = n.shape.strides
    sigma, linear, size = None, True, 1
    for k in reversed(b.outer):
        sigma = s[k] if sigma is None else sigma
        linear = linear and s[k] == sigma * size
        size *= b.full[k]
    if linear:
        row = f"row * {sigma}" if sigma else "0"
    else:
        row = " + ".join(f"i{k} * {s[k]}" for k in b.outer if s[k]) or "0"
    if n.cls == "R" or not b.red:
        return row, 0
    inner = [s[k] for k in b.red]
    for k in range(len(inner) - 1):
        if inner[k] != inner[k + 1] * b.full[b.red[k + 1]]:
            raise CodegenUnsupported(f"{b.module.name}: strides {list(s)} do not collapse along the row")
    return row, inner[-1]

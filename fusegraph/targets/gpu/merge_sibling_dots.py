"""The gpu target's matmuls that read one input with constant weights become one matmul.

A transformer layer projects its input three times, to q, k and v, each a GEMM with its own weight
and bias: three cuBLAS calls of [M, K] x [K, N] where one [M, K] x [K, 3N] call reads the input
once, fills the device better at small M (a batch-1 sequence of 128 rows) and launches one kernel,
not three. The reference design does the same (MIGraphX's
simplify_algebra, horizontal fusion of dots sharing an input). Each projection's result becomes a
slice of the merged one: a view, which the attention and pointwise steps read with its strides.
(The cpu target merges after its own fusions, on its dot_epilogue ops: cpu/passes/merge_parallel_dots.py.)

    dot(A, W1) [-> reshape] [-> add(bias1)]          dot(A, [W1 W2 ...]) [-> reshape] [-> add([b1 b2 ...])]
    dot(A, W2) [-> reshape] [-> add(bias2)]    ->    and each former result a slice of it (last axis)

Legality, per sibling: a float `dot` whose first input is A (2-D, static) and whose second is a 2-D
literal [K, N] of A's type; its tail is followed only through single readers: a reshape that keeps
N as its last dim (the rows split, as gemm_bias takes it), then an add of a constant that varies
along the last axis alone (the bias gemm_bias fuses). Siblings merge when their tails have the same
form (both reshape's leading dims, both a bias or neither). A sibling whose tail has one pointwise
reader stays alone: that reader is its GEMM's epilogue (gemm_epilogue), which a merged GEMM, read
through slices, would lose (a gated MLP's gate and up, read by the SiLU and the product). The sums
are the same per element; only the GEMM's kernel may differ.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...ir import provenance
from ...ir.module import Instruction, Module
from ...ir.op import OpKind
from ...ir.shape import Shape
from ...ops.movement import Reshape, Slice
from ...passes.constants import materialize, small_constant
from .matching import is_output


@dataclasses.dataclass
class _Tail:
    chain: list[Instruction]       # the dot [, its reshape] [, the bias add]
    weight: np.ndarray             # [K, N]
    lead: tuple[int, ...] | None = None  # the reshape's leading dims, if any
    bias: np.ndarray | None = None       # [N]
    bias_first: bool = False       # add(bias, x) rather than add(x, bias)

    @property
    def end(self) -> Instruction:
        """The instruction whose readers read a slice of the merged result."""
        return self.chain[-1]

    @property
    def form(self) -> tuple:
        return self.lead, self.bias is not None  # (add is commutative: the bias's side is the first's)


def single_reader(x: Instruction) -> Instruction | None:
    return x.users[0] if len(x.users) == 1 and not is_output(x) else None


def bias_of(add: Instruction, x: Instruction, n: int) -> tuple[np.ndarray, bool] | None:
    """The [n] constant `add` adds to `x` along the last axis, and whether it is the first operand."""
    if add.op.name != "add" or len(add.inputs) != 2 or add.inputs[0] is add.inputs[1]:
        return None
    first = add.inputs[0] is not x
    c = small_constant(add.inputs[0 if first else 1])
    if c is None or str(add.shape) != str(x.shape) or c.shape[-1:] != (n,) or math.prod(c.shape[:-1]) != 1:
        return None
    return c.reshape(n), first


def _tail(dot: Instruction, a: Instruction) -> _Tail | None:
    if dot.op.name != "dot" or len(dot.inputs) != 2 or dot.inputs[0] is not a or not dot.inputs[1].is_literal:
        return None
    w = dot.inputs[1].literal
    if w.ndim != 2 or w.dtype != a.shape.dtype.np or not isinstance(dot.shape, Shape):
        return None
    n = w.shape[1]
    t = _Tail([dot], w)
    r = single_reader(t.end)
    if r is not None and r.op.name == "reshape" and r.shape.lens[-1] == n:
        t.lead = tuple(r.shape.lens[:-1])
        t.chain.append(r)
        r = single_reader(t.end)
    bias = bias_of(r, t.end, n) if r is not None else None
    if bias is not None:
        t.bias, t.bias_first = bias
        t.chain.append(r)
        r = single_reader(t.end)
    if r is not None and r.op.kind is OpKind.POINTWISE:
        return None  # its GEMM's epilogue (gemm_epilogue)
    return t


def merge_sibling_dots(module: Module) -> bool:
    changed = False
    joined: dict[tuple[int, ...], Instruction] = {}  # weights' uids -> their concatenation (shared weights)
    for a in list(module):
        if not (isinstance(a.shape, Shape) and not a.shape.is_dynamic and a.shape.ndim == 2 and a.shape.dtype.is_float):
            continue
        tails = [t for t in (_tail(u, a) for u in dict.fromkeys(a.users)) if t is not None]
        by_form: dict[tuple, list[_Tail]] = {}
        for t in tails:
            by_form.setdefault(t.form, []).append(t)
        for group in by_form.values():
            if len(group) > 1:
                _merge(module, a, group, joined)
                changed = True
    return changed


def _merge(module: Module, a: Instruction, group: list[_Tail], joined: dict[tuple[int, ...], Instruction]) -> None:
    """`group`'s dots as one; layers sharing their weights (ALBERT's) share one concatenation."""
    first = min((t.chain[0] for t in group), key=module.index)
    key = tuple(t.chain[0].inputs[1].uid for t in group)
    if key not in joined:
        joined[key] = module.add_literal(np.concatenate([t.weight for t in group], axis=1))
    cur = module.insert(first, first.op, a, joined[key])
    made = [cur]
    n = cur.shape.lens[-1]
    lead = group[0].lead
    if lead is not None:
        cur = module.insert(first, Reshape(dims=(*lead, n)), cur)
        made.append(cur)
    if group[0].bias is not None:
        value = np.concatenate([t.bias for t in group]).reshape((1,) * (cur.shape.ndim - 1) + (n,))
        bias = materialize(module, first, value.astype(cur.shape.dtype.np), cur.shape)
        cur = module.insert(first, group[0].end.op, *((bias, cur) if group[0].bias_first else (cur, bias)))
        made.append(cur)
    origin = provenance.merged(*(x.origin for t in group for x in t.chain))  # every projection's nodes
    for x in made:
        x.origin = origin
    axis, start = cur.shape.ndim - 1, 0
    for t in group:
        width = t.weight.shape[1]
        part = module.insert(first, Slice(axes=(axis,), starts=(start,), ends=(start + width,), steps=(1,)), cur)
        module.replace(t.end, part)
        start += width

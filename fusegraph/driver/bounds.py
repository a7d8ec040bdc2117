"""The values a generated integer input may take: the length of the tables it indexes.

An integer input of unknown meaning is usually an index (token ids, positions, token types). An
input followed through ops that pass its values on unchanged (conversions and movement ops: reshape,
unsqueeze, transpose, concat, ...) to the indices of a gather must stay below the length of the
gathered axis: BERT's `input_ids` below the vocabulary, its `token_type_ids` below 2.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.module import Instruction
from ..ir.op import OpKind
from ..ir.shape import Shape


def _gathered_axis(ins: Instruction) -> int | None:
    data = ins.inputs[0].shape
    if not isinstance(data, Shape) or data.is_dynamic:
        return None
    return data.lens[ins.op.axis]


# op name -> (position of its indices input, the length those indices select from)
INDEX_READERS: dict[str, tuple[int, Callable[[Instruction], int | None]]] = {
    "gather": (1, _gathered_axis),
    "gather_elements": (1, _gathered_axis),
}


def _passes_values(ins: Instruction) -> bool:
    """Whether `ins` hands its input values on unchanged (as far as an index's range goes)."""
    if ins.op.kind is OpKind.MOVEMENT:
        return True
    return ins.name == "convert" and isinstance(ins.shape, Shape) and ins.shape.dtype.name != "bool"


def index_bound(param: Instruction) -> int | None:
    """The smallest table length among the gathers `param`'s values index, or None if they index none."""
    bound, seen, todo = None, set(), [param]
    while todo:
        value = todo.pop()
        for user in value.users:
            reader = INDEX_READERS.get(user.name)
            if reader is not None and user.inputs[reader[0]] is value:
                n = reader[1](user)
                if n:
                    bound = n if bound is None else min(bound, n)
            elif _passes_values(user) and user.uid not in seen:
                seen.add(user.uid)
                todo.append(user)
    return bound


def index_bounds(program) -> dict[str, int]:
    """{input name: exclusive upper bound} for the program's integer inputs that index a table."""
    out = {}
    for p in program.main.parameters:
        if isinstance(p.shape, Shape) and p.shape.dtype.is_int:
            n = index_bound(p)
            if n is not None:
                out[p.op.param_name] = n
    return out

"""Provenance: the ONNX node(s) each instruction computes, and the ONNX tensor it equals.

As MLIR's locations and ONNX Runtime's node names do it: the frontend stamps every instruction a
node's converter adds with that node (`origin`), and the node's results with their tensor names
(`tensor`). `Module.replace(old, new)` calls `inherit`, so every pass keeps them without knowing:
`new` takes `old`'s tensor (it computes the same value) and the nodes of everything the rewrite makes
dead (a fusion's members, an epilogue's convolution) when it is new, and instructions the rewrite made for `new`
that have no origin yet take `old`'s. Profiles, traces and `verify --per-layer` speak these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from .op import OpKind

if TYPE_CHECKING:
    from .module import Instruction


class OnnxNode(NamedTuple):
    name: str
    op_type: str


def merged(*origins: tuple[OnnxNode, ...]) -> tuple[OnnxNode, ...]:
    """The nodes of `origins` in order, each once."""
    out: dict[OnnxNode, None] = {}
    for o in origins:
        out.update(dict.fromkeys(o))
    return tuple(out)


def _computes(ins: Instruction) -> bool:
    return ins.op.kind is not OpKind.BUILTIN


def dead_cone(old: Instruction, keep: set[int]) -> list[Instruction]:
    """`old` and the producers only it (transitively) reads: what replacing `old` makes dead. Stops
    at the uids in `keep` (the replacement's inputs), parameters and literals."""
    cone = {old.uid: old}
    stack = list(old.inputs)
    while stack:
        x = stack.pop()
        if x.uid in cone or x.uid in keep or not _computes(x) or x.module is not old.module:
            continue
        if all(u.uid in cone for u in x.users):  # a producer reached again later may qualify then
            cone[x.uid] = x
            stack.extend(x.inputs)
    return list(cone.values())


def inherit(old: Instruction, new: Instruction, absorbs: bool = True) -> None:
    """Give `new`, which replaces `old`, `old`'s tensor and the origin of what the rewrite absorbs.
    `absorbs=False`: only `old` dies (a module still being built, whose producers may have users
    yet to come: they are not dead because no user reads them so far)."""
    if new.tensor is None:
        new.tensor = old.tensor
    if new.uid < old.uid:  # an instruction there already (CSE, x*1 -> x, a transpose pair cancelled)
        new.origin = new.origin or old.origin
        return
    cone = dead_cone(old, {i.uid for i in new.inputs} | {new.uid}) if absorbs else [old]
    new.origin = merged(new.origin, *(x.origin for x in reversed(cone)))
    stack = list(new.inputs)
    while stack:  # helpers the rewrite made (a layout's transposes): they work for old's nodes
        x = stack.pop()
        if not x.origin and _computes(x) and x.uid > old.uid:
            x.origin = old.origin
            stack.extend(x.inputs)


def describe(origin: tuple[OnnxNode, ...], limit: int = 3) -> str:
    """`origin` as a short list of node names: 'conv1, relu1 (+4 more)'."""
    names = [n.name for n in origin]
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more

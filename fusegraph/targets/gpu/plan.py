"""Lowering decisions of the gpu target, made on the IR alone (no torch, so CI tests them):

* which instructions become one step together (attention -> scaled_dot_product_attention,
  dot + bias add -> addmm), see patterns.py;
* where each value lives: the arena (written in place by its step), a transient tensor the step
  returns (cuDNN convolutions; freed after its last use), a view of another value, a weight, an input;
* the arena plan: live intervals over the steps (a fused group reads its inputs at its own position)
  coloured with passes/memory_coloring's interval colouring, a pointwise step written over an input
  that dies at it where that packs no worse (_in_place); program outputs get their own region;
* the memory layout of 4-D/5-D arena buffers: channels-last where a convolution reads or writes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ...errors import CompileError
from ...ir.dtypes import DType
from ...ir.module import Instruction, Module
from ...ir.op import OpKind
from ...ir.shape import Shape, TupleShape
from ...passes.memory_coloring import ALIGNMENT, Buffer, color
from ...passes.simplify_reshapes import RESHAPE_LIKE
from .layout import channels_last_order
from .patterns import match_groups

ARENA, TRANSIENT, VIEW, PARAM, LITERAL, OUTPUT = "arena", "transient", "view", "param", "literal", "output"
SLICE = "slice"  # written by its step straight into its slice of a concat's buffer
CONV_KINDS = frozenset({"convolution", "deconvolution", "pooling", "quant_convolution", "quant_conv_epilogue"})


@dataclasses.dataclass
class Step:
    kind: str                       # lowering table key: an op name or a pattern name
    ins: Instruction                # the instruction whose value the step produces
    inputs: list[Instruction]       # values the step reads (a pattern's external inputs)
    data: dict = dataclasses.field(default_factory=dict)  # pattern details
    members: list[Instruction] = dataclasses.field(default_factory=list)  # a pattern's instructions

    def __repr__(self) -> str:
        return f"<step {self.kind} -> %{self.ins.uid}>"


@dataclasses.dataclass
class Plan:
    steps: list[Step]
    storage: dict[int, str]                 # uid -> ARENA | TRANSIENT | VIEW | PARAM | LITERAL | OUTPUT
    owner: dict[int, int]                   # uid -> uid of the value whose memory it uses
    offsets: dict[int, int]                 # arena owner uid -> byte offset
    arena_bytes: int
    output_offsets: dict[int, int]          # output-region owner uid -> byte offset
    output_bytes: int
    last_use: dict[int, int]                # owner uid -> index of the last step reading it
    layouts: dict[int, tuple[int, ...]]     # arena owners laid out in another dim order (slowest first)
    slices: dict[int, tuple[int, int, int]] = dataclasses.field(default_factory=dict)  # uid -> (concat, axis, start)
    staged: dict[int, DType] = dataclasses.field(default_factory=dict)  # param uid -> its buffer's type

    def step_of(self, uid: int) -> Step | None:
        return next((s for s in self.steps if s.ins.uid == uid), None)


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def list_steps(module: Module, patterns: bool = True) -> list[Step]:
    """The steps of `module` in order: one per computing instruction, or one per pattern group
    (`patterns`) in place of the instructions it covers."""
    groups = match_groups(module) if patterns else {}
    covered = {m.uid for g in groups.values() for m in g.members}
    steps: list[Step] = []
    for ins in module.instructions:
        if ins.op.name in ("@param", "@literal", "@return"):
            continue
        if ins.uid in groups:
            g = groups[ins.uid]
            steps.append(Step(g.kind, ins, list(g.inputs), dict(g.data), list(g.members)))
        elif ins.uid not in covered:  # else computed inside a fused group
            steps.append(Step(ins.op.name, ins, list(ins.inputs)))
    return steps


def make_plan(module: Module, mode_of: Callable[[Step], str], stage_inputs: bool = False,
              in_place: Callable[[Step], bool] | None = None) -> Plan:
    """Steps, storage, arena offsets and layouts for `module` (static shapes only). `stage_inputs`
    (for an executable that copies its inputs into buffers of its own): see _staged_inputs.
    `in_place(step)`: whether the step may write its value over an input that dies at it (_in_place)."""
    steps: list[Step] = []
    storage: dict[int, str] = {}
    owner: dict[int, int] = {}
    for ins in module.instructions:
        if ins.is_param:
            storage[ins.uid], owner[ins.uid] = PARAM, ins.uid
        elif ins.is_literal:
            storage[ins.uid], owner[ins.uid] = LITERAL, ins.uid
    for step in list_steps(module):
        ins = step.ins
        mode = mode_of(step)  # a CompileError for ops without a lowering
        if any(s.is_dynamic for s in _shapes(ins.shape)):
            raise CompileError(f"target 'gpu' compiles static shapes only: {ins.op} has shape {ins.shape} "
                               "(give the input dims when parsing, e.g. map_input_dims)")
        if mode == ARENA and not isinstance(ins.shape, Shape):
            # one arena buffer holds one tensor; a lowering writing a tuple has no place to write it
            raise CompileError(f"target 'gpu' cannot plan {ins.op}: its lowering writes one tensor, "
                               f"the instruction yields {ins.shape}")
        steps.append(step)
        storage[ins.uid] = mode
        owner[ins.uid] = owner[ins.inputs[0].uid] if mode == VIEW else ins.uid
    staged = _staged_inputs(steps, storage, owner, module) if stage_inputs else {}
    slices = _concat_slices(steps, storage, owner, module)
    last_use: dict[int, int] = {}
    first: dict[int, int] = {}
    for k, step in enumerate(steps):
        first.setdefault(owner[step.ins.uid], k)
        for x in step.inputs:
            if x.uid not in owner:
                raise CompileError(f"{step.ins.op} reads {x.op}, which no step computes")
            o = owner[x.uid]
            last_use[o] = max(last_use.get(o, -1), k)
    outputs = {owner[o.uid] for o in module.outputs if o.uid in owner}
    for o in outputs:
        if storage.get(o) == ARENA:
            storage[o] = OUTPUT
    by_uid = {ins.uid: ins for ins in module.instructions}
    layouts = _layouts(steps, storage, owner, slices)
    arena_values = [uid for uid, mode in storage.items() if mode == ARENA]
    arena, offsets = _colored(arena_values, {}, by_uid, first, last_use)
    taken = _in_place(steps, storage, owner, first, last_use, layouts, in_place) if in_place else {}
    if taken:  # in place unless the merged lifetimes pack worse (MobileViT-S b1: 5.5 MiB against 5.0)
        merged = _colored(arena_values, taken, by_uid, first, last_use)
        if merged[0] <= arena:
            arena, offsets = merged
    out_offsets, out_bytes = {}, 0
    for uid, mode in storage.items():
        if mode == OUTPUT:
            out_offsets[uid] = out_bytes
            out_bytes += _align(by_uid[uid].shape.bytes)
    return Plan(steps, storage, owner, offsets, arena, out_offsets, out_bytes, last_use, layouts, slices, staged)


def _colored(values: list[int], taken: dict[int, int], by_uid: dict[int, Instruction], first: dict[int, int],
             last_use: dict[int, int]) -> tuple[int, dict[int, int]]:
    """(arena bytes, uid -> offset) of the arena `values` (in step order), each written over the
    value `taken` maps it to, if any (_in_place), else into a buffer of its own."""
    holder: dict[int, int] = {}  # value -> the value whose buffer it is written into (itself, mostly)
    for uid in values:
        holder[uid] = holder[taken[uid]] if uid in taken else uid
    ends: dict[int, int] = {}
    for uid, h in holder.items():
        ends[h] = max(ends.get(h, first[h]), last_use.get(uid, first[uid]), first[uid])
    buffers = [Buffer(h, _align(by_uid[h].shape.bytes), first[h], ends[h]) for h in dict.fromkeys(holder.values())]
    arena = color(buffers)
    placed = {b.uid: b.offset for b in buffers}
    return arena, {uid: placed[h] for uid, h in holder.items()}


def _in_place(steps: list[Step], storage: dict[int, str], owner: dict[int, int], first: dict[int, int],
              last_use: dict[int, int], layouts: dict[int, tuple[int, ...]],
              in_place: Callable[[Step], bool]) -> dict[int, int]:
    """Steps that write their value over an input dying at them: value uid -> that input's uid. The
    input is an arena value read as itself (no view of it, and no other reading of its buffer by the
    step), of the value's shape, element size and layout, so the step (`in_place`: a pointwise kernel)
    reads each element exactly where it writes one. A convolution's bias-and-activation step no longer
    needs a second buffer beside the convolution's output: ShuffleNetV2 b32's largest live set was that
    pair (2 x 18.4 MiB)."""
    taken: dict[int, int] = {}
    for k, step in enumerate(steps):
        value = step.ins
        if storage.get(value.uid) != ARENA or not isinstance(value.shape, Shape) or not in_place(step):
            continue
        for x in step.inputs:
            if (storage.get(x.uid) == ARENA and owner[x.uid] == x.uid and last_use.get(x.uid) == k
                    and first[x.uid] < k and isinstance(x.shape, Shape) and x.shape.lens == value.shape.lens
                    and x.shape.dtype.itemsize == value.shape.dtype.itemsize
                    and layouts.get(x.uid) == layouts.get(value.uid)
                    and sum(owner.get(y.uid) == x.uid for y in step.inputs) == 1):
                taken[value.uid] = x.uid
                break
    return taken


STAGED_INPUT = "staged_input"  # the step kind of a conversion done by the input's copy-in


def _staged_inputs(steps: list[Step], storage: dict[int, str], owner: dict[int, int],
                   module: Module) -> dict[int, DType]:
    """Inputs whose every reader converts them to one narrower float type (an fp16 program's fp32
    inputs): the input's buffer holds that type and the copy-in converts (the same rounding as the
    conversion step), the conversions becoming views of the buffer. The fp32 buffer and the fp16
    copy beside it cost 3x the input's fp16 bytes: 28 MiB for a 32 x 3 x 224 x 224 batch (issue 23)."""
    readers: dict[int, list[Step]] = {}
    for step in steps:
        for x in step.inputs:
            readers.setdefault(x.uid, []).append(step)
    outputs = {o.uid for o in module.outputs}
    staged: dict[int, DType] = {}
    for p in module.parameters:
        conversions = readers.get(p.uid, [])
        types = {s.ins.shape.dtype for s in conversions if s.kind == "convert" and isinstance(s.ins.shape, Shape)}
        if (not conversions or len(types) != 1 or p.uid in outputs or not isinstance(p.shape, Shape)
                or any(s.kind != "convert" or s.ins.uid in outputs for s in conversions)):
            continue
        (to,) = types
        if p.shape.dtype == DType.float32 and to in (DType.float16, DType.bfloat16):  # one rounding, as torch's copy_
            staged[p.uid] = to
            for s in conversions:
                s.kind = STAGED_INPUT
                storage[s.ins.uid], owner[s.ins.uid] = VIEW, p.uid
    return staged


def _concat_slices(steps: list[Step], storage: dict[int, str], owner: dict[int, int],
                   module: Module) -> dict[int, tuple[int, int, int]]:
    """Concat inputs computed into the arena: their steps write into the concat's buffer directly and
    the concat copies only the rest (no extra pass over those elements). Their other readers read the
    same elements through a view of the concat's buffer. A run of inputs that are consecutive slices
    covering one arena value along the concat axis (YOLO's split-then-concat) places that value
    itself in the concat. A concat whose inputs begin a later concat's inputs (DenseNet's: each
    layer reads the concat of all earlier features) is the front of that concat's buffer and copies
    in only the inputs no earlier one wrote: each feature is written once, where joining them afresh
    for each layer copies a block's features quadratically often."""
    producer = {s.ins.uid: s for s in steps}
    outputs = {o.uid for o in module.outputs}
    slices: dict[int, tuple[int, int, int]] = {}

    def movable(x: Instruction) -> bool:
        p = producer.get(x.uid)
        return (p is not None and storage.get(x.uid) == ARENA and owner[x.uid] == x.uid and p.kind != "concat"
                and x.uid not in outputs)

    def place(x: Instruction, concat: int, axis: int, start: int) -> None:
        slices[x.uid] = (concat, axis, start)
        storage[x.uid] = SLICE
        for uid, o in owner.items():  # x and the views of it now live in the concat's buffer
            if o == x.uid:
                owner[uid] = concat

    concats = [s for s in steps if s.kind == "concat" and storage.get(s.ins.uid) in (ARENA, OUTPUT)]
    nested = _nested_concats(concats, outputs)
    for step in (s for s in concats if s.ins.uid not in nested):
        axis, start, aliased = step.ins.op.axis, 0, set()
        inputs = step.inputs
        k = 0
        while k < len(inputs):
            x = inputs[k]
            run = _covering_slices(inputs, k, axis)
            if run and movable(run[0]) and not any(inputs.count(v) > 1 for v in inputs[k:k + run[1]]):
                place(run[0], step.ins.uid, axis, start)
                aliased.update(range(k, k + run[1]))
                start += run[0].shape.lens[axis]
                k += run[1]
                continue
            if movable(x) and inputs.count(x) == 1:
                place(x, step.ins.uid, axis, start)
                aliased.add(k)
            start += x.shape.lens[axis]
            k += 1
        step.data["aliased"] = aliased
    by_uid = {s.ins.uid: s for s in concats}
    for step in (s for s in concats if s.ins.uid in nested):  # in order: a chain's members before its root
        root = by_uid[nested[step.ins.uid]]
        place(step.ins, root.ins.uid, step.ins.op.axis, 0)
        written = root.data["aliased"]  # the root's inputs already in its buffer
        step.data["aliased"] = {k for k in range(len(step.inputs)) if k in written}
        written.update(range(len(step.inputs)))  # this step copies in the rest
    return slices


def _nested_concats(concats: list[Step], outputs: set[int]) -> dict[int, int]:
    """Of `concats` (in step order), those (not outputs) whose inputs are the first inputs of a later
    one along the same axis: uid -> uid of the last concat of such a chain, whose buffer holds them all."""
    root: dict[int, int] = {}
    for i in range(len(concats) - 1, -1, -1):
        c = concats[i]
        if c.ins.uid in outputs:
            continue
        for d in concats[i + 1:]:
            if (d.ins.op.axis == c.ins.op.axis and len(d.inputs) > len(c.inputs)
                    and d.inputs[:len(c.inputs)] == c.inputs):
                root[c.ins.uid] = root.get(d.ins.uid, d.ins.uid)
                break
    return root


def _covering_slices(inputs: list[Instruction], k: int, axis: int) -> tuple[Instruction, int] | None:
    """(base, n) when inputs[k:k+n] are unit-step slices of one value along `axis` alone that are
    consecutive and together cover it exactly."""
    base, pos, n = None, 0, 0
    for x in inputs[k:]:
        op = x.op
        if op.name != "slice" or op.axes != (axis,) or op.steps != (1,):
            break
        src = x.inputs[0]
        if base is None:
            base = src
        if src is not base or op.starts[0] != pos:
            break
        pos, n = op.starts[0] + x.shape.lens[axis], n + 1
    if base is None or n < 2 or pos != base.shape.lens[axis]:
        return None
    return base, n


def _shapes(shape) -> tuple:
    return shape.elements if isinstance(shape, TupleShape) else (shape,)


def is_dynamic(shape) -> bool:
    """Whether any tensor of `shape` (a Shape or a TupleShape) has a dynamic dim."""
    return any(s.is_dynamic for s in _shapes(shape))


def _layouts(steps: list[Step], storage: dict[int, str], owner: dict[int, int],
             slices: dict[int, tuple[int, int, int]]) -> dict[int, tuple[int, ...]]:
    """Dim orders (slowest first) of the arena values of rank 4/5 next to convolutions, so that
    convolutions run without layout conversions: the value a convolution reads as its data input
    and the one it writes are channels-last as the convolution sees them, and a pointwise step
    computed from a convolution's output keeps its order. A convolution that reads a transpose of
    its owner (ConvNeXt's LayerNorm2d: permute, layer norm over the last dim, permute back) asks the
    owner for the order that makes the transposed view channels-last, often the standard one:
    the channels-last order applied to the owner's own dims made the layer norm write across
    memory (a 137 us kernel at batch 32 on the H200) and the convolution copy its input."""
    wanted: dict[int, tuple[int, ...]] = {}

    def want(x: Instruction) -> None:
        if _rank(x) in (4, 5):
            order = _owner_order(x, owner, slices, channels_last_order(_rank(x)))
            if order is not None:
                wanted.setdefault(owner[x.uid], order)

    for step in steps:
        if step.kind in CONV_KINDS or step.kind.startswith("conv_gemm"):
            x = step.inputs[0]
            if _rank(x) in (4, 5):
                want(x)
                want(step.ins)
                if len(step.inputs) > 1 and storage.get(owner[step.inputs[1].uid]) == LITERAL:
                    want(step.inputs[1])  # the weights, packed channels-last once
    changed = True
    while changed:  # pointwise steps keep the layout of the convolution output they read
        changed = False
        for step in steps:
            o = owner[step.ins.uid]
            if o in wanted or step.ins.op.kind is not OpKind.POINTWISE or _rank(step.ins) not in (4, 5):
                continue
            for x in step.inputs:
                order = wanted.get(owner.get(x.uid, -1))
                if (order is not None and isinstance(x.shape, Shape) and x.shape.lens == step.ins.shape.lens
                        and _owner_order(x, owner, slices, order) == order):  # x has its owner's dims
                    wanted[o] = order
                    changed = True
                    break
    return {u: order for u, order in wanted.items()
            if storage.get(u) in (ARENA, PARAM, LITERAL) and order != tuple(range(len(order)))}  # outputs stay standard


def _owner_order(x: Instruction, owner: dict[int, int], slices: dict[int, tuple[int, int, int]],
                 order: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dim order of `x`'s owner that lays `x` out in `order`, back along x's view chain: a
    transpose permutes the order, views that keep every dim (slices, broadcasts of the same rank,
    identities) keep it, a value written into its concat's slice has the concat's dims. None through
    a view that merges, splits or adds dims."""
    while owner.get(x.uid, x.uid) != x.uid and x.uid not in slices:
        src = x.inputs[0] if x.inputs else None
        if src is None or _rank(src) != len(order):
            return None
        if x.op.name == "transpose":
            order = tuple(x.op.perm[d] for d in order)
        elif x.op.name in RESHAPE_LIKE and src.shape.lens != x.shape.lens:
            return None
        x = src
    return order


def _rank(ins: Instruction) -> int:
    return ins.shape.ndim if isinstance(ins.shape, Shape) else -1

"""The cpu target's memory plan: memory_coloring's interval colouring, where an epilogue op whose
residual dies with it (ResNet's and YOLO's shortcuts) writes its result over that residual, unless
it also reads that buffer through another input.

oneDNN's sum post-op adds what the output buffer holds: with its own buffer, the residual is first
copied in (3 MB per block at ResNet-50's first stage); sharing the residual's buffer, it is already
there. Invariant: memory_coloring's, where such an output and its residual count as one buffer,
alive from the residual's writer to the output's last reader; and a tensor that may outlive its
last reader (kept in a sequence, passed through control flow) has no buffer of its own in the
arena. Like memory_coloring, the pass only sets `module.memory_plan` and reports no change.
"""

from __future__ import annotations

from ....ir.builtin import Return
from ....ir.module import Instruction, Module
from ....ir.op import OpKind
from ....ir.shape import Shape
from ....passes.memory_coloring import Buffer, MemoryPlan, body_reads, color, is_view, max_live, plan_buffers

EPILOGUES = frozenset({"conv_epilogue", "deconv_epilogue", "dot_epilogue"})
# ops whose tuple results are fresh arrays (never their inputs or views of them), each element
# written into a buffer of its own (kernels/recurrent.py takes a tuple of output buffers; a reference
# kernel copies each element in: lowering.reference_kernel)
TUPLE_WRITERS = frozenset({"lstm", "gru", "rnn", "moments", "top_k"})
# module outputs up to this size are planned and copied out at the end of a run (ModuleSteps):
# their kernels then join native programs; a larger one is its kernel's own array (no copy)
SMALL_OUTPUT = 1 << 16
# DynamicQuantizeLSTM and control flow write their tuples so too (kernels/control.py copies If's,
# Scan's and Loop's results in, never an input's array: native_control.py writes them in C)
TUPLE_WRITERS |= {"dynamic_quantize_lstm", "if", "scan", "loop"}


def plan_memory(module: Module, body: bool = False) -> bool:
    """Plan `module`: the main module, or (`body`) a control-flow body, which the lowering plans into
    an arena of its own. As a pass it leaves submodules alone (fused ops' bodies are never run)."""
    if module.parent is not None and not body:
        return False
    # a body may also return a value it reads from here: what control flow reads escapes too (a
    # tuple writer's results, an If's, a Scan's, a Loop's, are never its inputs' arrays)
    flows = set().union(*[body_reads(i) | {x.uid for x in i.inputs if i.op.name not in TUPLE_WRITERS}
                          for i in module.instructions if i.op.kind is OpKind.CONTROL])
    escaping = {_root(i).uid for i in module.instructions if _escapes(i) or i.uid in flows}
    escaping |= _aliased_by_outputs(module)
    buffers = [b for b in plan_buffers(module, TUPLE_WRITERS, SMALL_OUTPUT) if b.uid not in escaping]
    of: dict[int, Buffer] = {b.uid: b for b in buffers}  # uid -> the buffer it is written to
    merged: set[int] = set()
    for k, ins in enumerate(module.instructions):
        if ins.op.name not in EPILOGUES or ins.op.n_residual != 1 or ins.uid not in of:
            continue
        res = ins.inputs[-1]
        shared, own = of.get(res.uid), of[ins.uid]
        # the residual owns its buffer (it is no view), dies here, and is laid out as the result; and
        # no other input lives there (r + conv(r)): the kernel would read what it has overwritten
        if (shared is None or shared.end != k or shared.size != own.size or not res.shape.standard
                or res.shape.lens != ins.shape.lens
                or any(of.get(_root(x).uid) is shared for x in ins.inputs[:-1])):
            continue
        shared.end = own.end
        of[ins.uid] = shared
        merged.add(id(own))
    kept = [b for b in buffers if id(b) not in merged]
    arena = color(kept)
    module.memory_plan = MemoryPlan(of, arena, max_live(kept), sum(b.size for b in buffers))
    return False


def _aliased_by_outputs(module: Module) -> set[int]:
    """A module output made by movement ops from a value laid out other than row-major by a reference
    kernel keeps arrays of its own, as does that chain: a small output's buffer is planned and copied
    out through the output's view, and a reference kernel fills a strided buffer as if it were
    row-major, so it would be read back scrambled. (QLinearSoftmax over a middle axis, transpose ->
    softmax over the strided value -> transpose, returned garbage.)"""
    aliased = set()
    for o in module.outputs:
        chain = [o]
        while chain[-1].op.kind is OpKind.MOVEMENT and chain[-1].inputs:
            chain.append(chain[-1].inputs[0])
        if any(isinstance(x.shape, Shape) and not x.shape.standard and _by_reference(x) for x in chain):
            aliased.update(x.uid for x in chain)
    return aliased


def _by_reference(ins: Instruction) -> bool:
    """Whether `ins` runs as its op's numpy reference (lowering.reference_kernel), which fills its
    output as a row-major copy (oneDNN's and the generated kernels honour a planned layout)."""
    from ..lowering import REFERENCE_KINDS, REFERENCE_OPS

    return (ins.op.kind in REFERENCE_KINDS or ins.op.name in REFERENCE_OPS) and not is_view(ins)


def _escapes(ins: Instruction) -> bool:
    """Whether `ins`'s value may outlive its last reader: put in a sequence or an optional, or handed
    to control flow, whose results (a tuple) may be that very array."""
    return any(not isinstance(u.shape, Shape) and not _keeps_no_reference(u, ins) for u in ins.users)


def _keeps_no_reference(user: Instruction, ins: Instruction) -> bool:
    """Whether `user`'s result (a tuple) never holds `ins`'s array: a tuple writer's are fresh, the
    module's return (outputs are copied out) and an If's condition (only tested) are no results."""
    return user.op.name in TUPLE_WRITERS or isinstance(user.op, Return)


def _root(ins: Instruction) -> Instruction:
    """The instruction whose buffer `ins` lives in (itself, or what it is a view of)."""
    while ins.inputs and is_view(ins) and not (ins.op.name == "get_tuple_elem" and ins.inputs[0].op.name in TUPLE_WRITERS):
        ins = ins.inputs[0]
    return ins

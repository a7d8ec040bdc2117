"""The cpu target's memory plan: memory_coloring's interval colouring, where an epilogue op whose
residual dies with it (ResNet's and YOLO's shortcuts) writes its result over that residual.

oneDNN's sum post-op adds what the output buffer holds: with its own buffer, the residual is first
copied in (3 MB per block at ResNet-50's first stage); sharing the residual's buffer, it is already
there. Invariant: memory_coloring's, where such an output and its residual count as one buffer,
alive from the residual's writer to the output's last reader. Like memory_coloring, the pass only
sets `module.memory_plan` and reports no change.
"""

from __future__ import annotations

from ....ir.module import Module
from ....passes.memory_coloring import Buffer, MemoryPlan, color, max_live, plan_buffers

EPILOGUES = frozenset({"conv_epilogue", "deconv_epilogue", "dot_epilogue"})


def plan_memory(module: Module) -> bool:
    if module.parent is not None:
        return False  # bodies of control flow run with their own scratch
    buffers = plan_buffers(module)
    of: dict[int, Buffer] = {b.uid: b for b in buffers}  # uid -> the buffer it is written to
    merged: set[int] = set()
    for k, ins in enumerate(module.instructions):
        if ins.op.name not in EPILOGUES or ins.op.n_residual != 1 or ins.uid not in of:
            continue
        res = ins.inputs[-1]
        shared, own = of.get(res.uid), of[ins.uid]
        # the residual owns its buffer (it is no view), dies here, and is laid out as the result
        if (shared is None or shared.end != k or shared.size != own.size or not res.shape.standard
                or res.shape.lens != ins.shape.lens):
            continue
        shared.end = own.end
        of[ins.uid] = shared
        merged.add(id(own))
    kept = [b for b in buffers if id(b) not in merged]
    arena = color(kept)
    module.memory_plan = MemoryPlan(of, arena, max_live(kept), sum(b.size for b in buffers))
    return False

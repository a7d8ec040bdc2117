"""The cpu executable: a flat list of kernel steps over one preallocated arena per thread."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np

from ...ir.builtin import Literal, Param, Return
from ...ir.program import Program
from ...ir.shape import Shape
from ..base import CompileOptions, Executable
from .lowering import Kernel


@dataclasses.dataclass
class Step:
    fn: Kernel
    args: tuple[int, ...]        # uids of the inputs
    out: int                     # uid of the result
    frees: tuple[int, ...]       # uids dead after this step (dropped so memory is returned early)
    buffer: tuple[int, tuple[int, ...], np.dtype] | None  # arena offset, lens, dtype of the output
    needs_env: bool = False
    name: str = ""


class CpuExecutable(Executable):
    def __init__(self, program: Program, options: CompileOptions, steps: list[Step], arena_bytes: int):
        super().__init__(program, options)
        main = program.main
        self.steps = steps
        self.arena_bytes = arena_bytes
        self.params = [(i.uid, i.op.param_name) for i in main.instructions if isinstance(i.op, Param)]
        self.constants = {i.uid: i.op.value for i in main.instructions if isinstance(i.op, Literal)}
        ret = main.instructions[-1]
        assert isinstance(ret.op, Return)
        self.outputs = [i.uid for i in ret.inputs]
        self._local = threading.local()

    def _buffers(self) -> list[np.ndarray | None]:
        """This thread's arena, cut into each step's output view (made once per thread)."""
        views = getattr(self._local, "views", None)
        if views is None:
            arena = np.empty(self.arena_bytes + 64, np.uint8)
            base = (-arena.ctypes.data) % 64  # 64-byte aligned, as the plan assumes
            views = []
            for s in self.steps:
                if s.buffer is None:
                    views.append(None)
                    continue
                offset, lens, dtype = s.buffer
                n = int(np.prod(lens)) * dtype.itemsize
                views.append(arena[base + offset: base + offset + n].view(dtype).reshape(lens))
            self._local.views = views
            self._local.arena = arena
        return views

    def execute(self, inputs: dict[str, Any]) -> list[np.ndarray]:
        env: dict[int, Any] = dict(self.constants)
        for uid, name in self.params:
            env[uid] = inputs[name]
        for step, out in zip(self.steps, self._buffers()):
            args = [env[a] for a in step.args]
            env[step.out] = step.fn(args, out, env) if step.needs_env else step.fn(args, out)
            for uid in step.frees:
                del env[uid]
        results = []
        for uid in self.outputs:
            r = env[uid]
            # outputs are never planned into the arena, but may be views of inputs or weights
            results.append(r if isinstance(r, np.ndarray) and r.flags.owndata else _copy(r))
        return results


def _copy(r: Any) -> Any:
    return np.array(r, copy=True) if isinstance(r, np.ndarray) else r


def output_buffer(ins, plan) -> tuple[int, tuple[int, ...], np.dtype] | None:
    if plan is None or ins.uid not in plan.buffers or not isinstance(ins.shape, Shape):
        return None
    b = plan.buffers[ins.uid]
    return (b.offset, ins.shape.lens, ins.shape.dtype.np)

"""Running the float program on the reference interpreter for calibration and sensitivity.

`collect_ranges` feeds each calibration sample through the program as it is (no compile, so no
pass rewrites what is measured) and hands the values of the watched instructions to their
TensorRange as they are made; nothing else is kept. `run_with_inputs_replaced` evaluates the
program with some instructions reading replaced inputs (a layer's inputs fake-quantized), freeing
values after their last use as the interpreter does. Both use the ref target's interpreter (the
executable specification), imported when they run: `quantize` sits below the targets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from ..ir.builtin import Literal, Param, Return
from ..ir.module import Module
from .ranges import TensorRange


class _Watcher:
    """A profile-recorder lookalike for `run_module`: hands watched values to their ranges."""

    def __init__(self, ranges: Mapping[int, TensorRange]):
        self.ranges = ranges

    @staticmethod
    def clock() -> float:
        return time.perf_counter()

    def step(self, uid: int, t0: float, t1: float, value) -> None:
        r = self.ranges.get(uid)
        if r is not None:
            r.add(value)


def collect_ranges(module: Module, uids: Iterable[int], samples: Iterable[Mapping[str, np.ndarray]],
                   num_bins: int = 0) -> tuple[dict[int, TensorRange], int]:
    """The range of each instruction in `uids` over `samples` (a histogram of `num_bins` if > 0),
    and how many samples ran."""
    from ..targets.ref.interpreter import run_module

    ranges = {u: TensorRange(num_bins) for u in uids}
    params = {p.uid: p.op.param_name for p in module.parameters if p.uid in ranges}
    watcher = _Watcher(ranges)
    n = 0
    for sample in samples:
        for uid, name in params.items():  # parameters are not steps the interpreter reports
            ranges[uid].add(sample[name])
        run_module(module, sample, observer=watcher)
        n += 1
    return ranges, n


Replace = Callable[[list[np.ndarray]], list[np.ndarray]]


def run_with_inputs_replaced(module: Module, feeds: Mapping[str, np.ndarray], replace: Mapping[int, Replace]) -> list:
    """The module's outputs, where instruction uid in `replace` computes on replace[uid](its args)."""
    from ..targets.ref.interpreter import evaluate, last_uses

    env: dict[int, object] = {}
    frees = last_uses(module)
    keep = {i.uid for i in module.outputs}
    for pos, ins in enumerate(module.instructions):
        op = ins.op
        if isinstance(op, Param):
            env[ins.uid] = feeds[op.param_name]
            continue
        if isinstance(op, Return):
            return [env[i.uid] for i in ins.inputs]
        if isinstance(op, Literal):
            env[ins.uid] = op.value
            continue
        args = [env[i.uid] for i in ins.inputs]
        if ins.uid in replace:
            args = replace[ins.uid](args)
        env[ins.uid] = evaluate(ins, args, env)
        for uid in frees.get(pos, ()):
            if uid not in keep:
                env.pop(uid, None)
    raise AssertionError(f"module {module.name} has no @return")

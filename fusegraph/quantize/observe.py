"""Running the float program for calibration and sensitivity.

`collect_ranges` feeds each calibration sample through the program and hands the values of the
watched instructions to their TensorRange; nothing else is kept. On the ref interpreter it runs the
program as it is (no pass rewrites what is measured). On the cpu target (`runner="cpu"`) it
compiles a copy whose outputs are the watched values too, so no fusion crosses them, as `verify
--per-layer` marks them. Measured on ResNet-50 here (2 shared cores): ref 1.3-4 s a sample; cpu
1.5 s a sample after a 110 s compile (the marks leave the batch norms unfused): cpu pays off only
past about a hundred samples, so ref is the default. `run_with_inputs_replaced` evaluates the
program with some instructions reading replaced inputs (a layer's inputs fake-quantized). Both use the ref target's interpreter (the
executable specification), imported when they run: `quantize` sits below the targets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from ..ir.builtin import Return
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


RUNNERS = ("ref", "cpu")


def check_runner(module: Module, runner: str) -> str:
    from ..errors import ArgumentError

    if runner not in RUNNERS:
        raise ArgumentError(f"calibration runner {runner!r}: expected one of {', '.join(RUNNERS)}")
    if runner == "cpu" and any(i.module_args for i in module.instructions):
        raise ArgumentError("calibration runner cpu: the program has control flow, whose bodies the copy "
                            "it compiles cannot share; calibrate on ref")
    return runner


def collect_ranges(module: Module, uids: Iterable[int], samples: Iterable[Mapping[str, np.ndarray]],
                   num_bins: int = 0, runner: str = "ref") -> tuple[dict[int, TensorRange], int]:
    """The range of each instruction in `uids` over `samples` (a histogram of `num_bins` if > 0),
    and how many samples ran; on the ref interpreter or the cpu target (`runner`)."""
    ranges = {u: TensorRange(num_bins) for u in uids}
    params = {p.uid: p.op.param_name for p in module.parameters if p.uid in ranges}
    run = _cpu_runner(module, [u for u in ranges if u not in params]) if runner == "cpu" else _ref_runner(module, ranges)
    n = 0
    for sample in samples:
        for uid, name in params.items():  # parameters are not steps the interpreter reports
            ranges[uid].add(sample[name])
        for uid, value in run(sample):
            ranges[uid].add(value)
        n += 1
    return ranges, n


def _ref_runner(module: Module, ranges: Mapping[int, TensorRange]):
    from ..targets.ref.interpreter import run_module

    watcher = _Watcher(ranges)

    def run(sample):
        run_module(module, sample, observer=watcher)
        return ()

    return run


def _cpu_runner(module: Module, uids: list[int]):
    """Runs a cpu-compiled copy of `module` that also returns the values of `uids`."""
    from ..ir.program import Program
    from ..targets import get_target

    copy = Program()
    new = {}
    for ins in module.instructions:
        if isinstance(ins.op, Return):
            break
        new[ins.uid] = copy.main.add(ins.op, *[new[x.uid] for x in ins.inputs])
    copy.main.add_return(*[new[o.uid] for o in module.outputs], *[new[u] for u in uids])
    copy.compile(get_target("cpu"))
    skip = len(module.outputs)

    def run(sample):
        return zip(uids, copy.run(sample)[skip:], strict=True)

    return run


Replace = Callable[[list[np.ndarray]], list[np.ndarray]]


def run_with_inputs_replaced(module: Module, feeds: Mapping[str, np.ndarray], replace: Mapping[int, Replace]) -> list:
    """The module's outputs, where instruction uid in `replace` computes on replace[uid](its args)."""
    from ..targets.ref.interpreter import run_module

    return run_module(module, feeds, replace_args=replace)

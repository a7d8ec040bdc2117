"""Tiered compiles (`GpuTarget(tiered=True)`): a static program's compile returns before its GEMMs'
chosen K-constant kernels are built.

A GEMM whose templates are timed in their generic form (K an argument: gemm_runner.py) then runs its
chosen config's K-constant kernel, about 2 % quicker (ResNet-50 b32: 1.110 against 1.131 ms with
every GEMM K-argument, `gpu_autotune-h200-k-{constant,argument}.json`), whose compile starts only
once the choice is made: on the H200 Llama-small b32's choices were done at 1.7 s of a 3.3 s compile,
DeepLabV3-MobileNetV3 b32's at 3.1 s of 6.3 s (issue 23). With tiers, the warm-up keeps the timed
generic kernels and hands those compiles (kernels.defer) to `Upgrades`, which builds them in a thread
of its own after `compile` returns; until they are in, runs are the steps one by one (no graph), and
the first run after swaps them in, runs once and captures the graph (executable.py). Every compile
is checked before its swap: one that failed leaves its step on the generic kernel.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from . import kernels


class Upgrades:
    """The compiles a tiered warm-up left (kernels.deferring's list of (compile, apply)), begun now in
    a thread of their own."""

    def __init__(self, later: list[tuple[Callable[[], Any], Callable[[], Any]]], device: Any):
        self.later, self.device = later, device
        self.built: list[Callable[[], Any]] = []  # the applies whose compiles succeeded
        self._done = threading.Event()
        threading.Thread(target=self._build, daemon=True, name="fusegraph-tiered-compiles").start()

    def _build(self) -> None:
        from .device import torch

        try:
            # (Triton keeps a kernel per device: the program's, not this thread's default)
            with torch().cuda.device(self.device), kernels.compile_async():  # leaving waits for every compile
                for compile, _ in self.later:
                    _quietly(compile)
            for compile, apply in self.later:
                if _quietly(compile):  # built: found in the kernel's cache; failed: compiles again, raises
                    self.built.append(apply)
        finally:
            self._done.set()

    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self) -> None:
        self._done.wait()

    def apply(self) -> int:
        """Swap the built kernels in (each step's runner takes its K-constant kernel); how many."""
        for apply in self.built:
            apply()
        return len(self.built)


def _quietly(call: Callable[[], Any]) -> bool:
    """Whether `call` returned (a compile that fails leaves its step on the generic kernel)."""
    try:
        call()
    except Exception:  # noqa: BLE001 - the step keeps what it runs
        return False
    return True

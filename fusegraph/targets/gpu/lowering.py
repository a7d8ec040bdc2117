"""The gpu target's lowering table: op (or pattern) name -> how its value is made on the device.

An entry has a storage mode and a builder:
  "into"      the builder's step writes into a buffer the executable owns (arena or output region);
  "value"     the step returns a new tensor (library calls without an out= form, e.g. cuDNN conv,
              SDPA): a transient, released after its last use;
  "view"      a function of the input tensor that usually aliases it (reshape, transpose, slice...):
              computed once at build time when it does alias a fixed tensor, else re-run every time.
Ops missing from the table run on the host (host.py) when the target allows it (GpuTarget's
host_fallback, the default), and are a CompileError naming the op when it does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...errors import CompileError
from .plan import ARENA, TRANSIENT, VIEW, Step


class Slot:
    """Where a value's tensor is found at run time (fixed at build time for arena values and views of
    them; set by its step for transients)."""

    __slots__ = ("t",)

    def __init__(self, t: Any = None):
        self.t = t


@dataclasses.dataclass(frozen=True)
class Lowering:
    mode: str                                   # "into" | "value" | "view"
    build: Callable[..., Any]
    note: str = ""                              # how the op runs (shown by `describe_lowering`)
    # a "value" step whose output extent it decides from the data (nms): the dynamic mode runs it
    # on the device and takes the tensor's size as the value's shape
    sizes_output: bool = False
    # whether its step may call cuBLAS whatever the gemm mode (or a test of the step): a program
    # holding one pays cuBLAS's workspace anyway (workspace.py)
    cublas: bool | Callable[[Step], bool] = False
    # whether its step reads each input element at the index where it writes the output's (a pointwise
    # kernel, all its loads before its stores): it may write over an input that dies at it (plan.py)
    in_place: bool = False

    def may_call_cublas(self, step: Step) -> bool:
        return self.cublas(step) if callable(self.cublas) else self.cublas


LOWERINGS: dict[str, Lowering] = {}


def lowering(*names: str, mode: str, note: str = "", sizes_output: bool = False,
             cublas: bool | Callable[[Step], bool] = False, in_place: bool = False):
    """Register a builder for ops `names`. Builders of "into"/"value" ops take (ctx, step) and return
    a function (run at every execution) of the input tensors (and `out` for "into"); "view" builders
    take (ctx, step) and return a function of the one input tensor."""
    if mode not in ("into", "value", "view") or (sizes_output and mode != "value"):
        raise ValueError(mode)

    def register(fn):
        for n in names:
            if n in LOWERINGS:
                raise CompileError(f"two gpu lowerings for {n!r}")
            LOWERINGS[n] = Lowering(mode, fn, note, sizes_output, cublas, in_place)
        return fn

    return register


def storage_mode(step: Step) -> str:
    """The plan's storage for a step's value, from its table entry (CompileError if it has none)."""
    entry = find_lowering(step)
    return {"into": ARENA, "value": TRANSIENT, "view": VIEW}[entry.mode]


def writes_in_place(step: Step) -> bool:
    """Whether the step may write its value over an input of its shape that dies at it (plan.py)."""
    return find_lowering(step).in_place


def find_lowering(step: Step) -> Lowering:
    load_tables()
    entry = LOWERINGS.get(step.kind)
    if entry is None:
        raise CompileError(f"target 'gpu' has no lowering for op {step.ins.op.name!r} ({step.ins.op}); "
                           "it cannot run on the GPU")
    return entry


def describe_lowering(step: Step) -> str:
    entry = find_lowering(step)
    return f"{step.kind}: {entry.mode}" + (f" ({entry.note})" if entry.note else "")


_loaded = False


def load_tables() -> None:
    """Import the lower_* modules, which fill LOWERINGS."""
    global _loaded
    if not _loaded:
        from . import (  # noqa: F401  (register entries)
            lower_attention,
            lower_custom,
            lower_math,
            lower_movement,
            lower_nbits,
            lower_nms,
            lower_nn,
            lower_quant,
            lower_recurrent,
            lower_resize,
            lower_tensor,
        )
        from .lower_sparse import SPARSE  # noqa: F401  (registers the 2:4 sparse matmuls)

        _loaded = True

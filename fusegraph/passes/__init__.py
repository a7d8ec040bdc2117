"""Optimization passes: one per file, each `pass(module) -> bool` (whether it changed anything).

`generic_pipeline()` is the target-independent pipeline that every fast target starts from.
"""

from __future__ import annotations

from .eliminate_common_subexpression import eliminate_common_subexpression
from .eliminate_dead_code import eliminate_dead_code
from .eliminate_identity import eliminate_identity
from .eliminate_pad import eliminate_pad
from .fold_symbolic_shapes import fold_symbolic_shapes
from .fuse_pointwise import fuse_pointwise
from .fuse_reduce import fuse_reduce
from .inline_constant_if import inline_constant_if
from .manager import Fixpoint, PassManager, run_pipeline
from .memory_coloring import memory_coloring
from .propagate_constant import propagate_constant
from .schedule_for_memory import schedule_for_memory
from .simplify_algebra import simplify_algebra
from .simplify_reshapes import simplify_reshapes


def simplify_pipeline() -> list:
    return [Fixpoint((eliminate_identity, propagate_constant, inline_constant_if, fold_symbolic_shapes, simplify_reshapes, simplify_algebra,
                      eliminate_pad, eliminate_common_subexpression, eliminate_dead_code))]


def generic_pipeline(fuse: bool = True, before_fusion: tuple = ()) -> list:
    """`before_fusion`: a target's passes between simplification and fusion (on the simplified graph,
    before pointwise ops are fused into what they read)."""
    passes = simplify_pipeline() + list(before_fusion)
    if fuse:
        passes += [fuse_reduce, fuse_pointwise, eliminate_dead_code]
    return passes + [schedule_for_memory, memory_coloring]


__all__ = [
    "Fixpoint", "PassManager", "eliminate_common_subexpression", "eliminate_dead_code", "eliminate_identity", "eliminate_pad",
    "fold_symbolic_shapes", "fuse_pointwise", "fuse_reduce", "generic_pipeline", "inline_constant_if", "memory_coloring", "propagate_constant", "run_pipeline", "schedule_for_memory",
    "simplify_algebra", "simplify_pipeline", "simplify_reshapes",
]

"""`migraphx.target` and `get_target`: MIGraphX's target names onto fusegraph's targets.

MIGraphX names its targets "ref", "cpu" and "gpu" (and "fpga", which fusegraph lacks). "gpu" is
fusegraph's gpu target: CUDA, or ROCm through PyTorch. "hip" and "cuda" are not MIGraphX names,
and are refused with the name to use: a script that runs here runs unchanged on MIGraphX.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotSupportedError, TargetError

_NAMES = ("ref", "cpu", "gpu")
_WRONG_NAMES = {"hip": "gpu", "cuda": "gpu", "rocm": "gpu", "host": "cpu"}


class target:  # noqa: N801  (MIGraphX's name)
    """A compilation target, made by get_target(name)."""

    def __init__(self, fusegraph_target: Any):
        self.fusegraph_target = fusegraph_target

    def name(self) -> str:
        return self.fusegraph_target.name

    def __repr__(self) -> str:
        return f"migraphx.target({self.name()!r})"


def get_target(name: str) -> target:
    if name == "fpga":
        raise NotSupportedError("migraphx.get_target('fpga'): fusegraph has no FPGA target; its targets are "
                                f"{list(_NAMES)}")
    if name in _WRONG_NAMES:
        raise TargetError(f"migraphx.get_target({name!r}): MIGraphX has no target {name!r}; its name is "
                          f"{_WRONG_NAMES[name]!r} (fusegraph's {_WRONG_NAMES[name]} target)")
    if name not in _NAMES:
        raise TargetError(f"migraphx.get_target({name!r}): unknown target; choose one of {list(_NAMES)}")
    from .. import targets

    return target(targets.get_target(name))

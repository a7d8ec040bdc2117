"""The reference interpreter: evaluates a module's instructions in order with each op's numpy reference."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ExecutionError, FusegraphError, InputError
from ...ir import run_limits
from ...ir.builtin import Literal, Param, Return
from ...ir.module import Instruction, Module
from ...passes.memory_coloring import reads

__all__ = ["ExecutionError", "run_module", "evaluate", "last_uses"]


def last_uses(module: Module) -> dict[int, list[int]]:
    """For each position, the uids whose last use in this module is that instruction."""
    last: dict[int, int] = {}
    for pos, ins in enumerate(module.instructions):
        for uid in reads(ins):  # a submodule's uses of our values happen when `ins` runs
            last[uid] = pos
    frees: dict[int, list[int]] = {}
    own = {i.uid for i in module.instructions}
    for uid, pos in last.items():
        if uid in own:
            frees.setdefault(pos, []).append(uid)
    return frees


def run_module(module: Module, params: Mapping[str, Any] | Sequence[Any],
               outer: Mapping[int, Any] | None = None, observer: Any = None,
               replace_args: Mapping[int, Any] | None = None) -> list[Any]:
    """Evaluate `module`. `params` maps parameter names (or positions) to values; `outer` holds the
    values of enclosing modules that a submodule may use; `observer` (a profile.Recorder) is told
    each instruction's times and value; the instruction of uid u in `replace_args` computes on
    replace_args[u](its argument values) (quantize/sensitivity.py: one layer's inputs fake-quantized)."""
    env: dict[int, Any] = dict(outer) if outer else {}
    frees = last_uses(module)
    keep = {i.uid for i in module.outputs}
    positional = not isinstance(params, Mapping)
    k_param = 0
    deadline = run_limits.current().deadline_at
    for pos, ins in enumerate(module.instructions):
        op = ins.op
        if deadline is not None and time.monotonic() > deadline:
            run_limits.check_deadline(f"{module.name}[{pos}] {op.name}")
        if isinstance(op, Param):
            if positional:
                env[ins.uid] = params[k_param]  # type: ignore[index]
                k_param += 1
            else:
                if op.param_name not in params:  # type: ignore[operator]
                    raise InputError(f"missing input {op.param_name!r}")
                env[ins.uid] = params[op.param_name]  # type: ignore[index]
            continue
        if isinstance(op, Return):
            return [env[i.uid] for i in ins.inputs]
        if isinstance(op, Literal):
            env[ins.uid] = op.value
            continue
        args = [env[i.uid] for i in ins.inputs]
        if replace_args is not None and ins.uid in replace_args:
            args = replace_args[ins.uid](args)
        if observer is None:
            env[ins.uid] = evaluate(ins, args, env)
        else:
            t0 = observer.clock()
            env[ins.uid] = evaluate(ins, args, env)
            observer.step(ins.uid, t0, observer.clock(), env[ins.uid])
        for uid in frees.get(pos, ()):
            if uid not in keep:
                env.pop(uid, None)
    raise ExecutionError(f"module {module.name} has no @return")


def evaluate(ins: Instruction, args: list[Any], env: Mapping[int, Any]) -> Any:
    op = ins.op
    try:
        if ins.module_args:  # control flow and fused ops with a body run their submodules
            return op.compute_control(args, ins.module_args, lambda m, p: run_module(m, p, env))  # type: ignore[attr-defined]
        return op.compute(args)
    except FusegraphError:
        raise
    except Exception as e:  # the op's reference failed on these values: say which instruction
        raise failed(op, args, e) from e


def failed(op: Any, args: Sequence[Any], e: Exception) -> ExecutionError:
    """The ExecutionError of `op`'s reference failing on `args` with `e` (naming the op and its inputs)."""
    shapes = ", ".join(f"{getattr(a, 'dtype', type(a).__name__)}{list(np.shape(a))}" for a in args)
    return ExecutionError(f"{op} failed on inputs ({shapes}): {type(e).__name__}: {e}")

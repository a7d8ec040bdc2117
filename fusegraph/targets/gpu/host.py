"""Host steps of the gpu target: what runs on the CPU when the device cannot.

A step runs on the host when its op has no gpu lowering, when its lowering rejects it (an attribute
that arrives at run time, training-mode dropout...), or when one of its values has no torch tensor
type (strings, 4-bit and 2-bit integers, float4). It evaluates the op exactly as the ref target
does (ref.interpreter.evaluate, the executable specification: no op code is duplicated here); its
inputs come to the host as numpy arrays and its result stays there until a device step reads it.
Values torch cannot hold stay numpy arrays end to end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...ir.module import Instruction
from ...ir.op import OpKind
from ...ir.shape import AnyShape, Shape, TupleShape, from_nothing
from ..ref.interpreter import evaluate
from .device import has_torch_dtype, to_device, to_host, torch
from .lowering import LOWERINGS, load_tables
from .plan import Step


def device_type_ok(shape: AnyShape) -> bool:
    """Whether every tensor of `shape` has a torch dtype."""
    if isinstance(shape, TupleShape):
        return all(device_type_ok(e) for e in shape.elements)
    return isinstance(shape, Shape) and has_torch_dtype(shape.dtype)


def why_host(step: Step) -> str | None:
    """Why `step` must run on the host, decided on the IR alone; None when it may run on the
    device (its builder may still reject it: see lower_dynamic)."""
    load_tables()
    if step.kind not in LOWERINGS:
        return "no gpu lowering"
    for x in (*step.inputs, step.ins):
        if not device_type_ok(x.shape):
            return f"{x.shape} has no device tensor type"
    if step.ins.op.kind is OpKind.CONV and from_nothing(step.ins.shape, [x.shape for x in step.inputs]):
        return "a convolution over no input channels (cuDNN refuses it; the reference gives its zeros)"
    return None


def host_value(value: Any, shape: AnyShape) -> Any:
    """`value` (a device tensor, a tuple of them, or already a host value) as numpy."""
    t = torch()
    if isinstance(value, t.Tensor):
        return to_host(value, shape.dtype)  # type: ignore[union-attr]
    if isinstance(value, tuple) and isinstance(shape, TupleShape):
        return tuple(host_value(v, s) for v, s in zip(value, shape.elements))
    return value  # numpy arrays, sequences (lists), optionals (None)


def device_value(value: Any, shape: AnyShape, device: Any) -> Any:
    """`value` on the device where torch can hold it; other values unchanged."""
    if isinstance(value, (np.ndarray, np.generic)) and isinstance(shape, Shape) and has_torch_dtype(shape.dtype):
        return to_device(np.asarray(value), shape.dtype, device)
    if isinstance(value, tuple) and isinstance(shape, TupleShape):
        return tuple(device_value(v, s, device) for v, s in zip(value, shape.elements))
    return value


def host_runner(step: Step) -> Callable[[list[Any], Mapping[int, Any]], Any]:
    """fn(host inputs, host values of the enclosing module) -> the step's value, on the host. A
    pattern's instructions are evaluated one by one."""
    if not step.members:
        ins = step.ins
        return lambda args, outer: evaluate(ins, args, outer)
    order = sorted(step.members, key=lambda m: m.module.index(m))  # type: ignore[union-attr]
    inputs = [x.uid for x in step.inputs]

    def run(args: list[Any], outer: Mapping[int, Any]) -> Any:
        env = dict(outer)
        env.update(zip(inputs, args))
        for m in order:
            env[m.uid] = evaluate(m, [env[x.uid] for x in m.inputs], env)
        return env[step.ins.uid]
    return run


def outer_reads(ins: Instruction, own: set[int]) -> list[int]:
    """uids of `own` (the enclosing module's values) that `ins`'s submodules read from the env they
    are given, which holds only these: a value that is also one of `ins`'s inputs is among them when a
    body reads or returns it (a TorchScript loop returns its outer condition unchanged)."""
    from ...passes.memory_coloring import body_reads

    return sorted(body_reads(ins) & own)

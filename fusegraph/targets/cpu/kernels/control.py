"""Control flow (If, Loop, Scan): the op's reference semantics, its bodies compiled like the main
module (generated and oneDNN kernels, constants folded) rather than interpreted by the ref target."""

from __future__ import annotations

import functools

import numpy as np

from ....ir.module import Instruction
from ....ir.op import OpKind, registered_ops
from ..lowering import Kernel, LowerContext, _into, lower_module, lowering, reference_kernel
from ..native_control import NATIVE, native_if


def control(ins: Instruction, ctx: LowerContext) -> Kernel:
    if not ins.module_args:
        return reference_kernel(ins, ctx)
    op, modules = ins.op, ins.module_args
    bodies = {m.name: lower_module(m, ctx) for m in modules}
    if op.name == "if":  # (If.compute_control's rule, without its calls: a streaming model runs it per chunk)
        then, other = (bodies[m.name] for m in modules)

        def compute(args, env):
            return (then if args[0].reshape(-1)[0] else other).run_body((), env)
    else:
        def compute(args, env):
            return op.compute_control(args, modules, lambda m, params: bodies[m.name].run_body(params, env))

    def run(args, out, env):
        r = compute(args, env)
        # If, Scan and Loop write tuples (plan_memory.TUPLE_WRITERS): their elements go into the planned
        # buffers, and are never an input's array (no iterations) or a view of a body's buffers
        if out is None:
            out = (None,) * len(r)
        return tuple(_fresh(v, args) if o is None else _into(o, v) for o, v in zip(out, r, strict=True))

    run.needs_env = True  # type: ignore[attr-defined]  # bodies read values of the enclosing module
    run.bodies = bodies  # type: ignore[attr-defined]  # (ModuleSteps by module name)
    if op.name == "if":  # the branch taken in C, both bodies' calls in the table
        run.native = functools.partial(native_if, op, (then, other))  # type: ignore[attr-defined]
    elif op.name in NATIVE:  # the whole loop as one record of a native program
        (body,) = bodies.values()
        run.native = functools.partial(NATIVE[op.name], op, body)  # type: ignore[attr-defined]
    return run


def _fresh(v, args):
    if isinstance(v, np.ndarray) and (not v.flags.owndata or any(v is a for a in args)):
        return v.copy()
    return v


lowering(*[n for n, c in registered_ops().items() if c.kind is OpKind.CONTROL])(control)

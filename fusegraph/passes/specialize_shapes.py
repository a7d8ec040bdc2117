"""Specializing a program with dynamic input dims to one concrete set of input shapes.

`specialize(program, lens)` returns a new program whose parameters have the given static lens and
whose every shape is re-derived from them by the ops' shape rules, as if the model had been parsed
at that shape. Values that were only known at run time become constants (`shape_of` of a now static
tensor), constant folding carries them on, and the run-time-shaped movement ops whose shape inputs
became constants turn back into their static forms: what remains is a static program for a target's
normal pipeline (fusions, kernels, memory plan). Dims that depend on data (nonzero, unique) stay
dynamic. An `if` whose condition became constant (it read a shape, or an input given by value) is
replaced by the branch it takes (inline_constant_if). The input program is not changed: its instructions are copied, its literals shared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from ..ir.builtin import Param
from ..ir.module import Instruction, Module, _compute_shape
from ..ir.op import OpKind, make_op
from ..ir.program import Program
from ..ir.provenance import inherit
from ..ir.shape import Shape
from ..ops.movement import normalize_axes, resolve_reshape_dims, slice_bounds
from .constants import small_constant
from .eliminate_dead_code import eliminate_dead_code
from .inline_constant_if import inline_constant_if
from .propagate_constant import GROWTH_LIMIT_BYTES, propagate_constant

QUANTIZED_FORMS = frozenset({"dequantize_linear"})  # what specialize leaves unfolded


def specialize(program: Program, lens: Mapping[str, Sequence[int]],
               values: Mapping[str, Any] | None = None) -> Program:
    """A static copy of `program` for inputs of these `lens` (by parameter name; each must fit the
    parameter's dims: the caller validated the run's inputs). `values`: inputs whose value is known
    too (passes/specialize_values.py): they stay parameters, read by nothing; a literal of the value
    takes their place, and an `if` that it decides is replaced by the branch taken."""
    out = Program(empty=True)
    out.metadata = dict(program.metadata)
    copies: dict[int, Instruction] = {}
    shapes = {}
    for p in program.main.parameters:
        name = p.op.param_name
        if name not in lens:
            raise InputError(f"cannot specialize: no shape given for input {name!r}")
        shapes[name] = Shape.of(p.shape.dtype, lens[name])
    _copy_module(program.main, out, None, copies, shapes)
    main = out.main
    for name, value in (values or {}).items():
        param = main.get_parameter(name)
        main.replace(param, main.add_literal(np.asarray(value, dtype=param.shape.dtype.np).reshape(param.shape.lens)))
    # each round makes constants the next can use; quantized weights stay quantized (their
    # dequantize unfolded), as the target's integer lowerings read them: its pipeline folds the rest
    while _resolve(main) | propagate_constant(main, keep=QUANTIZED_FORMS) | inline_constant_if(main):
        pass
    eliminate_dead_code(main)
    return out


def _copy_module(src: Module, out: Program, parent: Module | None, copies: dict[int, Instruction],
                 params: Mapping[str, Shape]) -> Module:
    mod = Module(src.name, parent)
    mod.program = out
    out.modules[src.name] = mod
    for ins in src.instructions:
        subs = [out.modules.get(m.name) or _copy_module(m, out, mod, copies, {}) for m in ins.module_args]
        inputs = [copies[i.uid] for i in ins.inputs]
        op = ins.op
        if isinstance(op, Param):
            shape = params.get(op.param_name, op.param_shape) if parent is None else op.param_shape
            op = Param(op.param_name, shape)
        elif op.name == "@literal":
            shape = ins.shape
        else:  # every other shape follows from the inputs' new shapes
            shape = _compute_shape(op, inputs, subs)
        new = Instruction(op, inputs, shape, subs)
        new.origin, new.tensor = ins.origin, ins.tensor
        mod._attach(new, None)
        copies[ins.uid] = _settle(mod, new)
    return mod


def _settle(m: Module, ins: Instruction) -> Instruction:
    """`ins`, or what it became now that its inputs are known: a shape value folded to a literal,
    a run-time-shaped op in its static form. Done as the copy goes, so that the ops after it see
    static shapes (a shape rule evaluated at the corners of a range could fail where the inputs are
    static and its dims are not)."""
    rule = RESOLVE.get(ins.op.name)
    new = rule(m, ins) if rule is not None else _fold_small(m, ins)
    if new is None:
        return ins
    # only `ins` dies: its producers' users after it are not copied yet (eliminate_dead_code ends the rest)
    inherit(ins, new, absorbs=False)
    m.remove(ins)
    return new


SMALL = 1024  # shape arithmetic: values this small are folded as the copy goes; the rest waits for the pipeline


def _fold_small(m: Module, ins: Instruction) -> Instruction | None:
    op, s = ins.op, ins.shape
    if (op.kind in (OpKind.BUILTIN, OpKind.CONTROL) or ins.module_args or not op.deterministic or not ins.inputs
            or op.name in QUANTIZED_FORMS or not all(i.is_literal for i in ins.inputs) or not _static(ins) or s.elements > SMALL):
        return None
    value = np.asarray(op.compute([i.literal for i in ins.inputs]), dtype=s.dtype.np)
    if value.shape != s.lens:
        return None
    return m.add_literal(np.array(value, order="C"))


# -- run-time values that became constants ---------------------------------------------------------
def _static(x: Instruction) -> bool:
    return isinstance(x.shape, Shape) and not x.shape.is_dynamic


def _ints(x: Instruction) -> list[int] | None:
    v = small_constant(x)
    return None if v is None else [int(n) for n in np.broadcast_to(v, x.shape.lens).reshape(-1)]


def _shape_of(m: Module, ins: Instruction) -> Instruction | None:
    x = ins.inputs[0]
    if not _static(x):
        return None
    return m.add_literal(np.array(x.shape.lens[ins.op.start: ins.op.end], dtype=np.int64))


def _size_of(m: Module, ins: Instruction) -> Instruction | None:
    x = ins.inputs[0]
    return m.add_literal(np.array(x.shape.elements, dtype=np.int64)) if _static(x) else None


def _reshape(m: Module, ins: Instruction) -> Instruction | None:
    x = ins.inputs[0]
    dims = list(ins.op.dims) if len(ins.inputs) == 1 else _ints(ins.inputs[1])
    if not _static(x) or dims is None:
        return None
    lens = resolve_reshape_dims(x.shape.lens, dims, ins.op.allowzero)
    if not x.shape.standard:  # a reshape is a view of row-major data: other layouts are copied first
        x = m.insert(ins, make_op("contiguous"), x)
    return m.insert(ins, make_op("reshape", dims=tuple(lens)), x)


def _slice(m: Module, ins: Instruction) -> Instruction | None:
    x, *bounds = ins.inputs
    values = [_ints(b) for b in bounds]
    if not _static(x) or any(v is None for v in values):
        return None
    starts, ends, axes, steps = values
    lens = x.shape.lens
    resolved = []
    for a, s, e, st in zip(normalize_axes(axes, x.shape.ndim), starts, ends, steps, strict=True):
        s, e = slice_bounds(lens[a], s, e, st)
        resolved.append((a, s, e, st))
    a, s, e, st = (tuple(v) for v in zip(*resolved, strict=True)) if resolved else ((), (), (), ())
    return m.insert(ins, make_op("slice", axes=a, starts=s, ends=e, steps=st), x)


def _broadcast(m: Module, ins: Instruction) -> Instruction | None:
    """broadcast_like / broadcast_for_dot with static inputs: the input itself or a `broadcast`, as
    the frontend writes them for static shapes."""
    x = ins.inputs[0]
    if not all(_static(i) for i in ins.inputs):
        return None
    if ins.shape.lens == x.shape.lens:
        return x
    return m.insert(ins, make_op("broadcast", out_lens=ins.shape.lens), x)


def _range(m: Module, ins: Instruction) -> Instruction | None:
    """range(start, limit, delta) of known scalars -> its values (a detector's anchor grid, position
    ids), unless they would be a big constant (the pipeline's folding limit decides those)."""
    if not all(i.is_literal for i in ins.inputs):
        return None
    value = ins.op.compute([i.literal for i in ins.inputs])
    return m.add_literal(np.array(value, order="C")) if value.nbytes <= GROWTH_LIMIT_BYTES else None


def _constant_of_shape(m: Module, ins: Instruction) -> Instruction | None:
    """constant_of_shape([known dims]) -> the value broadcast to them (a view, never a big constant)."""
    lens = _ints(ins.inputs[0])
    if lens is None:
        return None
    value = m.add_literal(np.array(ins.op.value, dtype=ins.op.dtype.np))
    return m.insert(ins, make_op("broadcast", out_lens=tuple(lens)), value)


def _expand(m: Module, ins: Instruction) -> Instruction | None:
    """expand_dynamic(x, [known dims]) of a static x -> x or its `broadcast`, as for a static Expand."""
    x, dims = ins.inputs
    lens = _ints(dims)
    if not _static(x) or lens is None:
        return None
    try:
        out = tuple(int(n) for n in np.broadcast_shapes(x.shape.lens, tuple(lens)))
    except ValueError:  # the op's own error, naming it, comes when it runs
        return None
    return x if out == x.shape.lens else m.insert(ins, make_op("broadcast", out_lens=out), x)


def _dot(m: Module, ins: Instruction) -> Instruction | None:
    """a[..., M, K] @ (one [K, N] matrix broadcast over a's batch): one [batch*M, K] x [K, N]
    product, as the frontend writes a static MatMul by a weight matrix."""
    a, b = ins.inputs
    if (not _static(ins) or a.shape.ndim <= 2 or b.op.name != "broadcast" or not _static(b.inputs[0])
            or b.inputs[0].shape.ndim != 2):
        return None
    w = b.inputs[0]
    lead = a.shape.lens[:-1]
    if not a.shape.standard:
        a = m.insert(ins, make_op("contiguous"), a)
    flat = m.insert(ins, make_op("reshape", dims=(int(np.prod(lead)), a.shape.lens[-1])), a)
    product = m.insert(ins, ins.op, flat, w)
    return m.insert(ins, make_op("reshape", dims=(*lead, w.shape.lens[-1])), product)


# op name -> rewrite of an instruction whose run-time shape inputs are now known (None: not yet)
RESOLVE: dict[str, Callable[[Module, Instruction], Instruction | None]] = {
    "shape_of": _shape_of,          # dims of a static tensor -> a literal
    "size_of": _size_of,            # element count of a static tensor -> a literal
    "reshape_dynamic": _reshape,    # reshape_dynamic(x, [known dims]) -> reshape
    "slice_dynamic": _slice,        # slice_dynamic(x, known bounds) -> slice
    "broadcast_like": _broadcast,   # broadcast_like(x, static others) -> x | broadcast
    "broadcast_for_dot": _broadcast,  # broadcast_for_dot(x, static other) -> x | broadcast
    "dot": _dot,                    # dot(a, broadcast(w)) -> reshape(dot(reshape(a), w))
    "range": _range,                # range(known scalars) -> a literal
    "constant_of_shape": _constant_of_shape,  # constant_of_shape([known dims]) -> broadcast(value)
    "expand_dynamic": _expand,      # expand_dynamic(x, [known dims]) -> x | broadcast
}


def _resolve(module: Module) -> bool:
    changed = False
    for ins in module:
        rule = RESOLVE.get(ins.op.name)
        if rule is None or not ins.users:
            continue
        new = rule(module, ins)
        if new is not None:
            module.replace(ins, new)
            changed = True
    return changed

"""Control-flow ops: `if`, `loop` and `scan`. Their bodies are submodules (`Instruction.module_args`).

A body's parameters are the values it receives and its outputs are what it returns. Values that
flow around a loop (loop-carried state) have the shape of the body's parameters: the frontend
widens those until they hold both the initial values and every iteration's results, and the shape
rules here check that they do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ShapeError
from ..ir import run_limits
from ..ir.dtypes import DType
from ..ir.module import Module
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape, TupleShape, ValueShape, join_shapes, shape_covers

Run = Callable[[Module, Sequence[Any]], list[Any]]


class ControlOp(Op):
    kind = OpKind.CONTROL

    def compute_shape(self, inputs):
        raise ShapeError(f"{self.name}: needs its body submodules to compute a shape")

    def compute_shape_with_modules(self, inputs: Sequence[ValueShape], modules: Sequence[Module]) -> TupleShape:
        raise NotImplementedError

    def compute_control(self, args: list[Any], modules: Sequence[Module], run: Run) -> tuple[Any, ...]:
        raise NotImplementedError

    def _check_carried(self, what: str, param: ValueShape, *values: ValueShape) -> None:
        for v in values:
            if not shape_covers(param, v):
                raise ShapeError(f"{self.name}: {what} has shape {v}, the body parameter {param} cannot hold it")


def _require_scalar(op: Op, what: str, s: ValueShape, dtypes: tuple[DType, ...]) -> None:
    if not isinstance(s, Shape) or s.dtype not in dtypes or not all(d.contains(1) for d in s.dims):
        raise ShapeError(f"{op.name}: {what} must be a one-element {'/'.join(d.value for d in dtypes)} tensor, got {s}")


def insert_dim(s: ValueShape, axis: int, dim: Dim, what: str) -> Shape:
    """`s` with a new dimension `dim` at `axis` (stacking per-iteration results)."""
    if not isinstance(s, Shape):
        raise ShapeError(f"{what}: per-iteration results must be tensors, got {s}")
    if not 0 <= axis <= s.ndim:
        raise ShapeError(f"{what}: axis {axis} is out of range for {s}")
    return Shape.dynamic(s.dtype, s.dims[:axis] + (dim,) + s.dims[axis:])


def stack(values: list[np.ndarray], axis: int, like: ValueShape) -> np.ndarray:
    """Stack per-iteration results on a new `axis`; with none, an empty array shaped like the body's output."""
    if values:
        return np.stack(values, axis=axis)
    assert isinstance(like, Shape)
    lens = [d.min if d.is_fixed else 0 for d in like.dims]
    return np.zeros(lens[:axis] + [0] + lens[axis:], dtype=like.dtype.np)


@register_op
class If(ControlOp):
    """Run the first submodule (then) if the one-element condition is true, else the second."""

    name = "if"

    def compute_shape_with_modules(self, inputs, modules):
        if len(inputs) != 1 or len(modules) != 2:
            raise ShapeError(f"if: takes one condition and two branches, got {len(inputs)} and {len(modules)}")
        _require_scalar(self, "the condition", inputs[0], (DType.bool,))
        then, other = ([o.shape for o in m.outputs] for m in modules)
        if len(then) != len(other):
            raise ShapeError(f"if: the branches return {len(then)} and {len(other)} values")
        # Branches may differ in their dims: each result holds either branch's value.
        return TupleShape(tuple(join_shapes(a, b) for a, b in zip(then, other, strict=True)))

    def compute_control(self, args, modules, run):
        cond = bool(np.asarray(args[0]).reshape(-1)[0])
        return tuple(run(modules[0] if cond else modules[1], []))


@register_op
class Loop(ControlOp):
    """ONNX Loop. Inputs: max trip count (int64 scalar), condition (bool scalar), initial carried values.
    The body takes (iteration number, condition, *carried) and returns (condition, *carried, *scan
    values). Results: the final carried values, then each scan value stacked on a new axis 0.
    The frontend supplies INT64_MAX and true for an absent trip count or condition."""

    name = "loop"
    max_trip_count: int | None = None  # an upper bound on the iterations, when known at compile time
    fixed_trip_count: bool = False  # the loop provably runs exactly max_trip_count times

    def trips(self) -> Dim:
        if self.max_trip_count is None:
            return Dim(0, None)
        return Dim.fixed(self.max_trip_count) if self.fixed_trip_count else Dim(0, self.max_trip_count)

    def compute_shape_with_modules(self, inputs, modules):
        (body,) = modules
        trip, cond, *init = inputs
        _require_scalar(self, "the trip count", trip, (DType.int64,))
        _require_scalar(self, "the condition", cond, (DType.bool,))
        params = [p.shape for p in body.parameters]
        outs = [o.shape for o in body.outputs]
        n = len(init)
        if len(params) != n + 2 or len(outs) < n + 1:
            raise ShapeError(f"loop: a body of {len(params)} parameters and {len(outs)} results does not "
                             f"fit {n} carried values")
        _require_scalar(self, "the body's condition", outs[0], (DType.bool,))
        for k in range(n):
            self._check_carried(f"carried value {k}", params[k + 2], init[k], outs[k + 1])
        scans = [insert_dim(s, 0, self.trips(), f"loop scan output {k}") for k, s in enumerate(outs[n + 1:])]
        return TupleShape(tuple(params[2:]) + tuple(scans))

    def compute_control(self, args, modules, run):
        (body,) = modules
        limit, go, *state = args
        limit, go = int(np.asarray(limit).reshape(-1)[0]), bool(np.asarray(go).reshape(-1)[0])
        n = len(state)
        scan_shapes = [o.shape for o in body.outputs[n + 1:]]
        scans: list[list[np.ndarray]] = [[] for _ in scan_shapes]
        if go and _condition_stays_true(body):  # it runs `limit` times: refused now, not after a million
            run_limits.check_loop(limit, f"loop (body {body.name})", before=True)
        i = 0
        while go and i < limit:
            run_limits.check_deadline(f"iteration {i} of loop body {body.name}")
            run_limits.check_loop(i + 1, f"loop (body {body.name})")
            outs = run(body, [np.array(i, np.int64), np.array(go), *state])
            go = bool(np.asarray(outs[0]).reshape(-1)[0])
            state = outs[1:n + 1]
            for acc, v in zip(scans, outs[n + 1:], strict=True):
                acc.append(v)
            i += 1
        return tuple(state) + tuple(stack(v, 0, s) for v, s in zip(scans, scan_shapes, strict=True))


def _condition_stays_true(body: Module) -> bool:
    """Whether a Loop body returns its condition unchanged (its parameter, or a literal true): the
    loop then ends by its trip count alone."""
    cond = body.outputs[0]
    while cond.op.name in ("identity", "convert") and cond.inputs:
        cond = cond.inputs[0]
    if cond is body.parameters[1]:
        return True
    return cond.is_literal and bool(np.all(np.asarray(cond.literal)))


@register_op
class Scan(ControlOp):
    """ONNX Scan. Inputs: initial states, then scan inputs. Each iteration the body takes (*states,
    *one slice of each scan input along its axis) and returns (*states, *scan output slices); the
    slices are stacked along the output axes. `reverse` flags walk an input (or fill an output)
    from the end. Opset 8 (`batched`): the first input is sequence_lens[batch], axis 0 of every
    other input and result is a batch axis, each batch item is scanned over its own length
    (outputs are zero past it), and axes count from the item's axis 0."""

    name = "scan"
    n_states: int = 0
    input_axes: tuple[int, ...] = ()
    input_reverse: tuple[bool, ...] = ()
    output_axes: tuple[int, ...] = ()
    output_reverse: tuple[bool, ...] = ()
    batched: bool = False

    def compute_shape_with_modules(self, inputs, modules):
        (body,) = modules
        inputs = list(inputs)
        batch: Dim | None = None
        if self.batched:
            seq_lens = inputs.pop(0)
            if not isinstance(seq_lens, Shape) or seq_lens.ndim != 1 or seq_lens.dtype != DType.int64:
                raise ShapeError(f"scan: sequence_lens must be int64[batch], got {seq_lens}")
            batch = seq_lens.dims[0]
            inputs = [_drop_axis0(s, batch) for s in inputs]
        states, xs = inputs[:self.n_states], inputs[self.n_states:]
        if len(xs) != len(self.input_axes) or len(self.input_reverse) != len(xs):
            raise ShapeError(f"scan: {len(xs)} scan inputs but {len(self.input_axes)} axes")
        params = [p.shape for p in body.parameters]
        outs = [o.shape for o in body.outputs]
        if len(params) != len(inputs) or len(outs) != self.n_states + len(self.output_axes):
            raise ShapeError(f"scan: a body of {len(params)} parameters and {len(outs)} results does not fit "
                             f"{self.n_states} states, {len(xs)} scan inputs and {len(self.output_axes)} scan outputs")
        length = self._length(xs)
        for k in range(self.n_states):
            self._check_carried(f"state {k}", params[k], states[k], outs[k])
        for k, (x, axis) in enumerate(zip(xs, self.input_axes, strict=True)):
            if not isinstance(x, Shape) or not 0 <= axis < x.ndim:
                raise ShapeError(f"scan: scan input {k} {x} has no axis {axis}")
            self._check_carried(f"a slice of scan input {k}", params[self.n_states + k],
                                Shape.dynamic(x.dtype, x.dims[:axis] + x.dims[axis + 1:]))
        results = list(params[:self.n_states]) + [
            insert_dim(s, axis, length, f"scan output {k}")
            for k, (s, axis) in enumerate(zip(outs[self.n_states:], self.output_axes, strict=True))]
        if batch is not None:
            results = [insert_dim(s, 0, batch, "scan") for s in results]
        return TupleShape(tuple(results))

    def _length(self, xs: Sequence[ValueShape]) -> Dim:
        lengths = {x.dims[a] for x, a in zip(xs, self.input_axes, strict=True) if isinstance(x, Shape) and x.ndim > a}
        fixed = {d for d in lengths if d.is_fixed}
        if len(fixed) > 1:
            raise ShapeError(f"scan: scan inputs differ in length ({sorted(d.min for d in fixed)})")
        return next(iter(fixed)) if fixed else next(iter(lengths), Dim(0, None))

    def compute_control(self, args, modules, run):
        (body,) = modules
        if not self.batched:
            return self._scan(body, run, args[:self.n_states], args[self.n_states:], None)
        seq_lens, *rest = args
        per_item = [self._scan(body, run, [a[b] for a in rest[:self.n_states]],
                               [x[b] for x in rest[self.n_states:]], int(seq_lens[b]))
                    for b in range(len(seq_lens))]
        return tuple(np.stack(vals) for vals in zip(*per_item, strict=True))

    def _scan(self, body: Module, run: Run, states: list, xs: list, length: int | None) -> tuple:
        slices, full = [], 0
        for x, axis, rev in zip(xs, self.input_axes, self.input_reverse, strict=True):
            s = np.moveaxis(np.asarray(x), axis, 0)
            full = s.shape[0]
            s = s[:length] if length is not None else s
            slices.append(s[::-1] if rev else s)
        steps = len(slices[0]) if slices else 0
        out_shapes = [o.shape for o in body.outputs[self.n_states:]]
        outs: list[list[np.ndarray]] = [[] for _ in out_shapes]
        for t in range(steps):
            run_limits.check_deadline(f"step {t} of scan body {body.name}")
            res = run(body, [*states, *(s[t] for s in slices)])
            states = res[:self.n_states]
            for acc, v in zip(outs, res[self.n_states:], strict=True):
                acc.append(v)
        results = list(states)
        for vals, shape, axis, rev in zip(outs, out_shapes, self.output_axes, self.output_reverse, strict=True):
            y = stack(vals[::-1] if rev else vals, 0, shape)
            if length is not None and length < full:  # opset 8: zeros past this item's length
                y = np.concatenate([y, np.zeros((full - length,) + y.shape[1:], y.dtype)])
            results.append(np.moveaxis(y, 0, axis))
        return tuple(results)


def _drop_axis0(s: ValueShape, batch: Dim) -> Shape:
    if not isinstance(s, Shape) or s.ndim < 1:
        raise ShapeError(f"scan: expected a batch axis of {batch} first, got {s}")
    return Shape.dynamic(s.dtype, s.dims[1:])


@register_op
class Trap(Op):
    """Raise `message` when run; its result shape is `result`. Stands for an If branch whose shapes
    cannot work for the program's input shapes: ONNX fails only if such a branch is taken."""

    name = "trap"
    kind = OpKind.OPAQUE
    deterministic = False
    message: str = ""
    result: TupleShape = TupleShape(())

    def compute_shape(self, inputs):
        return self.result

    def compute(self, args):
        raise RuntimeError(self.message)

"""If, Loop and Scan -> `if`, `loop` and `scan`, with their bodies parsed into submodules.

An If whose condition is known at parse time is no op at all: the chosen branch is parsed in place
(exporters emit many, e.g. `if x.shape[0] == 1: squeeze`, whose branches differ in rank).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ...errors import FusegraphError, ParseError, ShapeError, ValueDependentError
from ...ir.dtypes import DType
from ...ir.module import Instruction, Module
from ...ir.op import make_op
from ...ir.shape import Shape, TupleShape, ValueShape, join_shapes, shape_covers
from ..registry import converter

# Loop-carried shapes settle in a few rounds: each round widens every dim that changed to "any".
_MAX_ROUNDS = 16


def module_name(node, what: str) -> str:
    """A submodule name from the node's name that the IR text form can carry."""
    return re.sub(r"[^\w.]", "_", f"{node.name}_{what}")


def _standard(s: ValueShape) -> ValueShape:
    return Shape(s.dtype, s.dims) if isinstance(s, Shape) else s


def parse_loop_body(ctx, graph, name: str, params: Sequence[ValueShape], first_carried: int,
                    first_result: int, n_carried: int) -> Module:
    """Parse a loop body whose parameters `first_carried`.. are carried values that come back as its
    results `first_result`..; widen their shapes until each holds the initial value and every
    iteration's result (a value may grow or change its dims on each iteration)."""
    shapes = [_standard(s) for s in params]
    for _ in range(_MAX_ROUNDS):
        body = ctx.parse_subgraph(graph, name, shapes)
        outs = [o.shape for o in body.outputs[first_result:first_result + n_carried]]
        if len(outs) != n_carried:
            raise ctx.error(f"the body returns {len(body.outputs)} values, fewer than its {n_carried} carried ones")
        carried = shapes[first_carried:first_carried + n_carried]
        if all(shape_covers(s, o) for s, o in zip(carried, outs, strict=True)):
            return body
        ctx.program.discard_module(body)
        for k, (s, o) in enumerate(zip(carried, outs, strict=True)):
            if not shape_covers(s, o):
                shapes[first_carried + k] = join_shapes(s, o, widen=True)
    raise ctx.error(f"the shapes of the loop-carried values do not settle after {_MAX_ROUNDS} rounds")


def _first(value: np.ndarray):
    return np.asarray(value).reshape(-1)[0]


def _branch(ctx, node, graph, what: str) -> tuple[Module | None, FusegraphError | None]:
    """Parse an If branch, or return why its shapes cannot work for these inputs (exporters trace
    every branch for one input size, e.g. audio models with one branch per sample rate)."""
    before = set(ctx.program.modules)
    try:
        return ctx.parse_subgraph(graph, module_name(node, what)), None
    except (ShapeError, ParseError) as e:
        for name in set(ctx.program.modules) - before:
            if name in ctx.program.modules:
                ctx.program.discard_module(ctx.program.modules[name])
        ctx.node = node
        return None, e


def _trap_branch(ctx, node, what: str, error: FusegraphError, like: Module) -> Module:
    """A branch that raises `error` if it runs, with the shapes of the other branch's results."""
    mod = ctx.program.create_module(module_name(node, what), ctx.module)
    result = TupleShape(tuple(o.shape for o in like.outputs))
    trap = mod.add(make_op("trap", message=f"If branch {what} cannot run for these input shapes: {error}",
                           result=result))
    mod.add_return(*[mod.add(make_op("get_tuple_elem", index=k), trap) for k in range(len(result.elements))])
    return mod


@converter("If")
def if_(ctx, node, args):
    cond = args[0]
    then_g, else_g = node.attr("then_branch"), node.attr("else_branch")
    known = ctx.const(cond)
    if known is not None:
        return ctx.inline_subgraph(then_g if bool(_first(known)) else else_g)
    (then, then_err), (other, other_err) = _branch(ctx, node, then_g, "then"), _branch(ctx, node, else_g, "else")
    if then is None or other is None:
        # ONNX fails only when the branch that cannot work is taken: so does the program.
        if then is None and other is None:
            raise then_err  # type: ignore[misc]
        if then is None:
            then = _trap_branch(ctx, node, "then", then_err, other)  # type: ignore[arg-type]
        else:
            other = _trap_branch(ctx, node, "else", other_err, then)  # type: ignore[arg-type]
    for k, (a, b) in enumerate(zip(then.outputs, other.outputs)):
        if isinstance(a.shape, Shape) and isinstance(b.shape, Shape) and a.shape.ndim != b.shape.ndim:
            raise ctx.error(f"result {k} is {a.shape} from one branch and {b.shape} from the other: its "
                            "rank depends on the condition, known only at run time", ValueDependentError)
    out = ctx.add("if", ctx.convert(cond, DType.bool), module_args=[then, other])
    return ctx.tuple_elems(out, len(node.outputs))


@converter("Loop")
def loop(ctx, node, args):
    trip, cond, *init = list(args) + [None] * (2 - len(args))
    if any(v is None for v in init):
        raise ctx.error("a loop-carried initial value is missing")
    trip_value, cond_value = ctx.const(trip), ctx.const(cond)
    # Absent inputs mean "no limit" and "no condition": the op always gets both.
    trip = ctx.literal(np.iinfo(np.int64).max, DType.int64) if trip is None else ctx.convert(trip, DType.int64)
    cond = ctx.literal(True, DType.bool) if cond is None else ctx.convert(cond, DType.bool)
    n = len(init)
    params = [Shape.of(DType.int64, ()), Shape.of(DType.bool, ())] + [v.shape for v in init]
    body = parse_loop_body(ctx, node.attr("body"), module_name(node, "body"), params, 2, 1, n)
    max_trips = None if trip_value is None else max(int(_first(trip_value)), 0)
    # The body hands its condition parameter straight back and it starts true: exactly max_trips runs.
    starts_true = len(args) < 2 or args[1] is None or (cond_value is not None and bool(_first(cond_value)))
    fixed = max_trips is not None and starts_true and body.outputs[0] is body.parameters[1]
    out = ctx.add("loop", trip, cond, *init, module_args=[body], max_trip_count=max_trips,
                  fixed_trip_count=fixed)
    return ctx.tuple_elems(out, len(node.outputs))


def _axes(values: list[int], n: int, ranks: Sequence[int], what: str, ctx) -> tuple[int, ...]:
    values = list(values) if values else [0] * n
    if len(values) != n:
        raise ctx.error(f"{what} lists {len(values)} axes for {n} values")
    out = []
    for a, r in zip(values, ranks, strict=True):
        if not -r <= a < r:
            raise ctx.error(f"{what}: axis {a} is out of range for rank {r}")
        out.append(a + r if a < 0 else a)
    return tuple(out)


def _directions(values: list[int], n: int, what: str, ctx) -> tuple[bool, ...]:
    values = list(values) if values else [0] * n
    if len(values) != n or any(v not in (0, 1) for v in values):
        raise ctx.error(f"{what} must list 0 (forward) or 1 (reverse) for each of {n} values, got {values}")
    return tuple(bool(v) for v in values)


def _scan(ctx, node, states: list[Instruction], xs: list[Instruction], in_axes, in_reverse,
          raw_out_axes, raw_out_dirs, seq_lens: Instruction | None):
    """Parse the body and add the `scan`; axes and shapes are those of one batch item when batched."""
    drop = 1 if seq_lens is not None else 0
    item_states = [Shape.dynamic(s.shape.dtype, s.shape.dims[drop:]) for s in states]
    slices = [Shape.dynamic(x.shape.dtype, x.shape.dims[drop:][:a] + x.shape.dims[drop:][a + 1:])
              for x, a in zip(xs, in_axes, strict=True)]
    n = len(states)
    body = parse_loop_body(ctx, node.attr("body"), module_name(node, "body"), item_states + slices, 0, 0, n)
    outs = body.outputs[n:]
    out_axes = _axes(raw_out_axes, len(outs), [o.shape.ndim + 1 for o in outs], "scan_output_axes", ctx)
    out_reverse = _directions(raw_out_dirs, len(outs), "scan_output_directions", ctx)
    lead = [seq_lens] if seq_lens is not None else []
    out = ctx.add("scan", *lead, *states, *xs, module_args=[body], n_states=n, input_axes=in_axes,
                  input_reverse=in_reverse, output_axes=out_axes, output_reverse=out_reverse,
                  batched=seq_lens is not None)
    return ctx.tuple_elems(out, len(node.outputs))


@converter("Scan", since=9)
def scan(ctx, node, args):
    n_scan = node.attr("num_scan_inputs")
    states, xs = list(args[:len(args) - n_scan]), list(args[len(args) - n_scan:])
    if n_scan < 1 or any(v is None for v in args):
        raise ctx.error("Scan needs at least one scan input and no missing inputs")
    in_axes = _axes(node.attr("scan_input_axes", []), n_scan, [x.shape.ndim for x in xs], "scan_input_axes", ctx)
    in_reverse = _directions(node.attr("scan_input_directions", []), n_scan, "scan_input_directions", ctx)
    return _scan(ctx, node, states, xs, in_axes, in_reverse, node.attr("scan_output_axes", []),
                 node.attr("scan_output_directions", []), None)


@converter("Scan", since=8)
def scan_v8(ctx, node, args):
    """Opset 8: a batch axis first, the scan axis second, optional per-item sequence lengths."""
    n_scan = node.attr("num_scan_inputs")
    seq_lens, *rest = args
    states, xs = rest[:len(rest) - n_scan], rest[len(rest) - n_scan:]
    if n_scan < 1 or any(v is None for v in rest):
        raise ctx.error("Scan needs at least one scan input and no missing inputs")
    if any(x.shape.ndim < 2 for x in xs) or any(s.shape.ndim < 1 for s in states):
        raise ctx.error("opset-8 Scan inputs need a batch axis (and scan inputs a sequence axis)")
    if seq_lens is None:  # every item runs the full length
        dims = xs[0].shape.dims
        if not (dims[0].is_fixed and dims[1].is_fixed):
            raise ctx.error("without sequence_lens, the batch and sequence sizes must be static")
        seq_lens = ctx.literal(np.full(dims[0].min, dims[1].min, np.int64))
    in_reverse = _directions(node.attr("directions", []), n_scan, "directions", ctx)
    n_out = len(node.attr("body").output) - len(states)
    return _scan(ctx, node, states, xs, (0,) * n_scan, in_reverse, [0] * n_out, [0] * n_out,
                 ctx.convert(seq_lens, DType.int64))

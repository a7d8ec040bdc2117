"""Triton source for `fused_reduce`: a reduction region (softmax, layer norm, a mean and its epilogue)
as one kernel, generated from the region's body submodule.

The kernel's rows are the kept (outer) dims, its columns the reduced dims. Every body value is either
"full" (one per element: a [XBLOCK, RBLOCK] block) or "reduced" (one per row: [XBLOCK, 1]). Each
reduction is a stage over the columns; values after it may use its result. When a row fits in one
block (`persistent`) the body is straight-line code and every value is computed once; otherwise each
stage loops over the row in RBLOCK chunks and recomputes the full values it needs from the loads (the
classic multi-pass form: a few extra reads that stay in cache, never an extra kernel).
Accumulation is in float32 (float64 for float64 bodies) whatever the storage type.
"""

from __future__ import annotations

import dataclasses

from ...errors import CompileError
from ...ir.dtypes import DType
from ...ir.module import Module
from ...ir.shape import Shape
from ...ops.scalar import parse_expr
from .triton_expr import TritonExprRenderer, compute_type, tl_type, triton_types_ok
from .triton_pointwise import HEADER

REDUCTIONS = {"reduce_sum": "sum", "reduce_mean": "mean", "reduce_max": "max", "reduce_min": "min",
              "reduce_prod": "prod"}
_INIT = {"sum": "0.0", "mean": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "prod": "1.0"}


class Unsupported(CompileError):
    """The body has a form the Triton generator does not take (the lowering then runs it op by op)."""


@dataclasses.dataclass(frozen=True)
class ReduceLoad:
    param: int                          # body parameter read
    lens: tuple[int, ...] | None        # broadcast to these lens first (a broadcast inside the body)
    reduced: bool                       # one value per row (else one per element)


@dataclasses.dataclass
class ReduceBody:
    """A fused_reduce body analysed for code generation."""

    full: tuple[int, ...]
    axes: tuple[int, ...]
    loads: list[ReduceLoad]
    nodes: list[tuple[int, str, tuple]]   # (value, kind, data) in body order; a value is its position
    dtypes: dict[int, DType]              # compute type of each value
    reduced: dict[int, bool]              # value class
    root: int
    out_type: DType
    acc_type: DType

    @property
    def out_reduced(self) -> bool:
        return self.reduced[self.root]

    def key(self) -> str:
        return repr((self.full, self.axes, self.loads, self.nodes, sorted(self.dtypes.items()), self.root,
                     self.out_type))


def analyze_body(body: Module, axes: tuple[int, ...]) -> ReduceBody:
    params = body.parameters
    ret = body.outputs[0]
    first_reduction = next((i for i in body.instructions if i.op.name in REDUCTIONS or i.op.name in (
        "moments", "softmax", "log_softmax")), None)
    if first_reduction is None:
        raise Unsupported("no reduction in the body")
    full = first_reduction.inputs[0].shape.lens
    reduced_lens = tuple(1 if k in axes else n for k, n in enumerate(full))
    loads: list[ReduceLoad] = []
    nodes: list[tuple[int, str, tuple]] = []
    dtypes: dict[int, DType] = {}
    cls: dict[int, bool] = {}
    pindex = {p.uid: k for k, p in enumerate(params)}
    # values are numbered by position, not uid: equal bodies (every layer's layer norm) get equal
    # keys, hence one kernel name and source, which Triton's on-disk cache then finds on a reload
    local = {ins.uid: k for k, ins in enumerate(body.instructions)}
    any_f64 = False

    def klass(shape) -> bool:
        if not isinstance(shape, Shape) or shape.lens not in (full, reduced_lens):
            raise Unsupported(f"value of shape {shape} is neither {full} nor {reduced_lens}")
        return shape.lens != full

    def add_load(k: int, lens, shape) -> int:
        spec = ReduceLoad(k, lens, klass(shape))
        if spec not in loads:
            loads.append(spec)
        return loads.index(spec)

    def value_of(x) -> int:
        if x.uid in pindex:  # a parameter used as it is
            uid = -1 - add_load(pindex[x.uid], None, x.shape)
            dtypes[uid] = compute_type(x.shape.dtype)
            cls[uid] = klass(x.shape)
            return uid
        if local.get(x.uid) not in dtypes:
            raise Unsupported(f"{x.op} is used but not computed in the kernel")
        return local[x.uid]

    for ins in body.instructions:
        name, uid = ins.op.name, local[ins.uid]
        if name in ("@param", "@return", "@literal"):
            if name == "@literal":
                raise Unsupported("literal inside the body")
            continue
        dt = ins.shape.dtype if isinstance(ins.shape, Shape) else None
        if dt is not None and not triton_types_ok([dt]):
            raise Unsupported(f"{dt} values")
        if name == "broadcast":
            x = ins.inputs[0]
            if x.uid in pindex:
                src = -1 - add_load(pindex[x.uid], tuple(ins.op.out_lens), ins.shape)
                nodes.append((uid, "alias", (src,)))
                dtypes[src] = compute_type(dt)
                cls[src] = klass(ins.shape)
            else:
                nodes.append((uid, "alias", (value_of(x),)))
        elif ins.op.kind.value == "pointwise" and hasattr(ins.op, "expr"):
            nodes.append((uid, "expr", (str(ins.op.expr), tuple(value_of(x) for x in ins.inputs))))
        elif name in REDUCTIONS or name in ("moments", "softmax", "log_softmax"):
            x = ins.inputs[0]
            if x.shape.lens != full or not x.shape.dtype.is_float:
                raise Unsupported(f"{ins.op} over {x.shape}")
            any_f64 |= x.shape.dtype == DType.float64
            extra = (ins.op.centered,) if name == "moments" else ()
            nodes.append((uid, name, (value_of(x), *extra)))
        elif name == "get_tuple_elem":
            nodes.append((uid, "moment", (local[ins.inputs[0].uid], ins.op.index)))
            dt = ins.shape.dtype
        else:
            raise Unsupported(f"{ins.op} in a reduction body")
        if name != "moments":
            dtypes[uid] = compute_type(dt if dt is not None else DType.float32)
            cls[uid] = klass(ins.shape)
        else:
            dtypes[uid] = compute_type(ins.inputs[0].shape.dtype)
            cls[uid] = True
    if not isinstance(ret.shape, Shape):
        raise Unsupported("tuple result")
    root = value_of(ret)
    return ReduceBody(full, tuple(axes), loads, nodes, dtypes, cls, root, ret.shape.dtype,
                      DType.float64 if any_f64 else DType.float32)


class _Emitter:
    def __init__(self, rb: ReduceBody, n_outer: int, n_red: int, persistent: bool):
        self.rb, self.no, self.nr, self.persistent = rb, n_outer, n_red, persistent
        self.lines: list[str] = []
        self.ind = "    "
        self.memo: dict[int, str] = {}    # values that live for the whole kernel
        self.local: dict[int, str] = {}   # full values inside the current loop
        self.renderer = TritonExprRenderer(self.lines, self.ind)
        self.node = {uid: (kind, data) for uid, kind, data in rb.nodes}
        self.acc = tl_type(rb.acc_type)
        self.in_loop = False  # names bound inside a loop body are not visible after it
        self.count = 0

    def emit(self, line: str) -> None:
        self.lines.append(self.ind + line)

    def addr(self, k: int, full: bool) -> str:
        terms = [f"o{d} * ost{k}_{d}" for d in range(self.no)]
        if full:
            terms += [f"q{d} * rst{k}_{d}" for d in range(self.nr)]
        return " + ".join(terms)

    def decompose(self, flat: str, prefix: str, sizes: str, n: int) -> None:
        if n == 1:
            self.emit(f"{prefix}0 = {flat}")
            return
        self.emit(f"rem_{prefix} = {flat}")
        for d in range(n - 1, 0, -1):
            self.emit(f"{prefix}{d} = rem_{prefix} % {sizes}{d}")
            self.emit(f"rem_{prefix} = rem_{prefix} // {sizes}{d}")
        self.emit(f"{prefix}0 = rem_{prefix}")

    def open_columns(self, start: str) -> None:
        self.emit(f"r = {start} + tl.arange(0, RBLOCK)[None, :]")
        self.emit("m = rowmask & (r < R)")
        self.decompose("r", "q", "rs", self.nr)

    def open_loop(self) -> None:
        self.emit("for r0 in range(0, R, RBLOCK):")
        self.ind += "    "
        self.local = {}
        self.in_loop = True
        self.open_columns("r0")

    def value(self, uid: int) -> str:
        if uid in self.memo:
            return self.memo[uid]
        if uid in self.local:
            return self.local[uid]
        rb = self.rb
        if uid < 0:  # a load
            k = -1 - uid
            load = rb.loads[k]
            dt = rb.dtypes[uid]
            if load.reduced:
                code = f"tl.load(ld{k} + {self.addr(k + 1, False)}, mask=rowmask, other=0)"
            else:
                code = f"tl.load(ld{k} + {self.addr(k + 1, True)}, mask=m, other=0)"
            return self._bind(uid, f"{code}.to({tl_type(dt)})", load.reduced)
        kind, data = self.node[uid]
        if kind == "alias":
            return self._bind(uid, self.value(data[0]), rb.reduced[uid], tmp=False)
        if kind == "expr":
            text, inputs = data
            names = [self.value(i) for i in inputs]
            self.renderer.indent = self.ind
            name, _ = self.renderer.emit(parse_expr(text), names, [rb.dtypes[i] for i in inputs])
            return self._bind(uid, name, rb.reduced[uid], tmp=False)
        if kind in ("softmax", "log_softmax"):
            x = self.value(data[0])
            mx, s = self.memo[f"{uid}:max"], self.memo[f"{uid}:sum"]  # type: ignore[index]
            code = f"tl.exp({x} - {mx}) / {s}" if kind == "softmax" else f"{x} - {mx} - tl.log({s})"
            return self._bind(uid, code, False)
        raise CompileError(f"value {uid} ({kind}) used before its stage")

    def _bind(self, uid: int, code: str, reduced: bool, tmp: bool = True) -> str:
        name = code
        if tmp:
            self.count += 1
            name = f"v{self.count}"
            self.emit(f"{name} = {code}")
        if self.persistent or (reduced and not self.in_loop):
            self.memo[uid] = name
        else:
            self.local[uid] = name
        return name

    def reduction(self, value_uid: int, op: str, transform=None) -> str:
        """Emit one stage: reduce `value` (optionally transformed) over the columns; return the
        name of the [XBLOCK, 1] result."""
        init = _INIT[op]
        # a NaN wins a float max or min, as numpy's: tl.maximum's default, tl.max and tl.min keep the
        # number (PTX max.f32), so the loop combines with NaN propagated and the row's NaN is counted
        nan = op in ("max", "min") and self.rb.acc_type.is_float
        keep = ", propagate_nan=tl.PropagateNan.ALL" if nan else ""
        combine = {"sum": "{a} + {b}", "mean": "{a} + {b}", "prod": "{a} * {b}",
                   "max": "tl.maximum({a}, {b}" + keep + ")", "min": "tl.minimum({a}, {b}" + keep + ")"}[op]
        final = {"sum": "tl.sum({x}, axis=1)", "mean": "tl.sum({x}, axis=1)", "max": "tl.max({x}, axis=1)",
                 "min": "tl.min({x}, axis=1)", "prod": "tl.reduce({x}, 1, _prod)"}[op]
        self.count += 1
        n = self.count
        if self.persistent:
            v = self.value(value_uid)
            v = transform(v) if transform else v
            src = f"tl.where(m, {v}, {init})"
        else:
            acc = f"acc{n}"
            self.emit(f"{acc} = tl.full([XBLOCK, RBLOCK], {init}, {self.acc})")
            self.open_loop()
            v = self.value(value_uid)
            v = transform(v) if transform else v
            self.emit(f"{acc} = " + combine.format(a=acc, b=f"tl.where(m, {v}, {init})"))
            self.ind = self.ind[:-4]
            self.local = {}
            self.in_loop = False
            src = acc
        name = f"red{n}"
        if nan:
            self.emit(f"{name}_in = ({src}).to({self.acc})")
            src = f"{name}_in"
            final = f'tl.where(tl.max(({{x}} != {{x}}).to(tl.int8), axis=1) > 0, float("nan"), {final})'
        self.emit(f"{name} = {final.format(x=src if nan else f'({src}).to({self.acc})')}[:, None]")
        if op == "mean":
            self.emit(f"{name} = {name} / R")
        return name


def reduce_source(rb: ReduceBody, n_outer: int, n_red: int, persistent: bool, name: str) -> str:
    """The kernel for `rb` over `n_outer` row dims and `n_red` column dims (already merged)."""
    e = _Emitter(rb, n_outer, n_red, persistent)
    n_ops = 1 + len(rb.loads)
    params = ["out_ptr"] + [f"ld{k}" for k in range(len(rb.loads))] + ["n_rows", "R"]
    params += [f"os{d}" for d in range(1, n_outer)] + [f"rs{d}" for d in range(1, n_red)]
    for k in range(n_ops):
        params += [f"ost{k}_{d}" for d in range(n_outer)]
        full = (not rb.out_reduced) if k == 0 else not rb.loads[k - 1].reduced
        if full:
            params += [f"rst{k}_{d}" for d in range(n_red)]
    e.lines.append(f"@triton.jit\ndef {name}({', '.join(params)}, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):")
    e.emit("rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
    e.emit("rowmask = rows < n_rows")
    e.decompose("rows", "o", "os", n_outer)
    if persistent:
        e.open_columns("0")
    for k, load in enumerate(rb.loads):  # row values first, where every stage can see them
        if load.reduced:
            e.value(-1 - k)
    for uid, kind, data in rb.nodes:
        if kind in REDUCTIONS.keys():
            e.memo[uid] = e.reduction(data[0], REDUCTIONS[kind])
        elif kind == "moments":
            mean = e.reduction(data[0], "mean")
            e.memo[f"{uid}:0"] = mean  # type: ignore[index]
            centered = data[1]
            sq = (lambda v, mu=mean: f"(({v}) - {mu}) * (({v}) - {mu})") if centered else (lambda v: f"({v}) * ({v})")
            e.memo[f"{uid}:1"] = e.reduction(data[0], "mean", sq)  # type: ignore[index]
        elif kind == "moment":
            src, index = data
            e.memo[uid] = e.memo[f"{src}:{index}"]  # type: ignore[index]
        elif kind in ("softmax", "log_softmax"):
            mx = e.reduction(data[0], "max")
            e.memo[f"{uid}:max"] = mx  # type: ignore[index]
            e.memo[f"{uid}:sum"] = e.reduction(data[0], "sum", lambda v, mx=mx: f"tl.exp({v} - {mx})")  # type: ignore[index]
    out_t = tl_type(rb.out_type) if rb.out_type != DType.bool else "tl.int1"
    if rb.out_reduced:
        v = e.value(rb.root)
        e.emit(f"tl.store(out_ptr + {e.addr(0, False)}, tl.broadcast_to(({v}).to({out_t}), [XBLOCK, 1]), mask=rowmask)")
    else:
        if not persistent:
            e.open_loop()
        v = e.value(rb.root)
        e.emit(f"tl.store(out_ptr + {e.addr(0, True)}, tl.broadcast_to(({v}).to({out_t}), [XBLOCK, RBLOCK]), mask=m)")
    return HEADER + "@triton.jit\ndef _prod(a, b):\n    return a * b\n\n\n" + "\n".join(e.lines) + "\n"



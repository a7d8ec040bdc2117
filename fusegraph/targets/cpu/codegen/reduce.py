"""C kernels for `fused_reduce` bodies: each row in passes, values per element or per row.

The reduced axes must form a trailing block of the reduced input's lens `full` (size-1 dims aside),
so a "row" is one index of the other axes and its R = prod(reduced lens) elements are contiguous in a
full-lens output. Every value of the body is per element (F: lens `full`, computed inside a loop over
the row) or per row (R: the reduced lens, a scalar between loops). A reduction of an F value that
depends on R values known after pass L runs in pass L+1; an F output is written in the pass after its
inputs are known. F values are recomputed in each pass that needs them (cheap; the row is in L1),
except expensive ones (exp, erf, ...) needed in several passes, kept in a per-thread row buffer. Layer
norm is three passes (sum; centred sum of squares; output), softmax three (max; sum of exp, kept;
output). Other reduced-axes sets raise CodegenUnsupported so the target can pick another kernel.

Sums, means and products of floats accumulate in double (numpy's float32 pairwise sums are within a
few ulp of that); `#pragma omp simd reduction` lets gcc vectorize them without -ffast-math. Max and
min carry a NaN flag: numpy's propagate NaN.

Half precision follows the reference step by step, since ONNX defines those intermediate types:
each value of a half dtype is rounded to it (pointwise ops compute in float and round once; softmax
rounds x - max, its exp, the sum and the quotient, as numpy does on half arrays). float16 sums and
products round once at the end, as numpy's half loops (which accumulate in float) do; bfloat16 ones
round every step, in order, as ml_dtypes' loops do, so their loop is not vectorized.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....ir.dtypes import DType
from ....ir.module import Module
from ....ir.shape import Shape
from .c_expr import HALF, CRenderer, CValue, c_type, convert, literal, load, single, storage_type, store
from .kernels import GRAIN, KernelSource, expr_cost, finish
from .memo import cached
from .reduce_body import BUFFER_BYTES, Acc, Body, Node, view_offsets


def _bounds(dt: DType) -> tuple[str, str]:
    """Initial values of max and min accumulators: the lowest and highest of the dtype."""
    if dt.is_float:
        return "(-INFINITY)", "INFINITY"
    if dt == DType.bool:
        return "0", "1"
    info = np.iinfo(dt.np)
    return literal(info.min, dt), literal(info.max, dt)


_ACC_CLAUSE = {"sum": "+", "mean": "+", "sq": "+", "prod": "*", "max": "max", "min": "min"}


def sequential(a: Acc) -> bool:
    """A bfloat16 sum or product: rounded to bfloat16 after every step, in order (ml_dtypes' loops)."""
    return a.op in ("sum", "mean", "prod") and a.src.dtype == DType.bfloat16


def acc_type(a: Acc) -> str:
    if a.op in ("max", "min") or sequential(a):
        return c_type(a.src.dtype)
    if a.op in ("mean", "sq") or a.src.dtype.is_float:
        return "double"
    return c_type(a.src.dtype)  # integer sums and products wrap, as numpy's in the input dtype


def acc_init(a: Acc) -> list[str]:
    t = acc_type(a)
    if a.op in ("max", "min"):
        lo, hi = _bounds(a.src.dtype)
        flag = [f"int {a.name}_nan = 0;"] if a.src.dtype.is_float else []
        return [f"{t} {a.name} = {lo if a.op == 'max' else hi};", *flag]
    return [f"{t} {a.name} = {1 if a.op == 'prod' else 0};"]


def acc_step(a: Acc, x: str) -> str:
    t, xt = acc_type(a), c_type(a.src.dtype)
    if a.op in ("max", "min"):
        step = f"{a.name} = {x} {'>' if a.op == 'max' else '<'} {a.name} ? {x} : {a.name};"
        return step + (f" {a.name}_nan |= {x} != {x};" if a.src.dtype.is_float else "")
    if sequential(a):
        return f"{a.name} = {convert(f'{a.name} {_ACC_CLAUSE[a.op]} {x}', DType.float32, a.src.dtype)};"
    if a.op == "sq":  # numpy squares in the input dtype, then averages
        d = f"{x} - {a.center.name}" if a.center is not None else x
        return f"{{ const {xt} d = {d}; {a.name} += ({t})(d * d); }}"
    return f"{a.name} {'*' if a.op == 'prod' else '+'}= ({t}){x};"


def acc_result(a: Acc, b: Body) -> str:
    if a.op in ("max", "min"):
        value = f"({a.name}_nan ? NAN : {a.name})" if a.src.dtype.is_float else a.name
        return convert(value, a.src.dtype, a.dtype)
    if a.op in ("mean", "sq"):  # a float64 mean; integer means truncate, as the conversion does
        return convert(f"((double){a.name} / {float(b.R)!r})", DType.float64, a.dtype)
    return convert(a.name, DType.float64 if acc_type(a) == "double" else a.src.dtype, a.dtype)


class _Emitter:
    def __init__(self, b: Body, r: CRenderer, fast_math: bool):
        self.b, self.r, self.fast_math = b, r, fast_math
        self.out_pass = b.out.level + 1 if b.out.cls == "F" else 0
        self.passes = max([a.pass_ for a in b.accs] + [self.out_pass])
        self.steps = {id(n): view_offsets(b, n) for n in b.nodes if n.kind == "view" and n.cls != "raw"}
        for p in range(1, self.passes + 1):
            for n in self.needs(p, keep=False):
                n.uses.add(p)
        budget = BUFFER_BYTES
        for n in b.nodes:  # keep expensive values needed in several passes, while the budget lasts
            size = b.R * n.dtype.itemsize
            if self.costly(n) and len(n.uses) > 1 and size <= budget:
                n.kept, budget = True, budget - size

    @staticmethod
    def costly(n: Node) -> int:
        return 4 if n.kind == "exp" else expr_cost(n.ins.op.expr) if n.kind == "pw" else 0

    def hoisted(self, n: Node) -> bool:
        """An F view constant along the row is loaded once per row."""
        return n.kind == "view" and n.cls == "F" and self.steps[id(n)][1] == 0

    def needs(self, p: int, keep: bool = True, reload: bool = False) -> list[Node]:
        """The per-element nodes that pass p computes (or loads back), in order; with `reload`, the
        values pass p keeps are loaded back too (the accumulating loop of a split pass)."""
        stack = [a.src for a in self.b.accs if a.pass_ == p] + ([self.b.out] if p == self.out_pass else [])
        seen: set[int] = set()
        while stack:
            n = stack.pop()
            if n.cls != "F" or id(n) in seen or self.hoisted(n):
                continue
            seen.add(id(n))
            if not (keep and self.loaded(n, p, reload)):
                stack += n.inputs
        return [n for n in self.b.nodes if id(n) in seen]

    @staticmethod
    def loaded(n: Node, p: int, reload: bool = False) -> bool:
        return bool(p) and n.kept and (min(n.uses) < p or (reload and min(n.uses) == p))

    def split(self, p: int, accs: list[Acc]) -> bool:
        """Whether pass p computes its kept values in a loop of their own before accumulating: a
        double accumulator narrows gcc's vector to 8 lanes, and the float32 exp beside it with it
        (softmax over 79 columns: 57 -> 23 us)."""
        return any(acc_type(a) == "double" for a in accs) and any(
            n.kept and min(n.uses) == p and single(n.dtype) for n in self.needs(p))

    def node(self, n: Node, p: int = 0, reload: bool = False) -> list[str]:
        """Statements defining n.name: in the loop of pass p, or per row (p = 0)."""
        t, f = c_type(n.dtype), "f" if single(n.dtype) else ""
        buf = f"k{n.name}"

        def rnd(code: str) -> str:  # each softmax step of a half dtype rounds to it, as numpy's
            return convert(code, DType.float32, n.dtype) if n.dtype in HALF else f"({code})"

        if self.loaded(n, p, reload):
            return [f"const {t} {n.name} = {buf}[j];"]
        if n.kind == "view":
            row, step = self.steps[id(n)]
            idx = row if not p or step == 0 else f"{row} + j" if step == 1 else f"{row} + j * {step}"
            lines = [f"const {t} {n.name} = {load(f'in{n.param}[{idx}]', n.dtype)};"]
        elif n.kind == "alias":
            src = n.inputs[0]
            lines = [f"const {t} {n.name} = {src.accs[n.index].result if src.kind == 'tuple' else src.name};"]
        elif n.kind == "acc":
            lines = [f"const {t} {n.name} = {n.accs[0].result};"]
        elif n.kind == "pw":
            half32 = getattr(n.ins.op, "half_in_float32", True)  # half inputs enter as float32
            ins = [CValue(x.name, DType.float32 if half32 and x.dtype in HALF else x.dtype) for x in n.inputs]
            stmts, res = self.r.render(n.ins.op.expr, ins, n.dtype)
            lines = [*stmts, f"const {t} {n.name} = {res};"]
        elif n.kind == "exp":  # numpy: exp(x - max)
            x, mx = n.inputs
            fn = self.r.need("fg_expf") if f and self.fast_math else f"exp{f}"
            shifted = rnd(f"{x.name} - {mx.name}")
            lines = [f"const {t} {n.name} = {rnd(f'{fn}({shifted})')};"]
        elif n.kind == "log":
            lines = [f"const {t} {n.name} = {rnd(f'log{f}({n.inputs[0].name})')};"]
        elif n.kind == "softmax":  # numpy: exp(shifted) / total, or shifted - log(total)
            a = n.inputs
            value = f"{a[0].name} / {a[1].name}" if len(a) == 2 else \
                f"{rnd(f'{a[0].name} - {a[1].name}')} - {a[2].name}"
            lines = [f"const {t} {n.name} = {rnd(value)};"]
        else:
            raise AssertionError(n.kind)
        if p and n.kept:
            lines.append(f"{buf}[j] = {n.name};")
        return lines

    def emit(self) -> str:
        b, out = self.b, self.b.out
        ot = storage_type(out.dtype)
        body: list[str] = []
        if any(row.startswith("i") for row, _ in self.steps.values()):  # outer indices needed
            body.append("int64_t rest = row;")
            for k in reversed(b.outer):
                body.append(f"const int64_t i{k} = rest % {b.full[k]}; rest /= {b.full[k]};")
        for n in b.nodes:
            if self.hoisted(n) or (n.cls == "R" and n.level == 0 and n.kind != "acc"):
                body += self.node(n)
        cost = 0
        for p in range(1, self.passes + 1):
            accs = [a for a in b.accs if a.pass_ == p]
            cost += 1 + sum(self.costly(n) for n in self.needs(p))
            split = self.split(p, accs)
            if split:  # the kept values first (the other values' code there is dead: gcc drops it)
                first = [line for n in self.needs(p) for line in self.node(n, p)]
                body += ["#pragma omp simd", f"for (int64_t j = 0; j < {b.R}; ++j) {{",
                         *("    " + line for line in first), "}"]
            loop = [line for n in self.needs(p, reload=split) for line in self.node(n, p, reload=split)]
            loop += [acc_step(a, a.src.name) for a in accs]
            if p == self.out_pass:
                loop.append(f"o[j] = {store(out.name, out.dtype)};")
            clauses = {}
            for a in accs:
                clauses.setdefault(_ACC_CLAUSE[a.op], []).append(a.name)
                if a.op in ("max", "min") and a.src.dtype.is_float:
                    clauses.setdefault("|", []).append(f"{a.name}_nan")
            red = "".join(f" reduction({op}:{','.join(names)})" for op, names in clauses.items())
            body += [line for a in accs for line in acc_init(a)]
            if not any(sequential(a) for a in accs):
                body.append(f"#pragma omp simd{red}")
            body += [f"for (int64_t j = 0; j < {b.R}; ++j) {{",
                     *("    " + line for line in loop), "}"]
            body += [f"const {c_type(a.dtype)} {a.result} = {acc_result(a, b)};" for a in accs]
            for n in b.nodes:
                if n.cls == "R" and n.level == p and n.kind not in ("view", "tuple"):
                    body += self.node(n)
        if out.cls == "R":
            body.append(f"out[row] = {store(out.name, out.dtype)};")
        kept = [f"    {c_type(n.dtype)} k{n.name}[{b.R}] __attribute__((aligned(64)));" for n in b.nodes if n.kept]
        # Typed base pointers; the output never overlaps an input (the memory plan keeps live buffers
        # apart), which the passes over a row rely on anyway.
        bases = [f"    const {storage_type(p.shape.dtype)} *restrict const in{k} = "
                 f"(const {storage_type(p.shape.dtype)} *)p[{k + 1}];"
                 for k, p in enumerate(b.module.parameters) if any(n.param == k and n.cls != "raw" for n in b.nodes)]
        work = b.rows * max(b.R, 1) * cost  # element-steps, weighted like pointwise kernels
        code = "\n".join([
            "static void KNAME_rows(void *const *p, int64_t r0, int64_t r1) {",
            f"    {ot} *restrict const out = ({ot} *)p[0];",
            *bases,
            *kept,
            "    for (int64_t row = r0; row < r1; ++row) {",
            f"        {ot} *const o = out + row * {b.R};" if out.cls == "F" else "",
            *("        " + line for line in body),
            "    }",
            "}",
            "FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {",
            "    (void)d;",
            f"    int use = fg_threads(nt, {work}, {GRAIN});",
            f"    if (use > {b.rows}) use = {max(b.rows, 1)};",
            f"    if (use <= 1) {{ KNAME_rows(p, 0, {b.rows}); return; }}",
            "    #pragma omp parallel num_threads(use)",
            "    {",
            "        const int64_t k = omp_get_thread_num(), m = omp_get_num_threads();",
            f"        KNAME_rows(p, {b.rows} * k / m, {b.rows} * (k + 1) / m);",
            "    }",
            "}",
        ]) + "\n"
        return code


def _reduce_key(body: Module, axes: Sequence[int], *, fast_math: bool = True) -> tuple[Module, str]:
    return body, f"reduce axes={list(axes)} fast_math={fast_math}"


def _softmax_key(dtype: DType, lens: Sequence[int], *, axis: int = -1, log: bool = False, fast_math: bool = True,
                 strides: Sequence[int] | None = None) -> tuple[None, str]:
    return None, (f"softmax {dtype.value}{list(lens)} strides={None if strides is None else list(strides)} "
                  f"axis={axis} log={log} fast_math={fast_math}")


def _reduce_fields(body: Module, axes: Sequence[int], *, fast_math: bool = True) -> dict:
    params, (out,) = body.parameters, body.outputs
    return {"in_dtypes": tuple(p.shape.dtype for p in params), "out_dtype": out.shape.dtype,
            "in_shapes": tuple(p.shape for p in params), "out_lens": tuple(out.shape.lens)}


def _softmax_fields(dtype: DType, lens: Sequence[int], *, axis: int = -1, log: bool = False,
                    fast_math: bool = True, strides: Sequence[int] | None = None) -> dict:
    return {"in_dtypes": (dtype,), "out_dtype": dtype, "in_shapes": (Shape.of(dtype, lens, strides),),
            "out_lens": tuple(lens)}


@cached(_reduce_key, _reduce_fields)  # a compiled file keeps the kernel: loading it generates none (codegen/memo.py)
def reduce_kernel(body: Module, axes: Sequence[int], *, fast_math: bool = True) -> KernelSource:
    """A kernel for a fused_reduce body reducing `axes` (the instruction's attribute). Shapes and
    strides are baked in: p[1..] must be laid out as the body's parameters say, p[0] contiguous."""
    b = Body(body, axes)
    r = CRenderer(fast_math=fast_math, prefix="v")
    code = _Emitter(b, r, fast_math).emit()
    params = body.parameters
    return finish(code, r, "fg_reduce", in_dtypes=tuple(p.shape.dtype for p in params),
                  out_dtype=b.out.dtype, in_shapes=tuple(p.shape for p in params),
                  out_lens=tuple(body.outputs[0].shape.lens))


@cached(_softmax_key, _softmax_fields)
def softmax_kernel(dtype: DType, lens: Sequence[int], *, axis: int = -1, log: bool = False,
                   fast_math: bool = True, strides: Sequence[int] | None = None) -> KernelSource:
    """softmax (or log_softmax) of a `lens` tensor along `axis` (the last, or a trailing block of
    size-1 dims after it): the same generator on a one-op body. The input is laid out with `strides`
    (in elements; contiguous when None), the output contiguous."""
    from ....ir.op import make_op

    m = Module("softmax")
    x = m.add_parameter("x0", Shape.of(dtype, lens, strides))
    m.add_return(m.add(make_op("log_softmax" if log else "softmax", axis=axis % len(lens)), x))
    return reduce_kernel(m, (axis % len(lens),), fast_math=fast_math)

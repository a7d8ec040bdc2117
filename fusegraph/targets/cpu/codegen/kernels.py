"""C source of generated CPU kernels: fused pointwise chains (here), fused reductions (reduce.py).

Every kernel has one C signature, so one ctypes prototype calls them all:

    void NAME(void *const *p, const int64_t *d, int nt)

p[0] is the output (contiguous), p[1..] the inputs; nt the most threads it may use. A pointwise
kernel is generated for a rank, not for shapes: d holds the output lens, then each input's strides in
elements (0 where broadcast). A reduction kernel bakes its shapes in and ignores d.

A kernel forks OpenMP threads only when each thread gets enough work (`fg_threads`): a kernel on a
thousand elements runs on the calling thread.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ....ir.dtypes import DType
from ....ir.shape import Shape
from ....ops.scalar import Call, Expr
from .c_expr import EXPENSIVE, HALF, CodegenUnsupported, CRenderer, CValue, c_type, load, storage_type, store

# Elements of the cheapest work per thread before a kernel forks; divided by the per-element cost.
# Between kernels libgomp's workers sleep (openmp.py), and a fork waits for one to wake and get a
# core: at 32768, wav2vec2's six layer/group norms (21 us each on one thread) forked, and beside a
# busy-looping process a run took 0.44 ms at two threads against 0.14 at 131072 (bert, whisper,
# mobilevit the same either way). Kernels of more than ~50 us still split.
GRAIN = 131072


@dataclass(frozen=True)
class KernelSource:
    """One kernel's C definitions (without the shared prelude) and how to call it."""

    name: str
    code: str
    helpers: tuple[tuple[str, str], ...]  # (name, C definition) of shared helpers, in dependency order
    in_dtypes: tuple[DType, ...]
    out_dtype: DType
    ndim: int | None = None  # pointwise: the rank of the lens/strides passed in d
    in_shapes: tuple[Shape, ...] | None = None  # fixed-shape kernels: the input layouts baked in
    out_lens: tuple[int, ...] | None = None


def finish(template: str, renderer: CRenderer, prefix: str, **fields) -> KernelSource:
    """Name a kernel by the hash of its code and signature (identical kernels share one definition)."""
    helpers = tuple(renderer.helpers.items())
    name = _content_name(prefix, template, helpers, fields)
    return KernelSource(name=name, code=template.replace("KNAME", name), helpers=helpers, **fields)


def _content_name(prefix: str, template: str, helpers: tuple[tuple[str, str], ...], fields: dict) -> str:
    signature = repr(sorted((k, str(v)) for k, v in fields.items()))  # bool and uint8 share C types
    return f"{prefix}_{hashlib.sha256((template + repr(helpers) + signature).encode()).hexdigest()[:16]}"


_SIGNATURE_FIELDS = ("in_dtypes", "out_dtype", "ndim", "in_shapes", "out_lens")


def named_by_content(src: KernelSource) -> bool:
    """Whether `src` is named as `finish` names it: by the hash of its code, helpers and fields. A
    kernel read back from a file whose fields were edited (another kernel's shapes) fails this."""
    prefix, _, _ = src.name.rpartition("_")
    fields = {f: getattr(src, f) for f in _SIGNATURE_FIELDS if getattr(src, f) is not None}
    template = src.code.replace(src.name, "KNAME")
    return bool(prefix) and _content_name(prefix, template, src.helpers, fields) == src.name


def expr_cost(expr: Expr) -> int:
    """Rough per-element cost: 1, plus 4 per transcendental call."""
    if isinstance(expr, Call):
        return (4 if expr.fn in EXPENSIVE else 0) + sum(expr_cost(a) for a in expr.args)
    return 0


# -- layouts ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """A pointwise index space with dims merged where every input allows it (fewer, longer rows)."""

    lens: tuple[int, ...]
    strides: tuple[tuple[int, ...], ...]  # per input, in elements

    @property
    def inner(self) -> tuple[int | None, ...]:
        """Each input's inner stride class: 1 contiguous, 0 broadcast, None anything else."""
        return tuple(s[-1] if s[-1] in (0, 1) else None for s in self.strides)

    def dims(self) -> list[int]:
        return [*self.lens, *(x for s in self.strides for x in s)]

    def padded(self, ndim: int) -> Layout:
        if len(self.lens) > ndim:
            raise CodegenUnsupported(f"layout {self.lens} needs rank {len(self.lens)}, kernel has {ndim}")
        pad = ndim - len(self.lens)
        return Layout((1,) * pad + self.lens, tuple((0,) * pad + s for s in self.strides))


def coalesce(lens: Sequence[int], strides: Sequence[Sequence[int]]) -> Layout:
    """Drop size-1 dims and merge neighbours that are contiguous for every input (and the output)."""
    keep = [k for k, n in enumerate(lens) if n != 1]
    out_lens: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for k in keep:
        if out_lens and all(os[-1] == s[k] * lens[k] for os, s in zip(out_strides, strides)):
            out_lens[-1] *= lens[k]
            for os, s in zip(out_strides, strides):
                os[-1] = s[k]
        else:
            out_lens.append(int(lens[k]))
            for os, s in zip(out_strides, strides):
                os.append(int(s[k]))
    if not out_lens:
        return Layout((1,), tuple((0,) for _ in strides))
    return Layout(tuple(out_lens), tuple(tuple(s) for s in out_strides))


def plan_pointwise(in_shapes: Sequence[Shape], out_lens: Sequence[int]) -> Layout:
    """The coalesced layout of a pointwise op whose inputs (views, maybe broadcast) have `out_lens`."""
    return coalesce(out_lens, [s.strides for s in in_shapes])


# -- pointwise ---------------------------------------------------------------------------------------
def pointwise_kernel(expr: Expr, in_dtypes: Sequence[DType], out_dtype: DType, ndim: int,
                     inner: Sequence[int | None] | None = None, *, fast_math: bool = True,
                     half_in_float32: bool = True) -> KernelSource:
    """A kernel computing `expr` over a contiguous output of rank `ndim`.

    `inner` gives, per input, the inner stride its fast path assumes: 1 (contiguous), 0 (one value per
    row, loaded once) or None (any stride). The fast path is taken when the strides passed agree, so
    gcc vectorizes its inner loop; any other strides take the general (strided) loop.
    `half_in_float32`: float16/bfloat16 inputs enter the expression as float32, the result rounds once
    (PointwiseOp.half_in_float32, the reference's rule); otherwise every half operation rounds."""
    n, nd = len(in_dtypes), int(ndim)
    if nd < 1:
        raise CodegenUnsupported("pointwise kernels need rank >= 1 (pass a scalar as shape [1])")
    inner = tuple(inner) if inner is not None else (None,) * n
    if len(inner) != n or any(s not in (0, 1, None) for s in inner):
        raise CodegenUnsupported(f"inner strides {inner} do not fit {n} inputs")
    r = CRenderer(fast_math=fast_math, prefix="v")
    values = [DType.float32 if half_in_float32 and dt in HALF else dt for dt in in_dtypes]
    stmts, result = r.render(expr, [CValue(f"x{k}", dt) for k, dt in enumerate(values)], out_dtype)
    ot = storage_type(out_dtype)
    ts = [storage_type(dt) for dt in in_dtypes]
    body = "".join(f"            {s}\n" for s in stmts) + f"            o[j] = {store(result, out_dtype)};\n"

    def loads(fast: bool) -> str:
        out = []
        for k, (dt, vt) in enumerate(zip(in_dtypes, values)):
            if fast and inner[k] == 1:
                value = load(f"in{k}[o{k} + j]", dt)
            elif fast and inner[k] == 0:
                value = f"h{k}"
            else:
                value = load(f"in{k}[o{k} + j * s{k}]", dt)
            out.append(f"const {c_type(vt)} x{k} = {value};")
        return "".join(f"            {x}\n" for x in out)

    outer = range(nd - 1)
    lines = ["static void KNAME_tiles(void *const *p, const int64_t *d, int64_t t0, int64_t t1, "
             "int64_t chunk, int64_t nchunk) {",
             f"    {ot} *const out = ({ot} *)p[0];",
             f"    const int64_t inner = d[{nd - 1}];"]
    for k, t in enumerate(ts):
        lines.append(f"    const {t} *const in{k} = (const {t} *)p[{k + 1}];")
        lines.append(f"    const int64_t *const st{k} = d + {nd * (k + 1)}, s{k} = st{k}[{nd - 1}];")
    cond = " && ".join(f"s{k} == {s}" for k, s in enumerate(inner) if s is not None) or "1"
    lines.append(f"    const int fast = {cond};")
    lines.append("    int64_t row = t0 / nchunk;")
    lines += [f"    int64_t i{i};" for i in outer]
    if nd > 1:
        lines.append("    { int64_t rest = row;")
        lines += [f"      i{i} = rest % d[{i}]; rest /= d[{i}];" for i in reversed(outer)]
        lines.append("    }")
    for k in range(n):
        terms = " + ".join(f"i{i} * st{k}[{i}]" for i in outer) or "0"
        lines.append(f"    int64_t o{k} = {terms};")
    lines += [
        "    for (int64_t tile = t0; tile < t1;) {",
        "        const int64_t c0 = tile % nchunk;",
        "        const int64_t c1 = t1 - tile < nchunk - c0 ? c0 + (t1 - tile) : nchunk;",
        "        const int64_t j0 = c0 * chunk, j1 = c1 * chunk < inner ? c1 * chunk : inner;",
        f"        {ot} *const o = out + row * inner;",
        "        if (fast) {",
        *[f"        const {c_type(values[k])} h{k} = {load(f'in{k}[o{k}]', dt)};"
          for k, dt in enumerate(in_dtypes) if inner[k] == 0],
        "        #pragma GCC ivdep",
        "        for (int64_t j = j0; j < j1; ++j) {",
        loads(True) + body + "        }",
        "        } else {",
        "        for (int64_t j = j0; j < j1; ++j) {",
        loads(False) + body + "        }",
        "        }",
        "        tile += c1 - c0;",
        "        if (tile >= t1) break;",
        "        ++row;",
    ]
    # Advance the outer index (an odometer) and every input's row offset with it.
    for i in reversed(outer):
        lines.append(f"        if (++i{i} < d[{i}]) {{ {' '.join(f'o{k} += st{k}[{i}];' for k in range(n))} }}")
        lines.append(f"        else {{ i{i} = 0; {' '.join(f'o{k} -= st{k}[{i}] * (d[{i}] - 1);' for k in range(n))}")
    lines.append("        " + "}" * (nd - 1))
    lines.append("    }\n}\n")
    rows = " * ".join(f"d[{i}]" for i in outer) or "1"
    grain = max(1024, GRAIN // (1 + expr_cost(expr)))
    lines += [
        "FG_EXPORT void KNAME(void *const *p, const int64_t *d, int nt) {",
        f"    const int64_t rows = {rows}, inner = d[{nd - 1}], total = rows * inner;",
        "    if (total <= 0) return;",
        f"    const int use = fg_threads(nt, total, {grain});",
        "    int64_t chunk = inner, nchunk = 1;",
        "    if (use > 1 && rows < 4 * use) {  /* few rows: split them so every thread gets work */",
        "        chunk = (total + 4 * use - 1) / (4 * use);",
        "        chunk = (chunk + 63) / 64 * 64;",
        "        if (chunk > inner) chunk = inner;",
        "        nchunk = (inner + chunk - 1) / chunk;",
        "    }",
        "    const int64_t tiles = rows * nchunk;",
        "    if (use == 1) { KNAME_tiles(p, d, 0, tiles, chunk, nchunk); return; }",
        "    #pragma omp parallel num_threads(use)",
        "    {",
        "        const int64_t k = omp_get_thread_num(), m = omp_get_num_threads();",
        "        KNAME_tiles(p, d, tiles * k / m, tiles * (k + 1) / m, chunk, nchunk);",
        "    }",
        "}",
    ]
    return finish("\n".join(lines) + "\n", r, "fg_pointwise", in_dtypes=tuple(in_dtypes),
                  out_dtype=out_dtype, ndim=nd)


def pointwise_kernel_for(expr: Expr, in_shapes: Sequence[Shape], out_shape: Shape, *, fast_math: bool = True,
                         half_in_float32: bool = True) -> tuple[KernelSource, Layout]:
    """The kernel for one pointwise instruction (pass its op's expr and half_in_float32), with the
    layout (lens and strides) to call it with."""
    layout = plan_pointwise(in_shapes, out_shape.lens)
    src = pointwise_kernel(expr, [s.dtype for s in in_shapes], out_shape.dtype, len(layout.lens),
                           layout.inner, fast_math=fast_math, half_in_float32=half_in_float32)
    return src, layout

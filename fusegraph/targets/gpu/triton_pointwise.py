"""Triton source for pointwise kernels: one scalar body over an index space (layout.py).

The source depends on the body, the dtypes, the number of iteration dims and how each operand is
addressed ("flat": by the flat index; "strided": through the per-dim index; "scalar": one element).
Sizes and strides are run-time arguments, so one compiled kernel serves every shape of that form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...ir.dtypes import DType
from ...ops.scalar import Expr
from .triton_expr import TritonExprRenderer, compute_type, tl_type

HEADER = "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n\n"


@dataclasses.dataclass(frozen=True)
class PointwiseSpec:
    body: Expr
    in_types: tuple[DType, ...]
    out_type: DType
    ndim: int
    modes: tuple[str, ...]  # per operand, output first: "flat" | "strided" | "scalar"
    wide_index: bool = False  # int64 index arithmetic (more than 2**31 elements)

    def key(self) -> str:
        return "|".join([str(self.body), ",".join(t.value for t in self.in_types), self.out_type.value,
                         str(self.ndim), ",".join(self.modes), str(self.wide_index)])


def operand_mode(flat: bool, strides: Sequence[int]) -> str:
    if flat:
        return "flat"
    return "scalar" if all(s == 0 for s in strides) else "strided"


def index_lines(ndim: int, indent: str, offs: str = "offs") -> list[str]:
    """Per-dim indices i0..i{n-1} from a flat index over sizes s1..s{n-1} (s0 is implied)."""
    if ndim == 1:
        return [f"{indent}i0 = {offs}"]
    lines = [f"{indent}rem = {offs}"]
    for d in range(ndim - 1, 0, -1):
        lines.append(f"{indent}i{d} = rem % s{d}")
        lines.append(f"{indent}rem = rem // s{d}")
    lines.append(f"{indent}i0 = rem")
    return lines


def address(k: int, mode: str, ndim: int) -> str:
    """The element offset of operand k (0 = output) for the current block."""
    if mode == "flat":
        return "offs"
    if mode == "scalar":
        return "0"
    return " + ".join(f"i{d} * st{k}_{d}" for d in range(ndim))


def pointwise_source(spec: PointwiseSpec, name: str) -> str:
    n_in = len(spec.in_types)
    strided = [k for k, m in enumerate(spec.modes) if m == "strided"]
    params = ["out_ptr"] + [f"in{i}_ptr" for i in range(n_in)] + ["numel"]
    params += [f"s{d}" for d in range(1, spec.ndim)] if strided else []
    params += [f"st{k}_{d}" for k in strided for d in range(spec.ndim)]
    lines = [f"@triton.jit\ndef {name}({', '.join(params)}, BLOCK: tl.constexpr):"]
    ind = "    "
    pid = "tl.program_id(0).to(tl.int64)" if spec.wide_index else "tl.program_id(0)"
    lines.append(f"{ind}offs = {pid} * BLOCK + tl.arange(0, BLOCK)")
    lines.append(f"{ind}mask = offs < numel")
    if strided:
        lines += index_lines(spec.ndim, ind)
    names = []
    for i, dt in enumerate(spec.in_types):
        mode = spec.modes[i + 1]
        ct = compute_type(dt)
        if mode == "scalar":
            load = f"tl.load(in{i}_ptr)"
        else:
            load = f"tl.load(in{i}_ptr + {address(i + 1, mode, spec.ndim)}, mask=mask)"
        if ct != dt:
            load += f".to({tl_type(ct)})"
        lines.append(f"{ind}x{i} = {load}")
        names.append(f"x{i}")
    renderer = TritonExprRenderer(lines, ind)
    result, rtype = renderer.emit(spec.body, names, [compute_type(t) for t in spec.in_types])
    if not (result in names or result.startswith(renderer.prefix)):  # a constant body
        out = f"tl.full([BLOCK], {result}, {tl_type(compute_type(rtype))})"
    elif all(m == "scalar" for m in spec.modes[1:]):  # only one-element inputs: widen to the block
        out = f"tl.broadcast_to({result}, [BLOCK])"
    else:
        out = result
    if spec.out_type == DType.bool:
        store = f"(({out}) != 0)"
    else:
        store = f"({out}).to({tl_type(spec.out_type)})"
    lines.append(f"{ind}tl.store(out_ptr + {address(0, spec.modes[0], spec.ndim)}, {store}, mask=mask)")
    return "\n".join(lines) + "\n"

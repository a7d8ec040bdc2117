"""A Triton kernel for Resize: the reference's taps (lower_resize), summed in its order, in one pass.

Each output element is a weighted sum of input elements: along each resized axis, in the plan's
order, the taps idx[o, k] with float32 weights w[o, k] (linear: 2, cubic: 4) summed as
((t0 + t1) + t2)..., axis by axis, in float32 as the reference's taps are; a nearest axis is one tap
of weight one (an exact pick). The result is saturated to the input type as the reference's is.

Step by step (index_select, multiply, add per tap and axis, in float32) those taps took 3-4 kernels
per axis; torch's interpolate is one, but its NCHW form walks every channel in each thread
(SegFormer-B0's decoder upsampling 8x256x128x128 three times took 2.5 ms on the H200, issue 23), it
weighs clamped taps by zero (fixed up afterwards, ~10 more kernels a resize) and it returns a new
tensor. This kernel iterates the output in its memory order and addresses every operand through its
strides, so it reads a channels-last view of a matmul's rows (no copy before it) and writes straight
into a concat's slice (no copy after it).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...ir.dtypes import DType
from .kernels import Launcher, load_kernel, source_hash
from .layout import memory_order
from .triton_expr import tl_type
from .triton_pointwise import HEADER

IND = "    "
MAX_TAPS = 64  # loads per output; wider (antialiased downscaling) keeps the step-by-step taps
LARGEST = {DType.float16: 65504.0, DType.bfloat16: 3.3895313892515355e38}  # finite limits of the narrow types


@dataclasses.dataclass(frozen=True)
class ResizeSpec:
    dtype: DType                             # input and result element type (a float type)
    axes: tuple[tuple[int, int, bool], ...]  # per resized axis in the reference's order: (axis, taps, weighted)
    order: tuple[int, ...]                   # output dims slowest to fastest in memory
    store: DType | None = None               # the float type the rounded result is stored as, if not dtype

    def key(self) -> str:
        return repr(dataclasses.astuple(self))


def resize_source(spec: ResizeSpec, name: str) -> str:
    rank = len(spec.order)
    resized = [a for a, _, _ in spec.axes]
    params = (["x_ptr", "out_ptr", "numel"] + [f"idx{a}_ptr" for a in resized]
              + [f"w{a}_ptr" for a, _, weighted in spec.axes if weighted]
              + [f"o{d}" for d in range(rank)] + [f"xs{d}" for d in range(rank)] + [f"os{d}" for d in range(rank)])
    lines = [f"@triton.jit\ndef {name}({', '.join(params)}, BLOCK: tl.constexpr):",
             f"{IND}offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", f"{IND}mask = offs < numel",
             f"{IND}rem = offs"]
    for d in reversed(spec.order[1:]):
        lines += [f"{IND}i{d} = rem % o{d}", f"{IND}rem = rem // o{d}"]
    lines.append(f"{IND}i{spec.order[0]} = rem")
    kept = [f"i{d} * xs{d}" for d in range(rank) if d not in resized]
    lines.append(f"{IND}base = {' + '.join(kept) if kept else '0'}")
    for a, taps, weighted in spec.axes:  # each axis's tap offsets (input elements) and weights
        for k in range(taps):
            lines.append(f"{IND}s{a}_{k} = tl.load(idx{a}_ptr + i{a} * {taps} + {k}, mask=mask, other=0) * xs{a}")
            if weighted:
                lines.append(f"{IND}w{a}_{k} = tl.load(w{a}_ptr + i{a} * {taps} + {k}, mask=mask, other=0.0)")
    any_weighted = any(weighted for _, _, weighted in spec.axes)
    acc = "tl.float32" if any_weighted else tl_type(spec.dtype)
    lines.append(f"{IND}y = {_sum(spec.axes, len(spec.axes), {}, acc)}")
    if any_weighted and spec.dtype != DType.float32:  # saturated to the type, NaN kept (the reference's clamp)
        lo, hi = _finite_range(spec.dtype)
        nan = "propagate_nan=tl.PropagateNan.ALL"
        lines.append(f"{IND}y = tl.minimum(tl.maximum(y, {lo}, {nan}), {hi}, {nan})")
    y = f"y.to({tl_type(spec.dtype)})" + (f".to({tl_type(spec.store)})" if spec.store else "")
    lines.append(f"{IND}tl.store(out_ptr + {' + '.join(f'i{d} * os{d}' for d in range(rank))}, {y}, mask=mask)")
    return HEADER + "\n".join(lines) + "\n"


def _sum(axes, level: int, picked: dict[int, int], acc: str) -> str:
    """The expression of the sum over the first `level` axes' taps, the later axes' taps `picked`:
    the last axis outermost, as the reference applies the first axis first."""
    if level == 0:
        addr = " + ".join(["base"] + [f"s{a}_{k}" for a, k in picked.items()])
        return f"tl.load(x_ptr + {addr}, mask=mask, other=0).to({acc})"
    a, taps, weighted = axes[level - 1]
    terms = []
    for k in range(taps):
        inner = _sum(axes, level - 1, {**picked, a: k}, acc)
        terms.append(f"({inner}) * w{a}_{k}" if weighted else inner)
    out = terms[0]
    for t in terms[1:]:
        out = f"({out} + {t})"
    return out


def _finite_range(dtype: DType) -> tuple[str, str]:
    big = LARGEST[dtype]
    return repr(-big), repr(big)


def fits(dtype: DType, taps_per_axis: list[int], in_elements: int, out_elements: int) -> bool:
    """Whether the kernel takes a resize: a float type of 16/32 bits, few loads per output, 32-bit offsets."""
    return (dtype in (DType.float16, DType.bfloat16, DType.float32) and math.prod(taps_per_axis) <= MAX_TAPS
            and max(in_elements, out_elements) < 2**31)


class ResizeLauncher(Launcher):
    """Launches one resize step's kernel, its source chosen from the output's layout (on the first
    call, made while compiling, and whenever the strides change)."""

    def __init__(self, dtype: DType, axes: list[tuple[int, Any, Any]], out_dtype: DType | None = None):
        self.dtype = dtype
        self.store = out_dtype if out_dtype not in (None, dtype) else None  # a conversion folded in
        self.axes = axes  # (axis, idx [n_out, taps] int32, w [n_out, taps] float32 or None)
        self.sources: dict[str, str] = {}

    def _configure(self, out: Any, x: Any) -> None:
        order = tuple(memory_order(tuple(out.shape), out.stride()))
        spec = ResizeSpec(self.dtype, tuple((a, idx.shape[1], w is not None) for a, idx, w in self.axes), order,
                          self.store)
        name = "resize_" + source_hash(spec.key())
        source = resize_source(spec, name)
        self.sources[name] = source
        self.numel = numel = out.numel()
        block = 1024 if numel >= 1024 * 264 else 256
        self.launch = load_kernel(source, name)[(max(1, -(-numel // block)),)]
        self.meta = {"BLOCK": block, "num_warps": 4}
        self.tables = [idx for _, idx, _ in self.axes] + [w for _, _, w in self.axes if w is not None]
        self.sizes = [*out.shape, *x.stride(), *out.stride()]

    def __call__(self, out: Any, x: Any) -> None:
        self._configured_for((out.stride(), x.stride(), tuple(out.shape), tuple(x.shape)), out, x)
        if self.numel:
            self.launch(x, out, self.numel, *self.tables, *self.sizes, **self.meta)

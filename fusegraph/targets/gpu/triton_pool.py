"""Triton pooling kernels: max and average windows (and global pooling, as one window over the whole
plane) over 1 to 3 spatial dims, in any layout.

Each program computes BLOCK outputs. The flat output index is split in the output's memory order
(channels fastest for channels-last buffers), so loads and stores are coalesced in the layout cuDNN
uses; every operand is addressed through its own strides, so the kernel also writes straight into a
concat's slice. Taps out of range are skipped (max) or count zero (average: divided by the
reference's per-window counts). Integer max pooling runs in its own type. Window shape, strides,
pads and dilations are baked into the source; sizes and strides are run-time arguments.
Accumulation is in float32 (float64 for float64).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ...ir.dtypes import DType
from .kernels import Launcher, load_kernel, source_hash
from .layout import memory_order
from .triton_expr import compute_type, tl_type
from .triton_pointwise import HEADER

UNROLL_TAPS = 64  # windows up to this many taps are unrolled (tl.static_range); larger ones loop


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    mode: str                        # "max" | "average"
    dtype: DType                     # input and output element type (a float type; an integer for max)
    lengths: tuple[int, ...]         # window, per spatial dim
    strides: tuple[int, ...]
    begins: tuple[int, ...]          # pads before
    dilations: tuple[int, ...]
    order: tuple[int, ...]           # output dims (N, C, spatial...) slowest to fastest in memory

    def key(self) -> str:
        return repr(dataclasses.astuple(self))


def pool_source(spec: PoolSpec, name: str) -> str:
    nsp = len(spec.lengths)
    rank = nsp + 2
    acc_t = tl_type(compute_type(spec.dtype))
    params = (["x_ptr", "out_ptr", "cnt_ptr", "numel"] + [f"o{d}" for d in range(rank)]
              + [f"n{k}" for k in range(nsp)] + [f"xs{d}" for d in range(rank)] + [f"os{d}" for d in range(rank)])
    ind = "    "
    lines = [f"@triton.jit\ndef {name}({', '.join(params)}, BLOCK: tl.constexpr):",
             f"{ind}offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
             f"{ind}mask = offs < numel",
             f"{ind}rem = offs"]
    for d in reversed(spec.order[1:]):
        lines += [f"{ind}i{d} = rem % o{d}", f"{ind}rem = rem // o{d}"]
    lines.append(f"{ind}i{spec.order[0]} = rem")
    is_max = spec.mode == "max"
    if not spec.dtype.is_float:  # integer max pooling: exact in the type itself
        init = str(int(np.iinfo(spec.dtype.np).min))
    else:
        init = "float('-inf')" if is_max else "0.0"
    lines += [f"{ind}acc = tl.full([BLOCK], {init}, {acc_t})", f"{ind}base = i0 * xs0 + i1 * xs1"]
    loop = "tl.static_range" if math.prod(spec.lengths) <= UNROLL_TAPS else "range"
    cond = "mask"
    for k in range(nsp):
        ind_k = ind * (k + 1)
        s, b, dl = spec.strides[k], spec.begins[k], spec.dilations[k]
        lines += [f"{ind_k}for k{k} in {loop}({spec.lengths[k]}):",
                  f"{ind_k}{ind}p{k} = i{k + 2} * {s} - {b} + k{k} * {dl}",
                  f"{ind_k}{ind}ok{k} = {cond} & (p{k} >= 0) & (p{k} < n{k})"]
        cond = f"ok{k}"
    inner = ind * (nsp + 1)
    addr = " + ".join(["base"] + [f"p{k} * xs{k + 2}" for k in range(nsp)])
    lines.append(f"{inner}v = tl.load(x_ptr + {addr}, mask={cond}, other={init}).to({acc_t})")
    if is_max and spec.dtype.is_float:  # NaN propagates, as numpy's maximum does
        lines.append(f"{inner}acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)")
    elif is_max:
        lines.append(f"{inner}acc = tl.maximum(acc, v)")
    else:
        lines.append(f"{inner}acc += v")
    if not is_max:
        flat = "i2"
        for k in range(1, nsp):
            flat = f"({flat}) * o{k + 2} + i{k + 2}"
        lines.append(f"{ind}acc = acc / tl.load(cnt_ptr + {flat}, mask=mask, other=1.0).to({acc_t})")
    out_addr = " + ".join(f"i{d} * os{d}" for d in range(rank))
    lines.append(f"{ind}tl.store(out_ptr + {out_addr}, acc.to({tl_type(spec.dtype)}), mask=mask)")
    return HEADER + "\n".join(lines) + "\n"


class PoolLauncher(Launcher):
    """Launches the pooling kernel of one step; the source is chosen from the output's layout on the
    first call (made while compiling, before graph capture) and whenever the strides change."""

    def __init__(self, mode: str, dtype: DType, lengths, strides, begins, dilations, counts: Any):
        self.mode, self.dtype = mode, dtype
        self.window = tuple(map(tuple, (lengths, strides, begins, dilations)))
        self.counts = counts  # per output window divisor (average), a float32 device tensor
        self.sources: dict[str, str] = {}

    def _configure(self, out: Any, x: Any) -> None:
        order = tuple(memory_order(tuple(out.shape), out.stride()))
        spec = PoolSpec(self.mode, self.dtype, *self.window, order)
        name = "pool_" + source_hash(spec.key())
        source = pool_source(spec, name)
        self.sources[name] = source
        fn = load_kernel(source, name)
        numel = out.numel()
        block = 256 if numel >= 256 * 264 else 128 if numel >= 128 * 132 else 64
        self.numel = numel
        self.launch = fn[(-(-numel // block),)]
        self.args = [*out.shape, *x.shape[2:], *x.stride(), *out.stride()]
        self.meta = {"BLOCK": block, "num_warps": 4 if block >= 256 else 2}

    def __call__(self, out: Any, x: Any) -> None:
        self._configured_for((out.stride(), x.stride(), tuple(out.shape), tuple(x.shape)), out, x)
        if self.numel:
            self.launch(x, out, self.counts, self.numel, *self.args, **self.meta)

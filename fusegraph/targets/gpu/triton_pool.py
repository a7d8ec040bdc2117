"""Triton pooling kernels: max and average windows (and global pooling, as one window over the whole
plane) over 1 to 3 spatial dims, in any layout; and depthwise convolutions, the windows weighted per
channel (one input channel a group, one output channel a group).

The flat output index is split in the output's memory order (channels fastest for channels-last
buffers), so loads and stores are coalesced in the layout cuDNN uses; every operand is addressed
through its own strides, so the kernel also writes straight into a concat's slice. Taps out of range
are skipped (max) or count zero (average: divided by the reference's per-window counts). Integer max
pooling runs in its own type. Window shape, strides, pads and dilations are baked into the source;
sizes and strides are run-time arguments. Accumulation is in float32 (float64 for float64).

A depthwise convolution is a window summed with its channel's weights (the small form, or over
channels-last operands in 2-D the tiled one of triton_depthwise.py): cuDNN built a plan for each new
shape on the thread that first called it, 0.2-1.3 s of the compile each (5.4 s for
MobileNetV3-Large's 12 at batch 32 on the H200, issue 23), and kept it for that thread alone; a
kernel here compiles with the others, in parallel. Which ones run here:
lower_nn.triton_depthwise_rows.

Two forms, by window size:
* small windows (up to UNROLL_TAPS taps): each program computes BLOCK outputs, looping over the taps
  (unrolled) — a window is a few loads per output;
* large windows (a global pool over 112x112 is 12544 taps): a pool is then a reduction, and one
  thread walking a window serially runs at a sliver of the memory bandwidth (EfficientNet-B0's first
  squeeze-excite pool took 2.4 ms on an H200, issue 23). The taps are flattened and read RBLOCK at a
  time in [BLOCK, RBLOCK] tiles, and split over a second grid axis when the outputs alone would not
  fill the GPU: each split writes a partial result (compute type) to a scratch buffer and a second
  kernel combines the splits, divides and stores.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ...ir.dtypes import DType
from .kernels import Launcher, load_kernel, source_hash
from .layout import memory_order
from .triton_depthwise import ROWS, tiled_grid, tiled_source
from .triton_expr import compute_type, tl_type
from .triton_pointwise import HEADER

UNROLL_TAPS = 64     # windows up to this many taps are unrolled (tl.static_range) in the small form
WIDE_TAPS = 256      # windows past this many taps take the tiled, split form
TILE = 2048          # elements per [BLOCK, RBLOCK] tile of the split form
TARGET_PROGRAMS = 512  # programs the split form aims for (a few per SM)
MIN_SPLIT_TAPS = 256   # taps each split reads at least (fewer: the partials cost more than they save)
IND = "    "


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    mode: str                        # "max" | "average" | "depthwise" (a weighted sum: the weights' operand)
    dtype: DType                     # input and output element type (a float type; an integer for max)
    lengths: tuple[int, ...]         # window, per spatial dim
    strides: tuple[int, ...]
    begins: tuple[int, ...]          # pads before
    dilations: tuple[int, ...]
    order: tuple[int, ...]           # output dims (N, C, spatial...) slowest to fastest in memory
    tiled: bool = False              # a 2-D depthwise convolution over channels-last operands: tiles (triton_depthwise.py)
    rows: int = 1                    # (tiled) output rows a program

    def key(self) -> str:
        return repr(dataclasses.astuple(self))

    @property
    def wide(self) -> bool:  # (a depthwise convolution's taps are weighted: the loop form's, at any size)
        return math.prod(self.lengths) > WIDE_TAPS and self.mode != "depthwise"

    @property
    def init(self) -> str:
        if not self.dtype.is_float:  # integer max pooling: exact in the type itself
            return str(int(np.iinfo(self.dtype.np).min))
        return "float('-inf')" if self.mode == "max" else "0.0"


def _combine(spec: PoolSpec, a: str, b: str) -> str:
    if spec.mode != "max":
        return f"{a} + {b}"
    if spec.dtype.is_float:  # NaN propagates, as numpy's maximum does
        return f"tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"
    return f"tl.maximum({a}, {b})"


def _split_output(spec: PoolSpec) -> list[str]:
    """`offs` (flat output index in memory order) -> one index per output dim, i0 .. i{rank-1}."""
    lines = [f"{IND}offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", f"{IND}mask = offs < numel",
             f"{IND}rem = offs"]
    for d in reversed(spec.order[1:]):
        lines += [f"{IND}i{d} = rem % o{d}", f"{IND}rem = rem // o{d}"]
    return lines + [f"{IND}i{spec.order[0]} = rem"]


def _finish(spec: PoolSpec, acc: str) -> list[str]:
    """Divide by the window counts (average) and store `acc` ([BLOCK]) through the output strides."""
    acc_t = tl_type(compute_type(spec.dtype))
    lines = []
    if spec.mode == "average":
        flat = "i2"
        for k in range(1, len(spec.lengths)):
            flat = f"({flat}) * o{k + 2} + i{k + 2}"
        lines.append(f"{IND}{acc} = {acc} / tl.load(cnt_ptr + {flat}, mask=mask, other=1.0).to({acc_t})")
    out_addr = " + ".join(f"i{d} * os{d}" for d in range(len(spec.order)))
    return lines + [f"{IND}tl.store(out_ptr + {out_addr}, {acc}.to({tl_type(spec.dtype)}), mask=mask)"]


def _params(spec: PoolSpec, extra: list[str]) -> list[str]:
    rank, nsp = len(spec.order), len(spec.lengths)
    return (["x_ptr", "out_ptr", "cnt_ptr", "numel"] + extra + [f"o{d}" for d in range(rank)]
            + [f"n{k}" for k in range(nsp)] + [f"xs{d}" for d in range(rank)] + [f"os{d}" for d in range(rank)])


def pool_source(spec: PoolSpec, name: str) -> str:
    """The kernel(s) of `spec`: `name` (and `name`_combine for the split form)."""
    if spec.tiled:
        return tiled_source(spec, name, _params(spec, _weights(spec)), math.prod(spec.lengths) <= UNROLL_TAPS)
    return wide_pool_source(spec, name) if spec.wide else _loop_pool_source(spec, name)


def _weights(spec: PoolSpec) -> list[str]:
    """A depthwise convolution's weights operand ([C, 1, k...]: its pointer and strides, dim 1 skipped)."""
    rank = len(spec.order)
    return ["w_ptr", *[f"ws{d}" for d in range(rank) if d != 1]] if spec.mode == "depthwise" else []


def _loop_pool_source(spec: PoolSpec, name: str) -> str:
    nsp = len(spec.lengths)
    acc_t = tl_type(compute_type(spec.dtype))
    lines = [f"@triton.jit\ndef {name}({', '.join(_params(spec, _weights(spec)))}, BLOCK: tl.constexpr):",
             *_split_output(spec),
             f"{IND}acc = tl.full([BLOCK], {spec.init}, {acc_t})", f"{IND}base = i0 * xs0 + i1 * xs1"]
    loop = "tl.static_range" if math.prod(spec.lengths) <= UNROLL_TAPS else "range"
    cond = "mask"
    for k in range(nsp):
        ind_k = IND * (k + 1)
        s, b, dl = spec.strides[k], spec.begins[k], spec.dilations[k]
        lines += [f"{ind_k}for k{k} in {loop}({spec.lengths[k]}):",
                  f"{ind_k}{IND}p{k} = i{k + 2} * {s} - {b} + k{k} * {dl}",
                  f"{ind_k}{IND}ok{k} = {cond} & (p{k} >= 0) & (p{k} < n{k})"]
        cond = f"ok{k}"
    inner = IND * (nsp + 1)
    addr = " + ".join(["base"] + [f"p{k} * xs{k + 2}" for k in range(nsp)])
    lines.append(f"{inner}v = tl.load(x_ptr + {addr}, mask={cond}, other={spec.init}).to({acc_t})")
    if spec.mode == "depthwise":  # the tap's weight for the output's channel
        w_addr = " + ".join(["i1 * ws0"] + [f"k{k} * ws{k + 2}" for k in range(nsp)])
        lines.append(f"{inner}v = v * tl.load(w_ptr + {w_addr}, mask=mask, other=0.0).to({acc_t})")
    lines.append(f"{inner}acc = {_combine(spec, 'acc', 'v')}")
    return HEADER + "\n".join(lines + _finish(spec, "acc")) + "\n"


def wide_pool_source(spec: PoolSpec, name: str) -> str:
    """The split form: `name` reduces taps [split * CHUNK, (split + 1) * CHUNK) of BLOCK outputs in
    [BLOCK, RBLOCK] tiles (and finishes them itself when DIRECT, one split); `name`_combine reduces
    the splits' partials."""
    nsp = len(spec.lengths)
    acc_t = tl_type(compute_type(spec.dtype))
    taps = math.prod(spec.lengths)
    head = _params(spec, ["part_ptr"])
    lines = [f"@triton.jit\ndef _{name}_tile(a, b):", f"{IND}return {_combine(spec, 'a', 'b')}", "", "",
             f"@triton.jit\ndef {name}({', '.join(head)}, BLOCK: tl.constexpr, RBLOCK: tl.constexpr,"
             " CHUNK: tl.constexpr, DIRECT: tl.constexpr):",
             *_split_output(spec),
             f"{IND}split = tl.program_id(1)",
             f"{IND}base = (i0 * xs0 + i1 * xs1)[:, None]",
             f"{IND}acc = tl.full([BLOCK, RBLOCK], {spec.init}, {acc_t})",
             f"{IND}for r0 in range(0, CHUNK, RBLOCK):  # whole tiles (wide_grid)",
             f"{IND * 2}r = split * CHUNK + r0 + tl.arange(0, RBLOCK)",
             f"{IND * 2}ok = mask[:, None] & (r < {taps})[None, :]",
             f"{IND * 2}tap = r"]  # not `rem`: the output's index split used that name for a [BLOCK] value
    addr = ["base"]
    for k in reversed(range(nsp)):
        s, b, dl = spec.strides[k], spec.begins[k], spec.dilations[k]
        if k:
            lines += [f"{IND * 2}k{k} = tap % {spec.lengths[k]}", f"{IND * 2}tap = tap // {spec.lengths[k]}"]
        else:
            lines.append(f"{IND * 2}k{k} = tap")
        lines += [f"{IND * 2}p{k} = i{k + 2}[:, None] * {s} - {b} + k{k}[None, :] * {dl}",
                  f"{IND * 2}ok = ok & (p{k} >= 0) & (p{k} < n{k})"]
        addr.append(f"p{k} * xs{k + 2}")
    lines += [f"{IND * 2}v = tl.load(x_ptr + {' + '.join(addr)}, mask=ok, other={spec.init}).to({acc_t})",
              f"{IND * 2}acc = {_combine(spec, 'acc', 'v')}",
              f"{IND}res = tl.reduce(acc, 1, _{name}_tile)",
              f"{IND}if DIRECT:",
              *[IND + line for line in _finish(spec, "res")],
              f"{IND}else:",
              f"{IND * 2}tl.store(part_ptr + split * numel + offs, res, mask=mask)",
              "", "",
              f"@triton.jit\ndef {name}_combine({', '.join(_params(spec, ['part_ptr']))},"
              " BLOCK: tl.constexpr, SPLITS: tl.constexpr):",
              *_split_output(spec),
              f"{IND}res = tl.load(part_ptr + offs, mask=mask, other={spec.init})",
              f"{IND}for s in range(1, SPLITS):",
              f"{IND * 2}v = tl.load(part_ptr + s * numel + offs, mask=mask, other={spec.init})",
              f"{IND * 2}res = {_combine(spec, 'res', 'v')}",
              *_finish(spec, "res")]
    return HEADER + "\n".join(lines) + "\n"


def wide_grid(numel: int, taps: int) -> tuple[int, int, int, int]:
    """(BLOCK, RBLOCK, splits, taps per split) of the split form for `numel` outputs of `taps` taps."""
    block = min(64, 1 << max(0, (numel - 1).bit_length()))
    rblock = min(TILE // block, 1 << (taps - 1).bit_length())
    programs = -(-numel // block)
    splits = max(1, min(-(-TARGET_PROGRAMS // programs), taps // MIN_SPLIT_TAPS))
    chunk = -(-taps // splits)
    chunk = -(-chunk // rblock) * rblock  # whole tiles per split: only the last split is ragged
    return block, rblock, -(-taps // chunk), chunk


class PoolLauncher(Launcher):
    """Launches the pooling kernel(s) of one step; the source is chosen from the output's layout on
    the first call (made while compiling, before graph capture) and whenever the strides change. The
    split form's partials live in the executable's shared scratch buffer (`scratch`: lens, torch
    dtype -> a temporary, asked for on every run), dead once the step ends. A depthwise convolution's
    launcher is called with the weights too."""

    def __init__(self, mode: str, dtype: DType, lengths, strides, begins, dilations, counts: Any,
                 scratch: Any, rows: int = ROWS):
        self.mode, self.dtype, self.rows = mode, dtype, rows
        self.window = tuple(map(tuple, (lengths, strides, begins, dilations)))
        self.counts = counts  # per output window divisor (average), a float32 device tensor
        self.scratch = scratch
        self.sources: dict[str, str] = {}
        self.calls: list[tuple[Any, dict]] = []  # (kernel, meta)
        self.part_len = 0  # elements of partials the split form needs (0: none)

    def _configure(self, out: Any, x: Any, w: Any) -> None:
        order = tuple(memory_order(tuple(out.shape), out.stride()))
        tiled = (self.mode == "depthwise" and out.dim() == 4 and out.stride(1) == 1 and x.stride(1) == 1)
        spec = PoolSpec(self.mode, self.dtype, *self.window, order, tiled, self.rows if tiled else 1)
        name = "pool_" + source_hash(spec.key())
        source = pool_source(spec, name)
        self.sources[name] = source
        fn = load_kernel(source, name)
        self.numel = numel = out.numel()
        self.sizes = [*out.shape, *x.shape[2:], *x.stride(), *out.stride()]
        self.weight_strides = [st for d, st in enumerate(w.stride()) if d != 1] if w is not None else []
        self.part_len = 0
        if not numel:
            self.calls = []
        elif tiled:
            grid, meta = tiled_grid(tuple(out.shape), self.rows)
            self.calls = [(fn[grid], meta)]
        elif not spec.wide:
            block = 256 if numel >= 256 * 264 else 128 if numel >= 128 * 132 else 64
            self.calls = [(fn[(-(-numel // block),)], {"BLOCK": block, "num_warps": 4 if block >= 256 else 2})]
        else:
            block, rblock, splits, chunk = wide_grid(numel, math.prod(spec.lengths))
            self.part_len = splits * numel if splits > 1 else 1
            meta = {"BLOCK": block, "RBLOCK": rblock, "CHUNK": chunk, "DIRECT": splits == 1, "num_warps": 4}
            self.calls = [(fn[(-(-numel // block), splits)], meta)]
            if splits > 1:
                fin = load_kernel(source, name + "_combine")
                self.calls.append((fin[(-(-numel // 256),)], {"BLOCK": 256, "SPLITS": splits, "num_warps": 4}))

    def __call__(self, out: Any, x: Any, w: Any = None) -> None:
        from .device import torch_dtype

        strides = None if w is None else w.stride()
        self._configured_for((out.stride(), x.stride(), tuple(out.shape), tuple(x.shape), strides), out, x, w)
        # the operands are this call's (arena buffers move); partials in the compute type
        part = [self.scratch((self.part_len,), torch_dtype(compute_type(self.dtype)))] if self.part_len else []
        weights = [w, *self.weight_strides] if w is not None else []
        for launch, meta in self.calls:
            launch(x, out, self.counts, self.numel, *part, *weights, *self.sizes, **meta)

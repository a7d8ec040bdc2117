"""Movement ONNX ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, DepthToSpace, SpaceToDepth,
Concat, Split, Slice, CenterCropPad, Expand, Tile, Pad.

Values that decide output shapes (reshape dims, axes, slice bounds, split sizes, repeats, pads,
expand shapes) are read as constants and become op attributes, resolved against the input dims
here, so ops see explicit, in-range values. When such a value is known only at run time, or the
input dims it depends on are dynamic, the converter uses the op's `*_dynamic` variant instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...errors import ShapeError, ValueDependentError
from ...ir.dtypes import DType
from ...ir.module import Instruction
from ...ops.layout import PAD_MODES, cuts_past_the_data
from ...ops.movement import resolve_reshape_dims, slice_bounds
from ..registry import converter
from .shape_values import reshape_dims_of

INT64_MAX = np.iinfo(np.int64).max


# -- helpers ------------------------------------------------------------------------------------------
def arg(args: list, k: int) -> Instruction | None:
    """The k-th input, or None where the node leaves it out."""
    return args[k] if len(args) > k else None


def axes_of(ctx, axes: Sequence[int], rank: int) -> list[int]:
    """ONNX axes as distinct non-negative axes, or a ParseError naming the node."""
    out = [int(a) + rank if a < 0 else int(a) for a in axes]
    if len(set(out)) != len(out) or any(not 0 <= a < rank for a in out):
        raise ctx.error(f"axes {list(axes)} are out of range or repeated for rank {rank}")
    return out


def int64_vector(ctx, ins: Instruction) -> Instruction:
    """A run-time shape value as the int64 vector the `*_dynamic` ops take."""
    return ctx.convert(ins, DType.int64)


def _vec(ctx, values: Sequence[int]) -> Instruction:
    return ctx.literal(np.asarray(values, np.int64).reshape(-1))


def _static(x: Instruction) -> bool:
    return not x.shape.is_dynamic


def _contiguous(ctx, x: Instruction) -> Instruction:
    return x if x.shape.standard else ctx.add("contiguous", x)


def reshape_static(ctx, x: Instruction, lens: Sequence[int]) -> Instruction:
    """A static reshape; a view needs row-major input, so other layouts are copied first."""
    if tuple(lens) == x.shape.lens:
        return x
    return ctx.reshape(_contiguous(ctx, x), lens)


def slice_onnx(ctx, x: Instruction, axes, starts, ends, steps) -> Instruction:
    """x sliced with ONNX semantics (axes non-negative): a `slice` when the sliced dims are known,
    without the axes it leaves whole, else `slice_dynamic`."""
    dims = x.shape.dims
    if any(st == 0 for st in steps):
        raise ctx.error("slice steps cannot be 0")
    # x[0:INT_MAX] on a dynamic dim keeps it whole (exporters write it for `x[:, 1:]`): not a slice of it
    whole = [k for k, a in enumerate(axes) if not dims[a].is_fixed and int(starts[k]) == 0 and int(steps[k]) == 1
             and dims[a].max is not None and int(ends[k]) >= dims[a].max]
    if whole:
        keep = [k for k in range(len(axes)) if k not in whole]
        axes, starts, ends, steps = ([v[k] for k in keep] for v in (list(axes), list(starts), list(ends), list(steps)))
    if not all(dims[a].is_fixed for a in axes):
        return ctx.add("slice_dynamic", x, *(_vec(ctx, v) for v in (starts, ends, axes, steps)))
    kept = []
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        s, e = slice_bounds(dims[a].min, int(s), int(e), int(st))
        if (s, e, st) != (0, dims[a].min, 1):
            kept.append((a, s, e, int(st)))
    if not kept:
        return x
    a, s, e, st = (tuple(v) for v in zip(*kept, strict=True))
    return ctx.add("slice", x, axes=a, starts=s, ends=e, steps=st)


# -- reshapes -----------------------------------------------------------------------------------------
@converter("Reshape")
def reshape(ctx, node, args):
    x = args[0]
    # opset 1 gives the dims as an attribute, later opsets as a (usually constant) input
    target = _vec(ctx, node.attr("shape")) if node.opset < 5 else args[1]
    allowzero = bool(node.attr("allowzero", 0))
    dims = ctx.const_ints(target, "shape")
    if dims is None and not allowzero:
        dims = reshape_dims_of(ctx, x, target)
    if dims is None:
        return ctx.add("reshape_dynamic", x, int64_vector(ctx, target), allowzero=allowzero)
    if not _static(x):
        return ctx.add("reshape_dynamic", x, dims=tuple(dims), allowzero=allowzero)
    return reshape_static(ctx, x, resolve_reshape_dims(x.shape.lens, dims, allowzero))


@converter("Flatten")
def flatten(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    axis = node.attr("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis <= rank:
        raise ctx.error(f"axis {node.attr('axis', 1)} is out of range for rank {rank}")
    if not _static(x):
        return ctx.add("flatten", x, axis=axis)
    lens = x.shape.lens
    return reshape_static(ctx, x, [math.prod(lens[:axis]), math.prod(lens[axis:])])


@converter("Squeeze")
def squeeze(ctx, node, args):
    x = args[0]
    dims = x.shape.dims
    # axes: an attribute before opset 13, an optional input from 13; absent = every size-1 dim
    axes_in = arg(args, 1)
    axes = node.attr("axes", None) if axes_in is None else ctx.const_ints(axes_in, "axes")
    if axes_in is not None and axes is None:
        return ctx.add("squeeze_dynamic", x, int64_vector(ctx, axes_in))
    if axes is None:
        if any(not d.is_fixed and d.min <= 1 for d in dims):
            raise ctx.error(f"without axes, which dims of {x.shape} are 1 is known only at run time",
                            ValueDependentError)
        axes = [i for i, d in enumerate(dims) if d.is_fixed and d.min == 1]
    axes = sorted(axes_of(ctx, axes, len(dims)))
    bad = [a for a in axes if not (dims[a].is_fixed and dims[a].min == 1)]
    if bad:
        raise ctx.error(f"cannot squeeze axes {bad} of {x.shape}: their dims are not 1")
    return ctx.add("squeeze", x, axes=tuple(axes)) if axes else x


@converter("Unsqueeze")
def unsqueeze(ctx, node, args):
    x = args[0]
    axes_in = arg(args, 1)  # an attribute before opset 13, an input from 13
    axes = node.attr("axes") if axes_in is None else ctx.const_ints(axes_in, "axes")
    if axes is None:
        return ctx.add("unsqueeze_dynamic", x, int64_vector(ctx, axes_in))
    axes = sorted(axes_of(ctx, axes, x.shape.ndim + len(axes)))  # axes index the output
    return ctx.add("unsqueeze", x, axes=tuple(axes)) if axes else x


@converter("Transpose")
def transpose(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    perm = [int(p) for p in node.attr("perm", list(range(rank))[::-1])]
    if sorted(perm) != list(range(rank)):  # negative entries too: ONNX's shape inference refuses them
        raise ctx.error(f"perm {perm} is not a permutation of the axes 0..{rank - 1}")
    return x if perm == list(range(rank)) else ctx.add("transpose", x, perm=tuple(perm))


@converter("DepthToSpace")
def depth_to_space(ctx, node, args):
    x = args[0]
    b, c, h, w = _lens4(ctx, x)
    bs = node.attr("blocksize")
    if c % (bs * bs):
        raise ctx.error(f"channels {c} are not a multiple of blocksize² = {bs * bs}")
    if node.attr("mode", "DCR") == "DCR":  # channels split as (block row, block col, depth)
        split, perm = [b, bs, bs, c // bs**2, h, w], (0, 3, 4, 1, 5, 2)
    else:  # (depth, block row, block col)
        split, perm = [b, c // bs**2, bs, bs, h, w], (0, 1, 4, 2, 5, 3)
    y = ctx.add("transpose", reshape_static(ctx, x, split), perm=perm)
    return reshape_static(ctx, y, [b, c // bs**2, h * bs, w * bs])


@converter("SpaceToDepth")
def space_to_depth(ctx, node, args):
    x = args[0]
    b, c, h, w = _lens4(ctx, x)
    bs = node.attr("blocksize")
    if h % bs or w % bs:
        raise ctx.error(f"spatial dims {h}x{w} are not multiples of blocksize {bs}")
    perm = (0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = ctx.add("transpose", reshape_static(ctx, x, [b, c, h // bs, bs, w // bs, bs]), perm=perm)
    return reshape_static(ctx, y, [b, c * bs * bs, h // bs, w // bs])


def _lens4(ctx, x: Instruction) -> tuple[int, ...]:
    if x.shape.ndim != 4 or not _static(x):
        raise ctx.error(f"input must be a static 4-D tensor, got {x.shape}")
    return x.shape.lens


# -- joining, splitting, slicing ----------------------------------------------------------------------
@converter("Concat")
def concat(ctx, node, args):
    xs = [a for a in args if a is not None]
    axis = axes_of(ctx, [node.attr("axis", 1)], xs[0].shape.ndim)[0]  # opset 1 defaults to 1
    return xs[0] if len(xs) == 1 else ctx.add("concat", *xs, axis=axis)


@converter("Split")
def split(ctx, node, args):
    x = args[0]
    n = len(node.outputs)
    axis = axes_of(ctx, [node.attr("axis", 0)], x.shape.ndim)[0]
    dim = x.shape.dims[axis]
    if node.attr("num_outputs", n) != n:
        raise ctx.error(f"num_outputs is {node.attr('num_outputs')} but the node has {n} outputs")
    # sizes: an input (opset 1, 13+) or an attribute (opset 2-12); absent = equal parts (opset 18:
    # of ceil(dim / n), the last one smaller)
    sizes_in = arg(args, 1)
    sizes = node.attr("split", None) if sizes_in is None else ctx.const_ints(sizes_in, "split")
    if (sizes_in is not None and sizes is None) or (sizes is None and not dim.is_fixed):
        extra = [] if sizes_in is None else [int64_vector(ctx, sizes_in)]
        return ctx.tuple_elems(ctx.add("split_dynamic", x, *extra, axis=axis, num_outputs=n), n)
    if sizes is None:
        if not node.has("num_outputs") and dim.min % n:
            raise ctx.error(f"dim {dim.min} does not split into {n} equal parts")
        chunk = -(-dim.min // n)
        sizes = [min(chunk, max(dim.min - k * chunk, 0)) for k in range(n)]
    if len(sizes) != n or min(sizes, default=0) < 0 or (dim.is_fixed and sum(sizes) != dim.min):
        raise ctx.error(f"split sizes {list(sizes)} do not cut dim {dim} into {n} outputs")
    starts = [int(s) for s in np.cumsum([0, *sizes])]
    return [slice_onnx(ctx, x, [axis], [s], [e], [1]) for s, e in zip(starts[:-1], starts[1:], strict=True)]


@converter("Slice")
def slice_(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    if node.opset < 10:  # bounds and axes were attributes, and there were no steps
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes", list(range(len(starts)))), [1] * len(starts)
    else:
        count = args[1].shape.dims[0].min
        axes_in, steps_in = arg(args, 3), arg(args, 4)
        axes_in = axes_in if axes_in is not None else _vec(ctx, range(count))
        steps_in = steps_in if steps_in is not None else _vec(ctx, [1] * count)
        ins = [args[1], args[2], axes_in, steps_in]
        values = [ctx.const_ints(v, w) for v, w in zip(ins, ("starts", "ends", "axes", "steps"), strict=True)]
        if any(v is None for v in values):
            return ctx.add("slice_dynamic", x, *(int64_vector(ctx, v) for v in ins))
        starts, ends, axes, steps = values
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error("starts, ends, axes and steps differ in length")
    return slice_onnx(ctx, x, axes_of(ctx, axes, rank), starts, ends, steps)


@converter("CenterCropPad", since=18)
def center_crop_pad(ctx, node, args):
    x, target = args
    rank = x.shape.ndim
    axes = axes_of(ctx, node.attr("axes", list(range(rank))), rank)
    if any(not x.shape.dims[a].is_fixed for a in axes):
        raise ctx.error(f"the cropped or padded dims of {x.shape} must be static")
    have = [x.shape.dims[a].min for a in axes]
    want = ctx.const_ints(target, "shape")
    if want is None:
        return _center_crop_pad_runtime(ctx, x, int64_vector(ctx, target), axes, have)
    if len(want) != len(axes):
        raise ctx.error(f"shape {want} does not fit axes {axes}")
    # centred; an odd difference puts the extra element at the end
    starts = [max(h - w, 0) // 2 for h, w in zip(have, want, strict=True)]
    x = slice_onnx(ctx, x, axes, starts, [s + min(h, w) for s, h, w in zip(starts, have, want, strict=True)],
                   [1] * len(axes))
    pads = [0] * (2 * rank)
    for a, h, w in zip(axes, have, want, strict=True):
        pads[a], pads[a + rank] = max(w - h, 0) // 2, max(w - h, 0) - max(w - h, 0) // 2
    return ctx.add("pad", x, pads=tuple(pads)) if any(pads) else x


def _center_crop_pad_runtime(ctx, x, want, axes, have):
    """The same arithmetic as the constant case, on the int64 vector `want`, feeding the slice
    bounds and pads of `slice_dynamic` and `pad_dynamic`."""
    def op(name, a, b):
        return ctx.pointwise(name, a, b)

    have, zero, two = _vec(ctx, have), ctx.literal(np.int64(0)), ctx.literal(np.int64(2))
    start = op("div", op("max", op("sub", have, want), zero), two)
    end = op("add", start, op("min", have, want))
    x = ctx.add("slice_dynamic", x, start, end, _vec(ctx, axes), _vec(ctx, [1] * len(axes)))
    short = op("max", op("sub", want, have), zero)
    before = op("div", short, two)
    pads = ctx.add("concat", before, op("sub", short, before), axis=0)
    return ctx.add("pad_dynamic", x, pads, ctx.scalar_like(0, x), _vec(ctx, axes))


# -- expanding and padding ----------------------------------------------------------------------------
@converter("Expand", since=8)
def expand(ctx, node, args):
    x, target = args
    dims = ctx.const_ints(target, "shape")
    if dims is None or not _static(x):
        return ctx.add("expand_dynamic", x, int64_vector(ctx, target))
    try:  # Expand broadcasts both ways: a target dim of 1 keeps the input's
        lens = tuple(int(n) for n in np.broadcast_shapes(x.shape.lens, tuple(dims)))
    except ValueError:
        raise ctx.error(f"cannot expand {x.shape} to {dims}") from None
    return x if lens == x.shape.lens else ctx.add("broadcast", x, out_lens=lens)


@converter("Tile")
def tile(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    if node.opset < 6:  # (input, tiles, axis): one axis repeated `tiles` times
        tiles, axis = (int(np.asarray(ctx.require_const(a, what)).reshape(-1)[0])
                       for a, what in ((args[1], "tiles"), (args[2], "axis")))
        repeats = [1] * rank
        repeats[axes_of(ctx, [axis], rank)[0]] = tiles
    else:
        repeats = ctx.const_ints(args[1], "repeats")
        if repeats is None or not _static(x):
            return ctx.add("tile_dynamic", x, int64_vector(ctx, args[1]))
    if len(repeats) != rank or min(repeats, default=1) < 0:
        raise ctx.error(f"repeats {repeats} do not fit {x.shape}")
    if all(r == 1 for r in repeats):
        return x
    # x[d0, d1] tiled (r0, r1) is x viewed as [1, d0, 1, d1], broadcast to [r0, d0, r1, d1], merged
    lens = x.shape.lens
    tiled = [i for i, r in enumerate(repeats) if r != 1]
    view = ctx.add("unsqueeze", x, axes=tuple(i + k for k, i in enumerate(tiled)))
    wide = [n for i, d in enumerate(lens) for n in ([repeats[i], d] if repeats[i] != 1 else [d])]
    view = ctx.add("broadcast", view, out_lens=tuple(wide))
    return reshape_static(ctx, view, [d * r for d, r in zip(lens, repeats, strict=True)])


@converter("Pad")
def pad(ctx, node, args):
    x = args[0]
    rank = x.shape.ndim
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise ctx.error(f"unknown mode {mode!r}")
    if node.opset < 11:  # pads ("paddings" in opset 1) and value were attributes
        pads = node.attr("pads" if node.opset >= 2 else "paddings")
        return _pad(ctx, x, list(range(rank)), pads, node.attr("value", 0.0), mode)
    pads_in, value_in, axes_in = args[1], arg(args, 2), arg(args, 3)
    value_in = value_in if value_in is not None else ctx.scalar_like(0, x)
    axes_in = axes_in if axes_in is not None else _vec(ctx, range(rank))
    pads, axes, value = ctx.const_ints(pads_in, "pads"), ctx.const_ints(axes_in, "axes"), ctx.const(value_in)
    if pads is None or axes is None or value is None:
        value_in = reshape_static(ctx, value_in, [])  # the value may come as a 1-element tensor
        return ctx.add("pad_dynamic", x, int64_vector(ctx, pads_in), value_in,
                       int64_vector(ctx, axes_in), mode=mode)
    return _pad(ctx, x, axes_of(ctx, axes, rank), pads, np.asarray(value).reshape(-1)[0], mode)


def _pad(ctx, x, axes: list[int], pads: Sequence[int], value, mode: str) -> Instruction:
    rank = x.shape.ndim
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {list(pads)} do not fit axes {axes}")
    begin, end = [0] * rank, [0] * rank
    for k, a in enumerate(axes):
        begin[a], end[a] = int(pads[k]), int(pads[k + len(axes)])
    # negative pads remove elements: a slice first, then a pad that only adds
    cut = [a for a in range(rank) if begin[a] < 0 or end[a] < 0]
    widths = tuple(max(p, 0) for p in begin + end)
    value = np.asarray(value).astype(x.shape.dtype.np).item()
    if cut and not x.shape.is_dynamic and _cuts_past_the_data(ctx, x.shape.lens, begin, end, mode):
        # a constant pad whose cut reaches into the other side's padding (ONNX Runtime: [0, 1, 2, 3]
        # padded by (-5, 3) is [0, 0]): the pad first, then the cut
        lens = [n + max(b, 0) + max(e, 0) for n, b, e in zip(x.shape.lens, begin, end)]
        x = ctx.add("pad", x, pads=widths, mode=mode, value=value)
        return slice_onnx(ctx, x, cut, [max(-begin[a], 0) for a in cut], [lens[a] - max(-end[a], 0) for a in cut],
                          [1] * len(cut))
    if cut:
        x = slice_onnx(ctx, x, cut, [max(-begin[a], 0) for a in cut],
                       [end[a] if end[a] < 0 else INT64_MAX for a in cut], [1] * len(cut))
    if not any(widths):
        return x
    return ctx.add("pad", x, pads=widths, mode=mode, value=value)


def _cuts_past_the_data(ctx, lens, begin, end, mode: str) -> bool:
    """ops.layout.cuts_past_the_data, its refusal a ParseError naming the node."""
    try:
        return cuts_past_the_data(lens, begin, end, mode)
    except ShapeError as e:
        raise ctx.error(str(e)) from None

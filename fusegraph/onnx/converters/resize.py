"""Resize and Upsample -> `ops/resize.py`; GridSample and AffineGrid -> `ops/grid_sample.py`.

Constant scales / sizes / roi (the usual case) become a static `resize`: the converter resolves them,
with `axes` and `keep_aspect_ratio_policy`, into full-rank per-axis scales and output lens, so the op
never sees optional inputs or opset differences. Values known only at run time give a
`resize_dynamic`, which resolves them the same way when it runs. Opset 10 and Upsample had no
coordinate or rounding attributes: they map coordinates asymmetrically and round with the legacy rule.
"""

from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ir.module import Instruction
from ...ops.resize import full_roi, resolve_resize, scaled_lens
from ..registry import converter
from .indexing import axis_attr

_LEGACY_MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear"}


def _given(ctx, ins) -> np.ndarray | None:
    """A constant optional input's values; None when absent or empty (ONNX's 'not given')."""
    v = ctx.const(ins)
    return None if v is None or np.asarray(v).size == 0 else np.asarray(v).reshape(-1)


def _present(ins) -> bool:
    """Whether an optional input is there: given, and not a constant empty tensor."""
    return ins is not None and (ins.shape.is_dynamic or ins.shape.elements > 0)


def _add_resize(ctx, x, axes, target, by_sizes, roi_in, policy="stretch", **attrs):
    """A static `resize` when the scales / sizes (and roi) are constants, else a `resize_dynamic`."""
    r = x.shape.ndim
    values = _given(ctx, target)
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    roi = _given(ctx, roi_in) if crop else None
    if crop and not _present(roi_in):
        raise ctx.error("tf_crop_and_resize needs a roi")
    runtime = values is None or (crop and roi is None) or (by_sizes and x.shape.is_dynamic)
    if runtime:
        extra = [ctx.convert(roi_in, DType.float32)] if crop else []
        return ctx.add("resize_dynamic", x, target, *extra, axes=tuple(axes), by_sizes=by_sizes,
                       keep_aspect_ratio_policy=policy, **attrs)
    # input lens are read for sizes only, and those took the run-time path for a dynamic input
    scales, out_lens = resolve_resize(x.shape.min_lens, axes, values.tolist(), by_sizes, policy)
    if out_lens is None and not x.shape.is_dynamic:
        out_lens = scaled_lens(x.shape.lens, scales)
    return ctx.add("resize", x, scales=scales, out_lens=out_lens or (),
                   roi=full_roi(axes, roi.tolist(), r) if crop else (), **attrs)


def _legacy_resize(ctx, node, x, scales):
    mode = node.attr("mode", "nearest")
    if mode not in _LEGACY_MODES:
        raise ctx.error(f"unknown mode {mode!r}")
    if not isinstance(scales, Instruction):
        scales = ctx.literal(np.asarray(scales, np.float32))
    return _add_resize(ctx, x, range(x.shape.ndim), scales, False, None, mode=_LEGACY_MODES[mode],
                       coordinate_transformation_mode="asymmetric", nearest_mode="simple")


@converter("Upsample")
def upsample_v1(ctx, node, args):
    if args[0].shape.ndim != 4:
        raise ctx.error("Upsample-1 resizes 4-D inputs only")
    return _legacy_resize(ctx, node, args[0], [1.0, 1.0, node.attr("height_scale"), node.attr("width_scale")])


@converter("Upsample", since=7)
def upsample_v7(ctx, node, args):
    return _legacy_resize(ctx, node, args[0], node.attr("scales"))


@converter("Upsample", since=9)
@converter("Resize", since=10)
def upsample_v9(ctx, node, args):
    return _legacy_resize(ctx, node, args[0], args[1])


@converter("Resize", since=11)
def resize(ctx, node, args):
    args = list(args) + [None] * (4 - len(args))
    x, roi, scales, sizes = args
    r = x.shape.ndim
    axes = [axis_attr(ctx, a, r, "axes") for a in node.attr("axes", list(range(r)))]
    if len(set(axes)) != len(axes):
        raise ctx.error(f"repeated axes {axes}")
    if _present(scales) == _present(sizes):
        raise ctx.error("exactly one of scales and sizes must be given")
    by_sizes = _present(sizes)
    mode = node.attr("mode", "nearest")
    return _add_resize(
        ctx, x, axes, sizes if by_sizes else scales, by_sizes, roi, node.attr("keep_aspect_ratio_policy", "stretch"),
        mode=mode, coordinate_transformation_mode=node.attr("coordinate_transformation_mode", "half_pixel"),
        nearest_mode=node.attr("nearest_mode", "round_prefer_floor"),
        cubic_coeff_a=float(node.attr("cubic_coeff_a", -0.75)),
        exclude_outside=bool(node.attr("exclude_outside", 0)),
        extrapolation_value=float(node.attr("extrapolation_value", 0.0)),
        antialias=bool(node.attr("antialias", 0)) and mode != "nearest")  # it filters linear/cubic only


_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


@converter("GridSample", since=16)
def grid_sample(ctx, node, args):
    x, grid = args
    mode = node.attr("mode", "bilinear" if node.opset < 20 else "linear")
    if mode not in _GRID_MODES:
        raise ctx.error(f"unknown mode {mode!r}")
    if node.opset < 20 and x.shape.ndim != 4:
        raise ctx.error("GridSample before opset 20 samples 4-D inputs only")
    return ctx.add("grid_sample", x, grid, mode=_GRID_MODES[mode],
                   padding_mode=node.attr("padding_mode", "zeros"),
                   align_corners=bool(node.attr("align_corners", 0)))


@converter("AffineGrid", since=20)
def affine_grid(ctx, node, args):
    theta, size = args
    align = bool(node.attr("align_corners", 0))
    lens = ctx.const_ints(size, "size")
    if lens is None:  # the output extents are known at run time only
        return ctx.add("affine_grid", theta, ctx.convert(size, DType.int64), align_corners=align)
    return ctx.add("affine_grid", theta, size=tuple(lens), align_corners=align)

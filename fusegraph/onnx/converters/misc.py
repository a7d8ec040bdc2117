"""BitCast, and the activations and embeddings built from existing ops: Swish, SwiGLU,
RotaryEmbedding.

Swish, SwiGLU and RotaryEmbedding are decomposed into pointwise, slice, gather and concat ops:
the same arithmetic as their ONNX definitions, which fusion passes then see through.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...ir.dtypes import DType
from ...ir.shape import Dim
from ...ops.misc import bit_width
from ...ops.movement import resolve_reshape_dims
from ..registry import converter


def scalar_const(ctx, ins, what: str):
    """The one element of a constant input, or None when it is computed at run time."""
    v = ctx.const(ins)
    if v is None:
        return None
    v = np.asarray(v)
    if v.size != 1:
        raise ctx.error(f"{what} must have one element, got shape {list(v.shape)}")
    return v.reshape(-1)[0]


@converter("BitCast", since=26)
def bitcast(ctx, node, args):
    x = args[0]
    to = DType.from_onnx(node.attr("to"))
    if bit_width(x.shape.dtype) != bit_width(to) or DType.string in (x.shape.dtype, to):
        raise ctx.error(f"cannot reinterpret {x.shape.dtype} as {to}: BitCast needs types of one bit width")
    return ctx.add("bitcast", x, to=to)


def swish(ctx, x, alpha: float):
    """x * sigmoid(alpha * x); alpha 1 is SiLU."""
    if alpha == 1.0:
        return ctx.add("silu", x)
    return ctx.add("mul", x, ctx.add("sigmoid", ctx.pointwise("mul", x, ctx.scalar_like(alpha, x))))


@converter("Swish", since=24)
def swish_op(ctx, node, args):
    return swish(ctx, args[0], float(node.attr("alpha", 1.0)))


@converter("SwiGLU", since=28)
def swiglu(ctx, node, args):
    gate, value = args
    if gate.shape.dims != value.shape.dims:  # SwiGLU does not broadcast
        raise ShapeError(f"node {node.name!r} (SwiGLU): A {gate.shape} and B {value.shape} differ in shape")
    return ctx.add("mul", swish(ctx, gate, float(node.attr("alpha", 1.0))), value)


# -- RotaryEmbedding --------------------------------------------------------------------------------
def _reshape(ctx, x, dims):
    """ONNX-style reshape (0 copies a dim, -1 infers one) for static or dynamic inputs."""
    if x.shape.is_dynamic:
        return ctx.add("reshape_dynamic", x, dims=tuple(dims))
    return ctx.reshape(x, resolve_reshape_dims(x.shape.lens, dims, allowzero=False))


def _last(ctx, x, start: int, end: int, step: int = 1):
    axis = x.shape.ndim - 1
    return ctx.add("slice", x, axes=(axis,), starts=(start,), ends=(end,), steps=(step,))


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx, node, args):
    x, cos, sin = args[:3]
    position_ids = args[3] if len(args) > 3 else None
    rank = x.shape.ndim
    if rank == 4:  # [batch, heads, seq, head] -> [batch, seq, heads, head]
        x4 = ctx.add("transpose", x, perm=(0, 2, 1, 3))
    elif rank == 3:  # [batch, seq, hidden] -> [batch, seq, heads, head]
        heads = node.attr("num_heads", 0)
        if heads <= 0:
            raise ctx.error("a 3-D input needs the num_heads attribute")
        x4 = _reshape(ctx, x, (0, 0, heads, -1))
    else:
        raise ctx.error(f"input must be 3-D or 4-D, got {x.shape}")
    head = x4.shape.dims[3]
    if not head.is_fixed:
        raise ctx.error(f"the head size must be static, got {x4.shape}")
    head = head.min
    rot = node.attr("rotary_embedding_dim", 0) or head
    if rot % 2 or rot > head:
        raise ctx.error(f"rotary_embedding_dim {rot} must be even and at most the head size {head}")
    half = rot // 2
    if position_ids is not None:  # caches [max_pos, half] -> [batch, seq, half]
        cos, sin = (ctx.add("gather", c, position_ids, axis=0) for c in (cos, sin))
    for c in (cos, sin):
        if c.shape.ndim != 3 or c.shape.dims[-1] != Dim.fixed(half):
            raise ctx.error(f"the cos/sin caches must be [batch, seq, {half}], got {c.shape}")
    cos, sin = (ctx.add("unsqueeze", c, axes=(2,)) for c in (cos, sin))  # broadcast over heads
    if node.attr("interleaved", 0):
        x1, x2 = _last(ctx, x4, 0, rot, 2), _last(ctx, x4, 1, rot, 2)
    else:
        x1, x2 = _last(ctx, x4, 0, half), _last(ctx, x4, half, rot)
    real = ctx.pointwise("sub", ctx.pointwise("mul", cos, x1), ctx.pointwise("mul", sin, x2))
    imag = ctx.pointwise("add", ctx.pointwise("mul", sin, x1), ctx.pointwise("mul", cos, x2))
    if node.attr("interleaved", 0):  # real and imaginary parts alternate again
        pairs = ctx.add("concat", *(ctx.add("unsqueeze", p, axes=(4,)) for p in (real, imag)), axis=4)
        rotated = _reshape(ctx, pairs, (0, 0, 0, -1))
    else:
        rotated = ctx.add("concat", real, imag, axis=3)
    if rot < head:
        rotated = ctx.add("concat", rotated, _last(ctx, x4, rot, head), axis=3)
    if rank == 4:
        return ctx.add("transpose", rotated, perm=(0, 2, 1, 3))
    return _reshape(ctx, rotated, (0, 0, -1))

"""The optimizer updates of the ai.onnx.preview.training domain -- Adagrad, Adam, Momentum
(standard and Nesterov) -> pointwise ops.

Each node updates n tensors at once: inputs R (learning rate), T (update count, int64), then n
tensors of each kind (X..., G..., and H... / V...), outputs n of each updated kind in that order.
Each update is elementwise over its tensor with R and T broadcast as scalars; decisions on T
(the first step, T <= 0 as the ONNX reference reads "T > 0" false) are selects, since T is known
only at run time.
"""

from __future__ import annotations

from ...ir.dtypes import DType
from ..registry import converter

DOMAIN = "ai.onnx.preview.training"


class _Update:
    """Pointwise arithmetic for one tensor's update: operands broadcast, constants in its dtype."""

    def __init__(self, ctx, like):
        self.ctx, self.like = ctx, like

    def c(self, value):
        return self.ctx.scalar_like(value, self.like)

    def __getattr__(self, op):  # u.add(a, b) == ctx.pointwise("add", a, b)
        return lambda *xs: self.ctx.pointwise(op, *[self.c(x) if isinstance(x, (int, float)) else x for x in xs])


def _groups(ctx, node, args, kinds: int):
    """R and T, then the n tensors of each kind as n tuples (x, g, h...)."""
    r, t, rest = args[0], args[1], list(args[2:])
    if not rest or len(rest) % kinds:
        raise ctx.error(f"expects R, T and {kinds} groups of equally many tensors, got {len(args)} inputs")
    if t.shape.dtype != DType.int64:
        raise ctx.error(f"T must be int64, got {t.shape.dtype}")
    n = len(rest) // kinds
    return r, t, [tuple(rest[k * n + i] for k in range(kinds)) for i in range(n)]


def _first_step(ctx, t):
    """T <= 0 as a bool scalar: the first step, without bias corrections and with the gradient's
    momentum weight 1."""
    return ctx.pointwise("less_equal", t, ctx.scalar_like(0, t))


@converter("Adagrad", domain=DOMAIN, since=1)
def adagrad(ctx, node, args):
    r, t, groups = _groups(ctx, node, args, 3)
    norm, decay = node.attr("norm_coefficient", 0.0), node.attr("decay_factor", 0.0)
    epsilon = node.attr("epsilon", 1e-6)
    xs, hs = [], []
    for x, g, h in groups:
        u = _Update(ctx, x)
        rate = u.div(ctx.convert(r, x.shape.dtype), u.add(u.mul(ctx.convert(t, x.shape.dtype), decay), 1))
        g_reg = u.add(u.mul(x, norm), g)                       # g + norm * x
        h_new = u.add(h, u.mul(g_reg, g_reg))                  # h + g^2
        step = u.div(u.mul(rate, g_reg), u.add(u.sqrt(h_new), epsilon))
        xs.append(u.sub(x, step))                              # x - r * g / (sqrt(h) + eps)
        hs.append(h_new)
    return xs + hs


@converter("Adam", domain=DOMAIN, since=1)
def adam(ctx, node, args):
    r, t, groups = _groups(ctx, node, args, 4)
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    norm, norm_post = node.attr("norm_coefficient", 0.0), node.attr("norm_coefficient_post", 0.0)
    epsilon = node.attr("epsilon", 1e-6)
    first = _first_step(ctx, t)
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        u = _Update(ctx, x)
        rate, steps = ctx.convert(r, x.shape.dtype), ctx.convert(t, x.shape.dtype)
        g_reg = u.add(u.mul(x, norm), g)
        v_new = u.add(u.mul(v, alpha), u.mul(g_reg, 1 - alpha))
        h_new = u.add(u.mul(h, beta), u.mul(u.mul(g_reg, g_reg), 1 - beta))
        # bias correction r * sqrt(1 - beta^T) / (1 - alpha^T), from the second step on
        corrected = u.div(u.mul(rate, u.sqrt(u.sub(1, u.pow(u.c(beta), steps)))), u.sub(1, u.pow(u.c(alpha), steps)))
        rate = u.where(first, rate, corrected)
        x_new = u.sub(x, u.mul(rate, u.div(v_new, u.add(u.sqrt(h_new), epsilon))))
        xs.append(u.mul(x_new, 1 - norm_post))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs


@converter("Momentum", domain=DOMAIN, since=1)
def momentum(ctx, node, args):
    r, t, groups = _groups(ctx, node, args, 3)
    alpha, beta, norm = node.attr("alpha"), node.attr("beta"), node.attr("norm_coefficient")
    mode = node.attr("mode")
    if mode not in ("standard", "nesterov"):
        raise ctx.error(f"unknown mode {mode!r} (expected standard or nesterov)")
    first = _first_step(ctx, t)
    xs, vs = [], []
    for x, g, v in groups:
        u = _Update(ctx, x)
        rate = ctx.convert(r, x.shape.dtype)
        g_reg = u.add(u.mul(x, norm), g)
        weight = u.where(first, u.c(1), u.c(beta))  # the gradient's weight is 1 on the first step
        v_new = u.add(u.mul(v, alpha), u.mul(g_reg, weight))
        direction = v_new if mode == "standard" else u.add(g_reg, u.mul(v_new, alpha))
        xs.append(u.sub(x, u.mul(rate, direction)))
        vs.append(v_new)
    return xs + vs

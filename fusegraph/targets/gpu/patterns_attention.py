"""Attention on the optimized IR: dot(Q, K^T) -> scores form -> softmax(last axis) -> dot(., V), the
softmax alone or fused with its prologue (fused_reduce), becomes one
torch.nn.functional.scaled_dot_product_attention call (flash / memory-efficient kernels; lower_attention.py).

The scores form is what the softmax reads, built from the scores S by these rules (any order, each
at most once; converts between are the half program's roundings, SDPA computes in float32):

    S * c, S / c            c a constant scalar: SDPA's scale
    S + M                   M a value broadcasting to S (any float type): SDPA's additive mask
    where(B, S, f)          B boolean, f a constant scalar <= FILL_LIMIT: masked keys take f
    where(B, f, S), where(not B, S, f)   the same with B's sense flipped

Q and K^T may each be scaled by a constant first (torch's export of SDPA: q * sqrt(s), K^T * sqrt(s)).
The lowering makes one additive mask of the mask and the fill, converted to Q's type with values
beyond its range clamped (finfo(float32).min is -inf in float16), and gives a query row whose every
key is masked the uniform weights the model gives it (lower_attention.py).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...ir.module import Instruction
from ...ir.shape import Shape
from ...ops.movement import Reshape
from ...ops.scalar import Call, Expr, Var
from .matching import FLOATS, Group, constant_scalar, only_user, strip_convert
from .view_chain import fold_chains

FILL_LIMIT = -1e4  # a Where's fill at or below it masks: exp(fill - max) is 0 in float32 for any real score


@dataclasses.dataclass(frozen=True)
class _Form:
    """The scores form over a body's variables: S * scale [+ mask], keys where `cond` is not
    `keep_if` set to `fill` (before the mask is added when `fill_first`)."""

    scale: float = 1.0
    mask: int | None = None
    cond: int | None = None
    keep_if: bool = True
    fill: float = 0.0
    fill_first: bool = False


def match_attention(dot2: Instruction) -> Group | None:
    """The attention `dot2` ends, else None. Its inputs: q, K^T, v, then the additive mask and the
    boolean condition where the form has them."""
    p, v = dot2.inputs
    if not isinstance(dot2.shape, Shape) or dot2.shape.ndim not in (3, 4) or dot2.shape.dtype.value not in FLOATS:
        return None
    if not only_user(p, dot2):
        return None
    pre = _attention_prologue(p)
    if pre is None:
        return None
    dot1, form, extra, members = pre
    if dot1.op.name != "dot" or not only_user(dot1, members[0]):
        return None
    q, kt = dot1.inputs
    scale = form.scale
    pre_scaled = []
    for k, x in enumerate((q, kt)):  # torch's SDPA export scales q and K^T by sqrt(scale) each
        c = _constant_factor(x)
        if c is not None and only_user(x, dot1):
            scale *= c
            pre_scaled.append(x)
            q, kt = (x.inputs[0], kt) if k == 0 else (q, x.inputs[0])
    if not q.shape.dtype == kt.shape.dtype == v.shape.dtype:  # SDPA takes one dtype
        return None
    mask, cond = extra
    if mask is not None and not (isinstance(mask.shape, Shape) and mask.shape.dtype.value in FLOATS):
        return None
    if cond is not None and not (isinstance(cond.shape, Shape) and cond.shape.dtype.value == "bool"):
        return None
    if p.shape.lens != dot1.shape.lens or not all(x is None or _broadcasts_to(x, dot1) for x in extra):
        return None  # SDPA broadcasts its mask to the scores, never the scores to the mask
    inside = [*pre_scaled, dot1, *members]
    # q, K^T and v as strided views of what their movement chains start from (view_chain.py)
    bases, chains, folded = fold_chains([q, kt, v], {m.uid for m in inside} | {dot2.uid})
    grouped = _grouped_kv(bases[1:], chains[1:])
    if grouped is not None:
        bases[1:], chains[1:] = grouped
    data = {"scale": scale, "has_mask": mask is not None, "chains": chains}
    if grouped is not None:
        data["gqa"] = True  # k and v keep their heads: SDPA's enable_gqa
    if cond is not None:  # the Where: which value of the condition keeps a score, the fill, its order
        data["where"] = {"keep_if": form.keep_if, "fill": form.fill, "fill_first": form.fill_first}
    return Group("attention", dot2, [*folded, *inside], bases + [x for x in extra if x is not None], data)


def _grouped_kv(bases: list[Instruction], chains: list) -> tuple[list, list] | None:
    """Grouped-query attention's K^T and v: each a broadcast of [B, Hkv, 1, S, D] to [B, Hkv, rep, S, D]
    reshaped to [B, Hkv * rep, S, D] (repeat_kv's export), K^T then transposed. Returns the bases and
    chains reading the [B, Hkv, 1, S, D] values, for SDPA's enable_gqa: the reshape of a broadcast
    is no view, and it copied k and v once per layer (LLaMA, issue 23)."""
    new_bases, new_chains, reps = [], [], set()
    for base, chain in zip(bases, chains):
        if base.op.name != "broadcast" or base.shape.ndim != 5:
            return None
        src, lens = base.inputs[0].shape.lens, base.shape.lens
        b, hkv, rep, s, d = lens
        if tuple(src) != (b, hkv, 1, s, d) or rep < 2:
            return None
        ops = [(op, out) for op, out in chain if op.name != "contiguous"]
        if not ops or ops[0][0].name != "reshape" or tuple(ops[0][1]) != (b, hkv * rep, s, d):
            return None
        if any(op.name != "transpose" or tuple(op.perm) != (0, 1, 3, 2) for op, _ in ops[1:]):
            return None
        new_bases.append(base.inputs[0])
        new_chains.append([(Reshape(dims=(b, hkv, s, d)), (b, hkv, s, d)),
                           *[(op, (b, hkv, *out[2:])) for op, out in ops[1:]]])
        reps.add(rep)
    return (new_bases, new_chains) if len(reps) == 1 else None


def _broadcasts_to(x: Instruction, scores: Instruction) -> bool:
    lens = scores.shape.lens
    try:
        return tuple(np.broadcast_shapes(x.shape.lens, lens)) == tuple(lens)
    except ValueError:
        return False


def _constant_factor(x: Instruction) -> float | None:
    """c when `x` is y * c or y / c with c a constant scalar (y first, of x's shape and type), else None.
    The factor moves into SDPA's scale, which applies it in float32: a rounding of x fewer."""
    if x.op.name not in ("mul", "div") or len(x.inputs) != 2:
        return None
    y, c = x.inputs
    if x.op.name == "mul" and constant_scalar(y) is not None and constant_scalar(c) is None:
        y, c = c, y
    value = constant_scalar(c)
    if value is None or y.shape.lens != x.shape.lens or y.shape.dtype != x.shape.dtype:
        return None
    if x.op.name == "div":
        return 1.0 / value if value != 0 else None
    return value


def _attention_prologue(p: Instruction):
    """(scores dot, form, (mask, cond) values or None, members up to p) for softmax-like `p`, or None.
    Converts around the softmax (fp16 programs keep it in float32) are part of the pattern: SDPA
    computes its softmax in float32 too."""
    last = p.shape.ndim - 1
    if p.op.name != "fused_reduce":
        members = [p]
        s = p
        if s.op.name == "convert":
            s = s.inputs[0]
            if not only_user(s, p):
                return None
            members.insert(0, s)
        if s.op.name != "softmax" or s.op.axis != last:
            return None
        x = s.inputs[0]
        if x.op.name == "dot":
            return x, _Form(), (None, None), members
        if x.op.kind.value == "pointwise" and hasattr(x.op, "expr") and only_user(x, s):
            r = _match_expr(x.op.expr, x.inputs)
            return None if r is None else (*r, [x, *members])
        return None
    if p.op.axes != (last,):
        return None
    body = p.module_args[0]
    params = {b.uid: k for k, b in enumerate(body.parameters)}
    (ret,) = body.outputs
    # broadcasts of the inputs are free in SDPA (it broadcasts its mask): see through them
    computed = [i for i in body.instructions if i.op.name not in ("@param", "@return", "broadcast")]
    s = ret.inputs[0] if ret.op.name == "convert" else ret
    if s.op.name != "softmax" or s.op.axis != last:
        return None
    x = _through_broadcasts(s.inputs[0])
    expected = 1 + (s is not ret)
    if x.uid in params:  # softmax of the scores as they come
        return (p.inputs[params[x.uid]], _Form(), (None, None), [p]) if len(computed) == expected else None
    if len(computed) != expected + 1 or not (x.op.kind.value == "pointwise" and hasattr(x.op, "expr")):
        return None
    sources = [_through_broadcasts(i) for i in x.inputs]
    if any(i.uid not in params for i in sources):
        return None
    r = _match_expr(x.op.expr, [p.inputs[params[i.uid]] for i in sources])
    return None if r is None else (*r, [p])


def _through_broadcasts(x: Instruction) -> Instruction:
    while x.op.name == "broadcast":
        x = x.inputs[0]
    return x


def _match_expr(expr: Expr, inputs: list[Instruction]):
    """(scores dot, form, (mask, cond)) for the first dot among `inputs` that `expr` is a scores form of."""
    scalars = {k: c for k, i in enumerate(inputs) if (c := constant_scalar(i)) is not None}
    for s in (k for k, i in enumerate(inputs) if i.op.name == "dot"):
        f = _form(expr, s, scalars)
        if f is not None and (f.cond is None or math.isfinite(f.fill) and f.fill <= FILL_LIMIT):
            picked = [inputs[k] if k is not None else None for k in (f.mask, f.cond)]
            return inputs[s], f, tuple(picked)
    return None


def _var(expr: Expr) -> int | None:
    expr = strip_convert(expr)
    return expr.index if isinstance(expr, Var) else None


def _form(expr: Expr, score: int, scalars: dict[int, float]) -> _Form | None:
    """The scores form `expr` computes from variable `score`, by the rules of the module docstring."""
    expr = strip_convert(expr)
    if isinstance(expr, Var):
        return _Form() if expr.index == score else None
    if not isinstance(expr, Call):
        return None
    fn, args = expr.fn, expr.args
    if fn in ("mul", "div"):  # S * c: the scale (a mask added before it would be scaled too)
        for a, c in [args] + ([args[::-1]] if fn == "mul" else []):
            k = _var(c)
            inner = _form(a, score, scalars) if k in scalars else None
            if inner is None or inner.mask is not None or (fn == "div" and scalars[k] == 0):
                continue
            value = scalars[k] if fn == "mul" else 1.0 / scalars[k]
            return dataclasses.replace(inner, scale=inner.scale * value, fill=inner.fill * value)
        return None
    if fn == "add":  # S + M: the additive mask
        for a, m in (args, args[::-1]):
            k = _var(m)
            inner = _form(a, score, scalars) if k is not None and k != score and k not in scalars else None
            if inner is not None and inner.mask is None:
                return dataclasses.replace(inner, mask=k, fill_first=inner.cond is not None)
        return None
    if fn == "where":  # where(B, S, f): masked keys take the constant f
        c, a, b = args
        keep_if = True
        if isinstance(c, Call) and c.fn == "not":
            c, keep_if = c.args[0], False
        k = c.index if isinstance(c, Var) else None
        if k is None or k == score or k in scalars:
            return None
        for kept, filled, sense in ((a, b, keep_if), (b, a, not keep_if)):
            f = _var(filled)
            inner = _form(kept, score, scalars) if f in scalars else None
            if inner is not None and inner.cond is None:
                return dataclasses.replace(inner, cond=k, keep_if=sense, fill=scalars[f], fill_first=False)
        return None
    return None

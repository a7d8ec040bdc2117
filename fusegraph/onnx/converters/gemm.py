"""MatMul, Gemm, Einsum and Det -> `dot` with movement and pointwise ops around it, `einsum`, `det`.

`dot` takes equal-rank operands with equal batch dims; numpy's matmul rules (1-D promotion, batch
broadcasting) end here. Gemm is MIGraphX's transpose + dot + scale + broadcast add, so passes see
a dot followed by pointwise epilogues. Einsum is lowered to transposes, reductions and dots where it
can be; only equations with diagonals (a letter repeated within one operand) stay `einsum`.
"""

from __future__ import annotations

import math
import string

import numpy as np

from ...ir.module import Instruction
from ..registry import converter
from .reduce import drop_axes


def broadcast_to(ctx, x: Instruction, lens) -> Instruction:
    lens = tuple(int(n) for n in lens)
    if x.shape.ndim == len(lens) and not x.shape.is_dynamic and x.shape.lens == lens:
        return x
    return ctx.add("broadcast", x, out_lens=lens)


def matmul(ctx, a: Instruction, b: Instruction, op: str = "dot") -> Instruction:
    """numpy.matmul on `op` (dot or quant_dot): 1-D operands promoted, batch dims broadcast."""
    ra, rb = a.shape.ndim, b.shape.ndim
    if ra == 0 or rb == 0:
        raise ctx.error(f"matmul operands must have rank >= 1, got {a.shape} and {b.shape}")
    if ra == 1:
        a = ctx.reshape(a, [1, a.shape.lens[0]])
    if rb == 1:
        b = ctx.reshape(b, [b.shape.lens[0], 1])
    if a.shape.ndim == b.shape.ndim and a.shape.dims[:-2] == b.shape.dims[:-2]:
        out = ctx.add(op, a, b)
    elif a.shape.is_dynamic or b.shape.is_dynamic:  # batch dims known at run time
        out = ctx.add(op, ctx.add("broadcast_for_dot", a, b), ctx.add("broadcast_for_dot", b, a))
    elif b.shape.ndim == 2:
        # One weight matrix for every batch: a single [batch*M, K] x [K, N] product.
        lead = a.shape.lens[:-1]
        flat = ctx.add(op, ctx.reshape(a, [math.prod(lead), a.shape.lens[-1]]), b)
        out = ctx.reshape(flat, [*lead, b.shape.lens[-1]])
    else:
        try:
            batch = np.broadcast_shapes(a.shape.lens[:-2], b.shape.lens[:-2])
        except ValueError:
            raise ctx.error(f"matmul batch dims do not broadcast: {a.shape} and {b.shape}") from None
        a = broadcast_to(ctx, a, [*batch, *a.shape.lens[-2:]])
        b = broadcast_to(ctx, b, [*batch, *b.shape.lens[-2:]])
        out = ctx.add(op, a, b)
    n = out.shape.ndim
    promoted = ([n - 2] if ra == 1 else []) + ([n - 1] if rb == 1 else [])
    return drop_axes(ctx, out, promoted)


@converter("MatMul")
def matmul_node(ctx, node, args):
    from .sparse import sparse_product  # a sparse constant weight is read sparse (ops/sparse.py)

    return sparse_product(ctx, args[0], args[1]) or matmul(ctx, args[0], args[1])


@converter("Gemm")
def gemm(ctx, node, args):
    """Y = alpha * A' @ B' + beta * C, with C broadcast to [M, N] (optional from opset 11)."""
    a, b = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    if a.shape.ndim != 2 or b.shape.ndim != 2:
        raise ctx.error(f"Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    if node.attr("transA", 0):
        a = ctx.add("transpose", a, perm=(1, 0))
    if node.attr("transB", 0):
        b = ctx.add("transpose", b, perm=(1, 0))
    y = ctx.add("dot", a, b)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = ctx.pointwise("mul", y, ctx.scalar_like(alpha, y))
    if c is not None and not _broadcasts_to(c, y):  # numpy would broadcast [N, 1, 1] to [N, M, N]
        raise ctx.error(f"Gemm's C {c.shape} is not unidirectionally broadcastable to A'B' {y.shape}")
    if c is None or beta == 0.0:
        return y
    if beta != 1.0:
        c = ctx.pointwise("mul", c, ctx.scalar_like(beta, c))
    return ctx.pointwise("add", y, c)  # C broadcasts to [M, N]


def _broadcasts_to(c: Instruction, y: Instruction) -> bool:
    """Whether C's shape broadcasts to the [M, N] product's without growing it (where both are static)."""
    if c.shape.ndim > 2:
        return False
    if c.shape.is_dynamic or y.shape.is_dynamic:
        return True
    return all(d in (1, n) for d, n in zip(c.shape.lens[::-1], y.shape.lens[::-1]))


@converter("Det", since=11)
def det(ctx, node, args):
    return ctx.add("det", args[0])


# -- Einsum -----------------------------------------------------------------------------------------
def parse_equation(ctx, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Operand terms and output of an einsum equation, with `...` spelled out as unused letters and
    the implicit output (no `->`) made explicit as numpy defines it."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"einsum equation {equation!r} has {len(terms)} terms for {len(ranks)} inputs")
    spare = [c for c in string.ascii_letters if c not in eq]
    n_ell = max([r - (len(t) - 3) for t, r in zip(terms, ranks, strict=True) if "..." in t], default=0)
    ell = "".join(spare[:n_ell])
    full = []
    for t, r in zip(terms, ranks, strict=True):
        k = r - (len(t) - 3) if "..." in t else 0
        t = t.replace("...", ell[n_ell - k:] if k else "")
        if len(t) != r or (t and not t.isalpha()):
            raise ctx.error(f"einsum term {t!r} does not fit an input of rank {r}")
        full.append(t)
    if arrow:
        out = out.replace("...", ell)
    else:  # implicit: broadcast dims, then the letters used once, in alphabetical order
        once = [c for c in sorted(set("".join(full))) if "".join(full).count(c) == 1 and c not in ell]
        out = ell + "".join(once)
    return full, out


def _sum_out(ctx, term: str, x: Instruction, keep: set[str]) -> tuple[str, Instruction]:
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return term, x
    x = drop_axes(ctx, ctx.add("reduce_sum", x, axes=axes), axes)
    return "".join(c for c in term if c in keep), x


def _permute(ctx, term: str, x: Instruction, order: str) -> Instruction:
    perm = tuple(term.index(c) for c in order)
    return x if perm == tuple(range(len(perm))) else ctx.add("transpose", x, perm=perm)


def _contract(ctx, ta: str, a: Instruction, tb: str, b: Instruction, keep: set[str]):
    """One pairwise contraction as a batched dot: a -> [batch, M, K], b -> [batch, K, N]."""
    ta, a = _sum_out(ctx, ta, a, keep | set(tb))
    tb, b = _sum_out(ctx, tb, b, keep | set(ta))
    size = {c: n for t, x in ((ta, a), (tb, b)) for c, n in zip(t, x.shape.lens, strict=True)}
    for c in set(ta) & set(tb):  # size-1 dims broadcast against the other operand
        size[c] = max(a.shape.lens[ta.index(c)], b.shape.lens[tb.index(c)])
    a = broadcast_to(ctx, a, [size[c] for c in ta])
    b = broadcast_to(ctx, b, [size[c] for c in tb])
    batch = "".join(c for c in ta if c in tb and c in keep)
    inner = "".join(c for c in ta if c in tb and c not in keep)
    left = "".join(c for c in ta if c not in tb)
    right = "".join(c for c in tb if c not in ta)

    out = batch + left + right
    if not inner:  # nothing to sum: an elementwise / outer product is a broadcast multiply
        a_ = ctx.reshape(_permute(ctx, ta, a, batch + left), [size[c] if c in ta else 1 for c in out])
        b_ = ctx.reshape(_permute(ctx, tb, b, batch + right), [size[c] if c in tb else 1 for c in out])
        return out, ctx.pointwise("mul", a_, b_)

    def prod(letters):
        return math.prod(size[c] for c in letters)

    a3 = ctx.reshape(_permute(ctx, ta, a, batch + left + inner), [prod(batch), prod(left), prod(inner)])
    b3 = ctx.reshape(_permute(ctx, tb, b, batch + inner + right), [prod(batch), prod(inner), prod(right)])
    return out, ctx.reshape(ctx.add("dot", a3, b3), [size[c] for c in out])


def lower_einsum(ctx, terms: list[str], out: str, xs: list[Instruction]) -> Instruction:
    if any(len(set(t)) != len(t) for t in [*terms, out]):
        return ctx.add("einsum", *xs, equation=",".join(terms) + "->" + out)
    operands = list(zip(terms, xs, strict=True))
    while len(operands) > 1:  # contract left to right, keeping what later operands still need
        (ta, a), (tb, b), rest = operands[0], operands[1], operands[2:]
        keep = set(out).union(*[t for t, _ in rest])
        operands = [_contract(ctx, ta, a, tb, b, keep), *rest]
    term, x = _sum_out(ctx, *operands[0], set(out))
    return _permute(ctx, term, x, out)


@converter("Einsum", since=12)
def einsum(ctx, node, args):
    terms, out = parse_equation(ctx, node.attr("equation"), [x.shape.ndim for x in args])
    return lower_einsum(ctx, terms, out, list(args))

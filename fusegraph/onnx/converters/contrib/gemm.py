"""FusedMatMul -> transposes + numpy-style `dot` (the MatMul converter's) + a scale.

    Y = alpha * op(A) @ op(B)

where op moves the first dim behind the batch dims when transBatch is set ([d0, d1, .., dn-2, dn-1]
-> [d1, .., dn-2, d0, dn-1], what ORT's kernel reads without copying) and then swaps the last two
dims when trans is set. Batch dims then broadcast as in MatMul.
"""

from __future__ import annotations

from ...registry import converter
from ..gemm import matmul


def _operand(ctx, x, trans: bool, trans_batch: bool):
    rank = x.shape.ndim
    perm = list(range(rank))
    if trans_batch and rank > 2:
        perm = perm[1:-1] + [0, rank - 1]
    if trans and rank >= 2:
        perm[-2], perm[-1] = perm[-1], perm[-2]
    if perm == list(range(rank)):
        return x
    return ctx.add("transpose", x, perm=tuple(perm))


@converter("FusedMatMul", domain="com.microsoft")
def fused_matmul(ctx, node, args):
    a = _operand(ctx, args[0], bool(node.attr("transA", 0)), bool(node.attr("transBatchA", 0)))
    b = _operand(ctx, args[1], bool(node.attr("transB", 0)), bool(node.attr("transBatchB", 0)))
    y = matmul(ctx, a, b)
    alpha = float(node.attr("alpha", 1.0))
    return y if alpha == 1.0 else ctx.pointwise("mul", y, ctx.scalar_like(alpha, y))

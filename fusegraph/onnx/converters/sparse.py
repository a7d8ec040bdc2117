"""Sparse constants and the products with them (ops/sparse.py).

A SparseTensorProto (a graph's sparse_initializer, a Constant's sparse_value) becomes
`sparse_to_dense(values, flat indices)` over two literals: a MatMul whose weight it is reads the
literals through `sparse_matmul` instead (`sparse_product`), and any other reader folds it into a
dense literal. Besides MatMul, scripts build the product with:

* fusegraph.SparseMatMul(X, W) (domain "fusegraph"): X @ W for a constant W [K, N], sparse or dense
  (a dense one is kept as its nonzeros): what a reference-design script's `sparse_matmul` is;
* com.microsoft.SparseToDenseMatMul(A, B) (ONNX Runtime's contrib op): alpha * A' @ B' for a sparse
  A, computed as (B'^T @ A'^T)^T so that the sparse operand is the right one.
"""

from __future__ import annotations

import numpy as np
from onnx import SparseTensorProto

from ...ir.module import Instruction
from ..node import sparse_coo
from ..registry import converter


def sparse_constant(ctx, sparse: SparseTensorProto) -> Instruction:
    """`sparse`'s value as sparse_to_dense over its values and flat indices (two literals)."""
    values, indices, dims = sparse_coo(sparse)
    return ctx.add("sparse_to_dense", ctx.literal(values), ctx.literal(indices), dims=dims)


def coo_of(w: Instruction) -> tuple[Instruction, Instruction] | None:
    """The (values, indices) literals of a sparse constant `w`, else None."""
    if w.op.name == "sparse_to_dense" and all(x.is_literal for x in w.inputs):
        return w.inputs[0], w.inputs[1]
    return None


def sparse_product(ctx, a: Instruction, w: Instruction) -> Instruction | None:
    """a @ w as sparse_matmul when w is a 2-D sparse constant of a's type, else None."""
    coo = coo_of(w)
    if coo is None or w.shape.ndim != 2 or a.shape.ndim < 1 or a.shape.dtype != w.shape.dtype:
        return None
    k, n = w.shape.lens
    return ctx.add("sparse_matmul", a, *coo, k=k, n=n)


def _nonzeros(ctx, w: np.ndarray) -> tuple[Instruction, Instruction]:
    flat = np.flatnonzero(w)
    return ctx.literal(w.reshape(-1)[flat]), ctx.literal(flat.astype(np.int64))


@converter("SparseMatMul", domain="fusegraph")
def fusegraph_sparse_matmul(ctx, node, args):
    a, w = args
    y = sparse_product(ctx, a, w)
    if y is not None:
        return y
    if not w.is_literal:
        raise ctx.error(f"SparseMatMul's weight must be a constant (an initializer, dense or sparse), got {w.op}")
    if w.shape.ndim != 2 or a.shape.dtype != w.shape.dtype:
        raise ctx.error(f"SparseMatMul needs a 2-D weight of the input's type, got {a.shape} @ {w.shape}")
    k, n = w.shape.lens
    return ctx.add("sparse_matmul", a, *_nonzeros(ctx, np.asarray(w.literal)), k=k, n=n)


@converter("SparseToDenseMatMul", domain="com.microsoft")
def sparse_to_dense_matmul(ctx, node, args):
    a, b = args
    coo = coo_of(a)
    if coo is None or a.shape.ndim != 2 or b.shape.ndim != 2:
        raise ctx.error(f"SparseToDenseMatMul needs a 2-D sparse constant A and a 2-D B, got {a.op} "
                        f"{a.shape} and {b.shape}")
    values, indices = coo
    rows, cols = a.shape.lens
    if not node.attr("transA", 0):  # A^T's flat indices: (r, c) of A [rows, cols] -> c * rows + r
        idx = np.asarray(indices.literal)
        indices = ctx.literal(idx % cols * rows + idx // cols)
        rows, cols = cols, rows
    # now values/indices are A'^T [rows, cols]; B'^T [N, K] with K == rows
    bt = b if node.attr("transB", 0) else ctx.add("transpose", b, perm=(1, 0))
    if bt.shape.lens[1] != rows:
        raise ctx.error(f"SparseToDenseMatMul: inner dims differ: A' {[cols, rows]} and B' {list(bt.shape.lens[::-1])}")
    y = ctx.add("transpose", ctx.add("sparse_matmul", bt, values, indices, k=rows, n=cols), perm=(1, 0))
    alpha = node.attr("alpha", 1.0)
    return y if alpha == 1.0 else ctx.pointwise("mul", y, ctx.scalar_like(alpha, y))


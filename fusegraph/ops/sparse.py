"""Sparse constants and the product with one: `sparse_to_dense` and `sparse_matmul`.

A sparse constant is kept as two literals, its nonzero values [NNZ] and their flat (row-major)
indices [NNZ] into its dense dims, as ONNX's SparseTensorProto holds it (per-dimension indices are
flattened by the frontend). `sparse_matmul(a, values, indices)` is y = a @ W for that W [K, N]:
the kernels read the values and indices directly and never make W dense. `sparse_matmul(a, w)` with
a dense (constant) w [K, N] is the reference design's form (`migraphx.op("sparse_matmul")` over a
literal from fusegraph.make_sparse): the same product, the kernels packing w's nonzeros. `sparse_to_dense` makes
the dense value for any other reader; constant propagation folds it into a dense literal there, so
a sparse constant is densified exactly where a reader needs it dense.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Shape

_HALF = (DType.float16, DType.bfloat16)


def _check_coo(op: Op, values: Shape, indices: Shape) -> None:
    if values.ndim != 1 or indices.ndim != 1 or values.lens != indices.lens:
        raise ShapeError(f"{op}: values and flat indices are two [NNZ] vectors, got {values} and {indices}")
    if indices.dtype != DType.int64:
        raise ShapeError(f"{op}: indices are int64, got {indices}")


def densify(values: np.ndarray, indices: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """The dense array of dims `dims` with `values` at flat `indices` (repeated indices: the last
    value, as numpy assigns) and zeros elsewhere."""
    dense = np.zeros(int(np.prod(dims)), dtype=values.dtype)
    dense[indices] = values
    return dense.reshape(tuple(dims))


@register_op
class SparseToDense(Op):
    """The dense tensor of `dims` whose entries at flat `indices` are `values`, zeros elsewhere."""

    name = "sparse_to_dense"
    kind = OpKind.OPAQUE
    dims: tuple[int, ...] = ()

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        values, indices = inputs
        _check_coo(self, values, indices)
        return Shape.of(values.dtype, list(self.dims))

    def compute(self, args):
        return densify(np.asarray(args[0]), np.asarray(args[1]), self.dims)


@register_op
class SparseMatmul(Op):
    """a [..., k] @ W for the sparse W [k, n] given as values and flat indices, or as a dense 2-D
    second input (k and n are then its dims); half precision accumulates in float32, as `dot`."""

    name = "sparse_matmul"
    kind = OpKind.GEMM
    k: int = 0
    n: int = 0

    def compute_shape(self, inputs: Sequence[Shape]) -> Shape:
        if len(inputs) == 2:
            a, values = inputs
            if values.ndim != 2:
                raise ShapeError(f"{self}: a dense weight is 2-D, got {values}")
            k, n = values.lens
        else:
            a, values, indices = inputs
            _check_coo(self, values, indices)
            k, n = self.k, self.n
        if a.ndim < 1 or a.lens[-1] != k:
            raise ShapeError(f"{self}: the input's last dim must be k={k}, got {a}")
        if values.dtype != a.dtype:
            raise ShapeError(f"{self}: weights {values} and input {a} differ in dtype")
        return Shape.of(a.dtype, [*a.lens[:-1], n])

    def compute(self, args):
        a, *coo = (np.asarray(x) for x in args)
        w = coo[0] if len(coo) == 1 else densify(coo[0], coo[1], (self.k, self.n))
        if DType.from_numpy(a.dtype) in _HALF:
            return np.matmul(a.astype(np.float32), w.astype(np.float32)).astype(a.dtype)
        return np.matmul(a, w)

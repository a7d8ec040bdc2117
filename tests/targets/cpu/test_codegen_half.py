"""Generated C kernels in half precision: float16/bfloat16 inputs computed in float32 and rounded once,
as PointwiseOp.compute does; explicit conversions inside an expression round every operation."""

from __future__ import annotations

import numpy as np
import pytest

from fusegraph.ir import DType
from fusegraph.ops.scalar import evaluate, parse_expr

from .test_codegen import F32, build, rng, values  # noqa: F401  (skips the module without a compiler)

cg = pytest.importorskip("fusegraph.targets.cpu.codegen")


HALF_OPS = ["add", "mul", "div", "sub", "max", "exp", "tanh", "erf", "sigmoid", "gelu", "sqrt", "relu", "neg",
            "less"]


@pytest.mark.parametrize("dtype", [DType.float16, DType.bfloat16])
def test_half_precision_pointwise_ops_compute_in_float32(dtype):
    """PointwiseOp.compute's rule: half inputs computed in float32, rounded once to the output."""
    from fusegraph.ir import make_op

    ops = [make_op(name) for name in HALF_OPS]
    srcs = []
    for op in ops:
        out = op.output_dtype([dtype] * op.arity)
        srcs.append(cg.pointwise_kernel(op.expr, [dtype] * op.arity, out, 1, (1,) * op.arity))
    lib = build(srcs, threads=1)
    finite = np.clip(values(F32, 999), -6e4, 6e4)  # inf and nan stay; no overflow in the cast
    args = [np.abs(finite).astype(dtype.np), rng.permutation(finite).astype(dtype.np)]
    for op, src in zip(ops, srcs):
        with np.errstate(over="ignore"):  # exp beyond float16's range is inf in both
            want = op.compute(args[:op.arity])
        got = lib[src.name](np.empty(999, want.dtype), *args[:op.arity])
        ulp = 2.0 ** (-10 if dtype == DType.float16 else -7)
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=ulp, atol=1e-7,
                                   err_msg=op.name)


def test_half_conversions_inside_an_expression_round_every_operation():
    """numpy's float16 arithmetic after an explicit convert: each result rounds to half."""
    e = parse_expr("add(mul(convert_float16(x0), 3.0), convert_bfloat16(x1))")
    x = values(F32, 800)
    want = np.asarray(evaluate(e, [x, x]))
    src = cg.pointwise_kernel(e, [F32, F32], DType.from_numpy(want.dtype), 1, (1, 1))
    got = build([src])[src.name](np.empty(800, want.dtype), x, x)
    np.testing.assert_array_equal(got, want)

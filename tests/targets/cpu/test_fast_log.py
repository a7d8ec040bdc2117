"""The cpu codegen's float32 log approximation (cmath.py fg_logf), which fast-math kernels call as they
call fg_expf: within 1e-6 relative of float64 log over positive float32s, denormals and values near 1
included, and libm's special values."""

from __future__ import annotations

import numpy as np

from fusegraph.ir import DType
from fusegraph.ops.scalar import Call, Var
from fusegraph.targets.cpu import codegen as cg

F32 = DType.float32
rng = np.random.default_rng(13)


def _log_kernel():
    src = cg.pointwise_kernel(Call("log", (Var(0),)), (F32,), F32, 1, (1,))
    assert "fg_logf" in src.code
    return cg.build_library([src], threads=1)[src.name]


def test_fast_float32_log_within_1e6_relative():
    log = _log_kernel()
    x = np.concatenate([np.exp(rng.uniform(np.log(1.5e-45), np.log(3.3e38), 1 << 19)),
                        1 + rng.uniform(-1e-2, 1e-2, 1 << 17), 1 + rng.uniform(-1e-6, 1e-6, 1 << 12)]).astype(np.float32)
    x = x[(x > 0) & (x != 1)]
    got = log(np.empty_like(x), x).astype(np.float64)
    ref = np.log(x.astype(np.float64))
    rel = np.abs(got - ref) / np.abs(ref)
    assert rel.max() < 1e-6, f"log: max relative error {rel.max():.3g} at {x[rel.argmax()]}"


def test_fast_float32_log_special_values_as_numpy():
    special = np.array([0.0, -0.0, -1.0, -1e-40, np.inf, -np.inf, np.nan, 1.0], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(_log_kernel()(np.empty_like(special), special), np.log(special))

"""Generated code's fast paths against numpy: float32 pow of exponent 2 or 3 as multiplications
(cmath.py's fg_powf, as ONNX Runtime's Pow), and a softmax's exps in a loop of their own before
their double sum (codegen/reduce.py's split passes)."""

from __future__ import annotations

import numpy as np

import fusegraph
from fusegraph.ir import DType
from fusegraph.ops.scalar import Call, Var
from fusegraph.targets.cpu import codegen as cg

F32 = DType.float32
rng = np.random.default_rng(12)


def test_float32_pow_multiplies_for_exponents_2_and_3_as_onnx_runtime_does():
    """x^2 is the correctly rounded x * x; x^3 (GPT's tanh GELU) x * x * x; both, and the other
    exponents (libm's powf), within the float32 tolerance of numpy's power, infinities, NaNs,
    overflow and underflow alike."""
    src = cg.pointwise_kernel(Call("pow", (Var(0), Var(1))), (F32, F32), F32, 1, (1, 1))
    assert any(name == "fg_powf" for name, _ in src.helpers)
    kernel = cg.build_library([src], threads=1)[src.name]
    mag = np.exp(rng.uniform(np.log(1e-15), np.log(1e15), 4000)).astype(np.float32)
    x = np.concatenate([mag, -mag, np.float32([0, -0.0, np.inf, -np.inf, np.nan, 1, -1])])
    for b in (2.0, 3.0, 2.5, -1.0, 0.5):
        e = np.full_like(x, b)
        with np.errstate(all="ignore"):
            want = np.power(x, e)
        got = kernel(np.empty_like(x), x, e)
        if b == 2.0:  # the correctly rounded square (numpy's SIMD power is itself an ulp off it)
            np.testing.assert_array_equal(got, x * x)
        # (numpy's powf and libm's are themselves an ulp apart: test_codegen's scalar tolerance)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-44)


def test_softmax_exp_loop_is_apart_from_its_double_sum():
    """float32 softmax: the exps are computed (and kept) in a loop of their own, then summed in
    double from the buffer: one loop doing both ran at double's vector width."""
    s = cg.softmax_kernel(F32, (158, 79))
    loops = s.code.split("for (int64_t j = 0;")[1:]
    exp_loops = [body for body in loops if "fg_expf(" in body.split("}")[0]]
    sum_loops = [body for body in loops if "+= (double)" in body.split("}")[0]]
    assert len(exp_loops) == 1 and sum_loops and all("fg_expf(" not in b.split("}")[0] for b in sum_loops)
    x = rng.standard_normal((158, 79)).astype(np.float32) * 4
    got = cg.build_library([s], threads=1)[s.name](np.empty_like(x), x)
    np.testing.assert_allclose(got, fusegraph.ir.make_op("softmax", axis=1).compute([x]), rtol=1e-5, atol=1e-6)

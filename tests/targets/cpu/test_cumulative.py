"""CumSum/CumProd on the cpu target (kernels/cumulative.py): generated C in the native program, bit
for bit the reference's accumulate (in order, the first result the first element, -0.0 kept;
integers wrapping)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.native_program import Region
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(4)


def _inputs(shape, dtype):
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if dtype == np.float32:
        x.flat[0] = 0.0  # -0.0 once negated: the first result keeps its sign
    else:
        x.flat[0] = np.iinfo(dtype).max  # sums and products that wrap
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("shape,axis", [((1, 16), 1), ((3, 5, 4), 1), ((6, 2), -2)])
def test_cumsum_is_generated_c_like_the_reference(dtype, exclusive, reverse, shape, axis):
    x = _inputs(shape, dtype)
    model = make_model([helper.make_node("Neg", ["x"], ["s"]),
                        helper.make_node("CumSum", ["s", "ax"], ["out"], exclusive=exclusive, reverse=reverse)],
                       {"x": x}, ["out"], {"ax": np.array(axis, np.int64)}, opset=14)
    _check(fusegraph.parse_onnx(model), fusegraph.parse_onnx(model), x, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, True)])
def test_cumprod_is_generated_c_like_the_reference(dtype, exclusive, reverse):
    from fusegraph.ir import DType, Program, Shape, make_op

    def program():
        p = Program()
        m = p.main
        x = m.add_parameter("x", Shape.of(DType.from_numpy(np.dtype(dtype)), (3, 5, 4)))
        y = m.add(make_op("cumprod", axis=1, exclusive=exclusive, reverse=reverse), m.add(make_op("neg"), x))
        m.add_return(y)
        return p

    _check(program(), program(), _inputs((3, 5, 4), dtype) % 3 if dtype == np.int64 else _inputs((3, 5, 4), dtype),
           dtype)


def _check(p, ref, x, dtype):
    p.compile(target_or_skip("cpu"))
    (row,) = p.executable.main.thread_plan()[0]
    assert isinstance(row[0], Region) and "fg_cumulative_" in p.executable.built.library.source
    ref.compile(fusegraph.get_target("ref"))
    with np.errstate(over="ignore"):
        want = ref.run({"x": x})[0]
    got = p.run({"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want)) if dtype == np.float32 else True

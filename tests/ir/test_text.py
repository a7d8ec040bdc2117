import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegraph  # noqa: F401
from fusegraph.errors import IRError
from fusegraph.ir import DType, Program, Shape, make_op
from fusegraph.ops.scalar import Var, call, convert, parse_expr
from fusegraph.targets.ref.interpreter import run_module


def test_program_round_trip_with_literals_and_attributes():
    p = Program()
    m = p.main
    x = m.add_parameter("x", Shape.of(DType.float32, [2, 3]))
    small = m.add_literal(np.array([1.5, -np.inf, np.nan], np.float32))
    big = m.add_literal(np.arange(24, dtype=np.float16).reshape(2, 3, 4))
    b = m.add(make_op("broadcast", out_lens=(2, 3)), small)
    y = m.add(make_op("leaky_relu", alpha=0.25), m.add(make_op("add"), x, b))
    t = m.add(make_op("transpose", perm=(2, 0, 1)), big)
    c = m.add(make_op("convert", to=DType.bfloat16), y)
    m.add_return(c, t)
    text = p.to_text()
    q = Program.from_text(text)
    assert q.to_text() == text
    feed = {"x": np.ones((2, 3), np.float32)}
    for a, e in zip(run_module(q.main, feed), run_module(p.main, feed)):
        np.testing.assert_array_equal(a.astype(np.float32), e.astype(np.float32))


def test_elided_literals_cannot_be_read_back():
    p = Program()
    lit = p.main.add_literal(np.zeros(100, np.float32))
    p.main.add_return(lit)
    assert "sha1:" in str(p)
    with pytest.raises(IRError, match="elided"):
        Program.from_text(str(p))


@pytest.mark.parametrize("bad", [
    "module main\n  %0 = nosuchop(%1) : float32[1]\n",
    "module main\n  %0 = @param[param_name='x'] : float32[2]\n  %1 = relu(%0) : float32[3]\n  @return(%1)\n",
    "module main\n  %0 = @param[param_name='x'] : floaty[2]\n",
    "module main\n  %1 = relu(%7) : float32[2]\n",
])
def test_bad_text_is_a_typed_error(bad):
    with pytest.raises(IRError):
        Program.from_text(bad)


exprs = st.recursive(
    st.builds(Var, st.integers(0, 2)),
    lambda sub: st.one_of(
        st.builds(lambda a, b: a + b, sub, sub),
        st.builds(lambda a: call("exp", a), sub),
        st.builds(lambda a, f: a * f, sub, st.floats(-4, 4, allow_nan=False, width=32)),
        st.builds(lambda c, a, b: call("where", call("gt", c, 0), a, b), sub, sub, sub),
        st.builds(lambda a: convert(a, DType.float16), sub),
    ),
    max_leaves=12,
)


@settings(max_examples=150)
@given(exprs)
def test_scalar_expression_text_round_trip(e):
    assert parse_expr(str(e)) == e

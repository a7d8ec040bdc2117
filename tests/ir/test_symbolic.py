"""Symbolic dims: polynomials over named input dims, carried by the ops' shape rules (ir/symbolic.py)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusegraph.ir import Dim
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Shape, join_shapes
from fusegraph.ir.symbolic import Sym
from fusegraph.ir.text import parse_shape

F32 = DType.float32
BATCH, SEQ = Dim(1, 32, sym="batch"), Dim(8, 384, sym="seq")
X = Shape.dynamic(F32, [BATCH, SEQ, 768])  # BERT's hidden states


def sym(shape, k):
    return None if shape.dims[k].sym is None else str(shape.dims[k].sym)


@given(st.lists(st.tuples(st.integers(-5, 5), st.sampled_from(["", "a", "b", "a*b", "a*a"])), max_size=4),
       st.integers(1, 50), st.integers(1, 50))
def test_a_polynomial_prints_parses_back_and_evaluates(terms, a, b):
    p = Sym.const(0)
    for c, m in terms:
        p = p + c * (Sym.parse(m) if m else Sym.const(1))
    assert Sym.parse(str(p)) == p
    want = sum(c * {"": 1, "a": a, "b": b, "a*b": a * b, "a*a": a * a}[m] for c, m in terms)
    assert p.evaluate({"a": a, "b": b}) == want


def test_exact_division_only_when_every_coefficient_divides():
    assert str((Sym.name("seq") * 768).exact_div(64)) == "12*seq"
    assert (Sym.name("seq") * 2 + 1).exact_div(2) is None


@pytest.mark.parametrize("op, inputs, want", [
    (make_op("reshape_dynamic", dims=(-1, 768)), [X], ["batch*seq", None]),          # flatten tokens
    (make_op("reshape_dynamic", dims=(0, 0, 12, 64)), [X], ["batch", "seq", None, None]),  # split heads
    (make_op("transpose", perm=(1, 0, 2)), [X], ["seq", "batch", None]),
    (make_op("concat", axis=1), [X, X], ["batch", "2*seq", None]),
    (make_op("slice", axes=(2,), starts=(0,), ends=(64,), steps=(1,)), [X], ["batch", "seq", None]),
])
def test_shape_rules_carry_symbols(op, inputs, want):
    out = op.infer_shape(inputs)
    assert [sym(out, k) for k in range(out.ndim)] == want


def test_a_dim_that_also_depends_on_an_unnamed_dim_gets_no_symbol():
    other = Shape.dynamic(F32, [BATCH, Dim(1, 16), 768])  # an unnamed sequence
    out = make_op("concat", axis=1).infer_shape([X, other])
    assert sym(out, 0) == "batch" and sym(out, 1) is None and out.dims[1] == Dim(9, 400)


def test_a_strided_convolution_floors_its_dim_so_it_gets_no_symbol():
    img = Shape.dynamic(F32, [BATCH, 3, Dim(320, 640, sym="h"), Dim(320, 640, sym="w")])
    w = Shape.of(F32, [16, 3, 3, 3])
    out = make_op("convolution", stride=(2, 2), padding=(1, 1, 1, 1)).infer_shape([img, w])
    assert [sym(out, k) for k in range(4)] == ["batch", None, None, None]
    assert out.dims[2] == Dim(160, 320)
    same = make_op("convolution", padding=(1, 1, 1, 1)).infer_shape([img, w])  # stride 1: h + 2 - 3 + 1
    assert [sym(same, k) for k in range(4)] == ["batch", None, "h", "w"]


def test_symbols_print_and_parse_back_and_do_not_change_equality():
    out = make_op("reshape_dynamic", dims=(-1, 768)).infer_shape([X])
    assert str(out) == "float32[{8..12288@batch*seq},768]"
    back = parse_shape(str(out))
    assert back == out and str(back.dims[0].sym) == "batch*seq"
    assert Dim(1, 32, sym="batch") == Dim(1, 32)  # a fact about the value, not part of the range
    assert Dim(4, 4, sym="batch").sym is None     # a fixed dim is its number


def test_joining_two_values_of_different_symbols_names_neither():
    a = Shape.dynamic(F32, [Dim(1, 32, sym="batch")])
    b = Shape.dynamic(F32, [Dim(1, 32, sym="n")])
    assert join_shapes(a, b).dims[0].sym is None
    assert str(join_shapes(a, a).dims[0].sym) == "batch"

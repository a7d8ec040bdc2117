import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusegraph.errors import ShapeError
from fusegraph.ir import Dim, DType, Shape
from fusegraph.ir.text import parse_shape

lens_st = st.lists(st.integers(0, 7), max_size=5)
dtype_st = st.sampled_from([d for d in DType if d is not DType.string])


@given(dtype_st, lens_st)
def test_standard_strides_match_numpy(dtype, lens):
    s = Shape.of(dtype, lens)
    a = np.empty(lens, dtype=np.float32)
    if all(n > 0 for n in lens):
        assert tuple(x // 4 for x in a.strides) == s.strides
    assert s.standard and s.elements == a.size and s.bytes == a.size * dtype.itemsize


@given(dtype_st, lens_st)
def test_shape_text_round_trip(dtype, lens):
    s = Shape.of(dtype, lens)
    assert parse_shape(str(s)) == s


@given(dtype_st, st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(5, 9))), max_size=4))
def test_dynamic_shape_text_round_trip(dtype, ranges):
    s = Shape.dynamic(dtype, [Dim(lo, hi) for lo, hi in ranges])
    assert parse_shape(str(s)) == s
    assert s.is_dynamic == any(lo != hi for lo, hi in ranges)


def test_dynamic_shape_has_no_lens():
    s = Shape.dynamic(DType.float32, [Dim(1, 8), 3])
    with pytest.raises(ShapeError):
        _ = s.lens
    assert s.matches((4, 3)) and not s.matches((9, 3)) and not s.matches((4, 3, 1))
    assert str(s) == "float32[{1..8},3]"


def test_nonstandard_strides_print():
    s = Shape.of(DType.float16, [2, 3], [1, 2])
    assert str(s) == "float16[2,3]@[1,2]" and not s.standard
    assert parse_shape(str(s)).strides == (1, 2)


def test_every_dtype_maps_to_onnx_and_numpy():
    for d in DType:
        assert DType.from_onnx(d.onnx) is d
        if d is not DType.string:
            assert DType.from_numpy(d.np) is d

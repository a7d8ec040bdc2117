"""migraphx.argument and the functions that make one."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph.migraphx as migraphx
from fusegraph.errors import ArgumentError, ShapeError


def test_numpy_round_trip_without_copy():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = migraphx.argument(x)
    assert np.shares_memory(np.asarray(a), x) and a.data_ptr() == x.ctypes.data
    back = np.array(a)
    np.testing.assert_array_equal(back, x)
    assert not np.shares_memory(back, x)  # np.array copies, as with any buffer
    assert a.tolist() == x.reshape(-1).tolist()
    assert a.get_shape().lens() == [3, 4] and a.get_shape().type_string() == "float_type"


def test_equality_by_value_and_type():
    x = np.arange(4, dtype=np.int32)
    assert migraphx.argument(x) == migraphx.argument(x.copy())
    assert migraphx.argument(x) != migraphx.argument(x.astype(np.int64))
    assert migraphx.argument(x) != migraphx.argument(x + 1)


def test_generate_argument_is_seeded_and_typed():
    s = migraphx.shape(type="float", lens=[4, 5])
    a, b, c = (np.array(migraphx.generate_argument(s, seed)) for seed in (0, 0, 1))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.dtype == np.float32 and a.shape == (4, 5) and a.min() >= -1 and a.max() < 1
    ids = np.array(migraphx.generate_argument(migraphx.shape(type="int64_type", lens=[100])))
    assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < 32
    flags = np.array(migraphx.generate_argument(migraphx.shape(type="bool_type", lens=[50])))
    assert flags.dtype == np.bool_ and flags.any() and not flags.all()


def test_fill_and_create_argument():
    s = migraphx.shape(type="half_type", lens=[2, 2])
    filled = np.array(migraphx.fill_argument(s, 3))
    assert filled.dtype == np.float16 and (filled == 3).all()
    made = np.array(migraphx.create_argument(migraphx.shape(type="int32", lens=[2, 3]), [1, 2, 3, 4, 5, 6]))
    np.testing.assert_array_equal(made, np.arange(1, 7, dtype=np.int32).reshape(2, 3))
    with pytest.raises(ArgumentError, match="5 values"):
        migraphx.create_argument(migraphx.shape(type="int32", lens=[2, 3]), [1, 2, 3, 4, 5])


def test_dynamic_shape_has_no_argument():
    s = migraphx.shape(type="float", dyn_dims=[migraphx.shape.dynamic_dimension(1, 4), 3])
    with pytest.raises(ShapeError, match="dynamic"):
        migraphx.generate_argument(s)


def test_negative_strides_become_a_contiguous_copy():
    x = np.arange(6, dtype=np.float32)[::-1]
    a = migraphx.argument(x)
    assert a.get_shape().strides() == [1]
    np.testing.assert_array_equal(np.array(a), x)


def test_data_without_a_tensor_type_is_refused():
    with pytest.raises(ArgumentError, match="datetime64"):
        migraphx.argument(np.array(["2026-12-01"], dtype="datetime64[D]"))

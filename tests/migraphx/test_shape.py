"""migraphx.shape and dynamic_dimension: MIGraphX's methods over fusegraph's Shape."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph.migraphx as migraphx
from fusegraph.errors import ArgumentError, NotSupportedError, ShapeError
from fusegraph.ir import DType, Shape

dd = migraphx.shape.dynamic_dimension


def test_static_shape_queries():
    s = migraphx.shape(type="float_type", lens=[2, 3, 4])
    assert s.lens() == [2, 3, 4] and s.strides() == [12, 4, 1] and s.ndim() == 3
    assert s.type() == migraphx.shape.type_t.float_type and s.type_string() == "float_type"
    assert s.elements() == 24 and s.type_size() == 4 and s.bytes() == 96
    assert s.standard() and s.packed() and not s.transposed() and not s.broadcasted() and not s.scalar()
    assert not s.dynamic()
    assert repr(s) == "float_type, {2, 3, 4}, {12, 4, 1}"


@pytest.mark.parametrize("name, dtype", [("float", DType.float32), ("half_type", DType.float16),
                                         ("int64_type", DType.int64), ("bf16_type", DType.bfloat16),
                                         ("fp8e4m3fnuz_type", DType.float8_e4m3fnuz), ("bool", DType.bool)])
def test_type_names_map_to_dtypes(name, dtype):
    s = migraphx.shape(type=name, lens=[1])
    assert s.fusegraph_shape.dtype == dtype
    assert migraphx.shape(type=s.type(), lens=[1]) == s  # the enum value round-trips


def test_transposed_and_broadcast_strides():
    t = migraphx.shape(type="float", lens=[3, 2], strides=[1, 3])
    assert t.transposed() and t.packed() and not t.standard()
    b = migraphx.shape(type="float", lens=[4, 3], strides=[0, 1])
    assert b.broadcasted() and not b.packed() and not b.standard()


def test_scalar_reads_as_migraphx_does():
    s = migraphx.shape.wrap(Shape.of(DType.float32, []))
    assert s.lens() == [1] and s.strides() == [0] and s.scalar() and s.elements() == 1


def test_dynamic_shape():
    s = migraphx.shape(type="float", dyn_dims=[dd(1, 8, {4}), dd(3, 3), 224])
    assert s.dynamic() and s.ndim() == 3
    d0 = s.dyn_dims()[0]
    assert (d0.min, d0.max, d0.optimals) == (1, 8, {4}) and not d0.is_fixed()
    assert s.dyn_dims()[2].is_fixed()
    assert s.min_lens() == [1, 3, 224] and s.max_lens() == [8, 3, 224] and s.opt_lens() == [4, 3, 224]
    with pytest.raises(ShapeError, match="dynamic"):
        s.lens()
    assert repr(s) == "float_type, {[1, 8, {4}], [3, 3], [224, 224]}"


def test_equality_follows_type_lens_and_strides():
    a = migraphx.shape(type="float", lens=[2, 3])
    assert a == migraphx.shape(type="float_type", lens=[2, 3])
    assert a != migraphx.shape(type="half", lens=[2, 3])
    assert a != migraphx.shape(type="float", lens=[3, 2])
    assert a != migraphx.shape(type="float", lens=[2, 3], strides=[1, 2])


def test_bad_types_and_dims_name_the_culprit():
    with pytest.raises(ArgumentError, match="'floaty'"):
        migraphx.shape(type="floaty", lens=[1])
    with pytest.raises(NotSupportedError, match="tuple_type"):
        migraphx.shape(type="tuple_type", lens=[1])
    with pytest.raises(ArgumentError, match="max 1 < min 2"):
        dd(2, 1)
    with pytest.raises(ShapeError, match="rank"):
        migraphx.shape(type="float", lens=[2, 3], strides=[1])


def test_argument_shape_of_numpy_views():
    a = np.zeros((3, 4), np.float16)[:, ::2]
    s = migraphx.argument(a).get_shape()
    assert s.type_string() == "half_type" and s.lens() == [3, 2] and s.strides() == [4, 2] and not s.packed()

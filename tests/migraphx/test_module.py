"""Building programs by hand: program(), get_main_module(), add_parameter/literal/instruction/return
with migraphx.op, checked on the ref target against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph.migraphx as migraphx
from fusegraph.errors import ArgumentError, IRError, NotSupportedError, ShapeError


def _run(p: migraphx.program, feeds: dict) -> list[np.ndarray]:
    p.compile(migraphx.get_target("ref"))
    return [np.array(r) for r in p.run(feeds)]


def test_add_two_literals():
    p = migraphx.program()
    mm = p.get_main_module()
    one = mm.add_literal(np.array([1.0], np.float32))
    two = mm.add_literal(np.array([2.0], np.float32))
    total = mm.add_instruction(migraphx.op("add"), [one, two])
    mm.add_return([total])
    assert total.shape().lens() == [1] and total.shape().type_string() == "float_type"
    assert _run(p, {})[0].tolist() == [3.0]


def test_parameters_and_ops_with_migraphx_attributes():
    p = migraphx.program()
    mm = p.get_main_module()
    x = mm.add_parameter("x", migraphx.shape(type="float_type", lens=[2, 3]))
    w = mm.add_literal(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = mm.add_instruction(migraphx.op("dot"), [x, w])
    t = mm.add_instruction(migraphx.op("transpose", permutation=[1, 0]), [y])
    b = mm.add_instruction(migraphx.op("multibroadcast", out_lens=[4, 2]), [mm.add_literal(np.ones((1, 2), np.float32))])
    r = mm.add_instruction(migraphx.op("relu"), [mm.add_instruction(migraphx.op("sub"), [t, b])])
    h = mm.add_instruction(migraphx.op("convert", target_type=migraphx.shape.type_t.half_type), [r])
    mm.add_return([r, h])
    assert p.get_parameter_names() == ["x"]
    assert [s.lens() for s in p.get_output_shapes()] == [[4, 2], [4, 2]]
    assert p.get_output_shapes()[1].type_string() == "half_type"
    x_val = np.random.default_rng(0).standard_normal((2, 3), dtype=np.float32)
    expected = np.maximum((x_val @ np.arange(12, dtype=np.float32).reshape(3, 4)).T - 1, 0)
    got, half = _run(p, {"x": x_val})
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert half.dtype == np.float16


def test_convolution_with_symmetric_padding():
    """MIGraphX gives padding once per spatial axis; fusegraph's convolution takes begins and ends."""
    p = migraphx.program()
    mm = p.get_main_module()
    x = mm.add_parameter("x", migraphx.shape(type="float", lens=[1, 1, 4, 4]))
    w = mm.add_literal(np.ones((1, 1, 3, 3), np.float32))
    y = mm.add_instruction(migraphx.op("convolution", padding=[1, 1], stride=[1, 1], dilation=[1, 1]), [x, w])
    mm.add_return([y])
    assert y.shape().lens() == [1, 1, 4, 4]
    x_val = np.ones((1, 1, 4, 4), np.float32)
    got = _run(p, {"x": x_val})[0]
    expected = np.array([[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]], np.float32)
    np.testing.assert_array_equal(got[0, 0], expected)


def test_pooling_mode_enum():
    p = migraphx.program()
    mm = p.get_main_module()
    x = mm.add_parameter("x", migraphx.shape(type="float", lens=[1, 1, 2, 2]))
    y = mm.add_instruction(migraphx.op("pooling", mode=migraphx.op.pooling_mode.max, lengths=[2, 2],
                                       stride=[2, 2], padding=[0, 0]), [x])
    mm.add_return([y])
    assert _run(p, {"x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)})[0].reshape(-1).tolist() == [3.0]


def test_enum_attributes_become_their_values():
    assert migraphx.op("rnn", direction=migraphx.op.rnn_direction.bidirectional).build([]).direction == "bidirectional"


def test_module_print_and_repr(capsys):
    p = migraphx.program()
    mm = p.get_main_module()
    mm.add_return([mm.add_instruction(migraphx.op("neg"), [mm.add_parameter("a", migraphx.shape(lens=[2]))])])
    mm.print()
    printed = capsys.readouterr().out
    assert printed.startswith("module main") and "neg(" in printed and printed.strip() == repr(mm).strip()


def test_building_errors_name_the_culprit():
    mm = migraphx.program().get_main_module()
    with pytest.raises(NotSupportedError, match="'frobnicate'"):
        migraphx.op("frobnicate")
    with pytest.raises(ArgumentError, match="instruction_ref"):
        mm.add_instruction(migraphx.op("relu"), [np.zeros(2)])
    with pytest.raises(IRError, match="transpose"):
        mm.add_instruction(migraphx.op("transpose", axes=[1]), [mm.add_literal(np.zeros((2, 2), np.float32))])
    a = mm.add_literal(np.zeros((2, 3), np.float32))
    with pytest.raises(ShapeError):
        mm.add_instruction(migraphx.op("dot"), [a, a])

import numpy as np
import pytest

import fusegraph  # noqa: F401  (registers ops)
from fusegraph.errors import IRError, ShapeError
from fusegraph.ir import DType, Program, Shape, make_op
from fusegraph.targets.ref.interpreter import run_module


def small_program():
    p = Program()
    m = p.main
    x = m.add_parameter("x", Shape.of(DType.float32, [2, 3]))
    y = m.add_parameter("y", Shape.of(DType.float32, [2, 3]))
    a = m.add(make_op("add"), x, y)
    r = m.add(make_op("relu"), a)
    m.add_return(r, a)
    return p, (x, y, a, r)


def test_build_and_run():
    p, _ = small_program()
    p.verify()
    x = np.array([[1, -2, 3], [4, -5, 6]], np.float32)
    out = run_module(p.main, {"x": x, "y": np.ones_like(x)})
    np.testing.assert_array_equal(out[0], np.maximum(x + 1, 0))
    np.testing.assert_array_equal(out[1], x + 1)


def test_shape_rule_checked_at_creation():
    p = Program()
    x = p.main.add_parameter("x", Shape.of(DType.float32, [2, 3]))
    z = p.main.add_parameter("z", Shape.of(DType.float32, [3, 2]))
    with pytest.raises(ShapeError, match="equal lens"):
        p.main.add(make_op("add"), x, z)


def test_replace_and_remove_keep_users_consistent():
    p, (x, y, a, r) = small_program()
    m = p.main
    b = m.insert(r, make_op("mul"), x, y)
    m.replace(a, b)
    assert a.users == [] and r.inputs == [b] and r in b.users
    m.remove(a)
    p.verify()
    assert [i.op.name for i in m] == ["@param", "@param", "mul", "relu", "@return"]


def test_remove_used_instruction_refused():
    p, (x, y, a, r) = small_program()
    with pytest.raises(IRError, match="still used"):
        p.main.remove(a)


def test_verify_catches_broken_order():
    p, (x, y, a, r) = small_program()
    m = p.main
    m.instructions.remove(a)
    m.instructions.insert(m.instructions.index(r) + 1, a)
    with pytest.raises(IRError, match="not defined before use"):
        p.verify()


def test_verify_catches_stale_shape():
    p, (x, y, a, r) = small_program()
    r.shape = Shape.of(DType.float32, [3, 2])
    with pytest.raises(IRError, match="shape"):
        p.verify()


def test_duplicate_parameter_refused():
    p = Program()
    p.main.add_parameter("x", Shape.of(DType.float32, [1]))
    with pytest.raises(IRError, match="twice"):
        p.main.add_parameter("x", Shape.of(DType.float32, [1]))

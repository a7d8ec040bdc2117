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


def test_the_prologue_count_follows_every_edit():
    """New literals go after the leading params and literals; the module keeps that position as a
    count between edits (a rescan per literal was quadratic), and looks positions up near the last
    one found. Against a rescan after each edit of a random sequence: literals added, instructions
    inserted inside and after the prologue, removed, moved, and a new list assigned."""
    from fusegraph.ir.builtin import Literal, Param

    def scanned(m):
        k = 0
        while k < len(m.instructions) and isinstance(m.instructions[k].op, (Param, Literal)):
            k += 1
        return k

    rng = np.random.default_rng(0)
    p, (x, y, a, r) = small_program()
    m = p.main
    for _ in range(300):
        body = [i for i in m.instructions if not i.is_param and i.op.name != "@return"]
        move = rng.integers(6)
        if move == 0:
            m.add_literal(np.ones((2, 3), np.float32))
        elif move == 1:  # a computing instruction placed anywhere: inside the prologue or after it
            m.insert(m.instructions[rng.integers(len(m.instructions))], make_op("neg"), x)
        elif move == 2:
            dead = [i for i in body if not i.users]
            if dead:
                m.remove(dead[rng.integers(len(dead))])
        elif move == 3:
            literals = [i for i in m.instructions if i.is_literal and not i.users]
            if literals:
                m.move_before(literals[rng.integers(len(literals))], m.instructions[rng.integers(len(m.instructions))])
        elif move == 4:
            lit = [i for i in m.instructions if i.is_literal]
            if lit:
                m.insert(lit[0], make_op("relu"), x)  # a computing instruction inside the prologue
        else:
            m.instructions = list(m.instructions)
        assert m._prologue_end() == scanned(m)
        for k in rng.integers(len(m.instructions), size=3):  # positions, near and far from the last one
            assert m.index(m.instructions[k]) == k
    removed = m.add_literal(np.ones(1, np.float32))
    m.remove(removed)
    with pytest.raises(IRError, match="not in module"):
        m.index(removed)

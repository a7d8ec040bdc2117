"""Program.copy: a new program to change without changing the original, with submodules, provenance
and metadata, on a chain deeper than copy.deepcopy survives."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import fusegraph
from fusegraph.errors import CompileError

DEPTH = 1500  # copy.deepcopy of the parsed program overflows Python's stack at this depth


def deep_model():
    then = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"], name="twice")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="neg")], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [4])])
    nodes = [helper.make_node("If", ["c"], ["h0"], name="branch", then_branch=then, else_branch=other)]
    nodes += [helper.make_node("Relu" if k % 2 else "Abs", [f"h{k}"], [f"h{k + 1}"], name=f"n{k}") for k in range(DEPTH)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                                       helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info(f"h{DEPTH}", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_copy_is_the_same_program_and_independent():
    p = fusegraph.parse_onnx(deep_model())
    p.metadata["note"] = "kept"
    q = p.copy()
    assert q.to_text() == p.to_text() and q.metadata == p.metadata
    assert [i.origin for i in q.main.instructions] == [i.origin for i in p.main.instructions]
    assert all(a is not b for a, b in zip(q.main.instructions, p.main.instructions, strict=True))
    sub = next(i for i in q.main.instructions if i.module_args).module_args[0]
    assert sub is q.modules[sub.name] and sub.parent is q.main
    before = p.to_text()
    last = q.main.return_ins.inputs[0]
    q.main.replace_inputs(q.main.return_ins, [last.inputs[0]])  # the copy changes ...
    assert p.to_text() == before  # ... the original does not
    r = p.copy()
    for prog in (p, r):
        prog.compile(fusegraph.get_target("ref"))
        for c, want in [(True, [2, 4, 6, 8]), (False, [1, 2, 3, 4])]:
            np.testing.assert_array_equal(prog.run({"x": np.array([-1, 2, -3, 4], np.float32), "c": np.array(c)})[0], want)
    with pytest.raises(CompileError, match="before compiling"):
        p.copy()

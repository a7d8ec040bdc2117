"""Provenance: the frontend stamps ONNX nodes and tensors; Module.replace hands them on, so fusion
merges node names and rewrites keep them (ir/provenance.py)."""

from __future__ import annotations

import fusegraph
from fusegraph.ir import DType, Program, Shape, make_op
from fusegraph.ir.op import OpKind
from fusegraph.ir.provenance import OnnxNode
from fusegraph.passes import PassManager
from fusegraph.passes.fuse_pointwise import fuse_pointwise
from tests.profile.models import small_cnn


def _chain():
    p = Program()
    m = p.main
    x = m.add_parameter("x", Shape.of(DType.float32, [2, 3]))
    a = m.add(make_op("add"), x, x)
    r = m.add(make_op("relu"), a)
    e = m.add(make_op("exp"), r)
    m.add_return(e)
    for ins, name, op in ((a, "A", "Add"), (r, "R", "Relu"), (e, "E", "Exp")):
        ins.origin, ins.tensor = (OnnxNode(name, op),), name.lower()
    return p, (x, a, r, e)


def test_parse_stamps_nodes_and_tensors():
    p = fusegraph.parse_onnx(small_cnn())
    computing = [i for i in p.main.instructions if i.op.kind is not OpKind.BUILTIN]
    assert all(i.origin for i in computing)
    assert {i.tensor for i in computing if i.tensor} == {"c", "r", "m", "a", "s", "p", "f", "g", "y"}
    relu = next(i for i in computing if i.tensor == "r")
    assert relu.origin == (OnnxNode("relu", "Relu"),)


def test_fusion_merges_the_nodes_it_absorbs():
    p, (_, a, r, e) = _chain()
    PassManager().run(p, [fuse_pointwise])
    (fused,) = [i for i in p.main.instructions if i.op.name == "fused_pointwise"]
    assert [n.name for n in fused.origin] == ["A", "R", "E"]
    assert fused.tensor == "e"  # it computes the root's value


def test_replace_by_an_existing_value_keeps_its_own_origin():
    p, (x, a, r, e) = _chain()
    p.main.replace(r, a)  # as relu(x) -> x would: `a` does not take over relu's node
    assert a.origin == (OnnxNode("A", "Add"),) and a.tensor == "a"


def test_helpers_a_rewrite_makes_work_for_the_node_it_replaces():
    p, (x, a, r, e) = _chain()
    m = p.main
    helper = m.insert(r, make_op("neg"), a)
    new = m.insert(r, make_op("neg"), helper)
    m.replace(r, new)  # relu -> neg(neg(a)), say
    assert helper.origin == (OnnxNode("R", "Relu"),) and new.tensor == "r"
    assert a.origin == (OnnxNode("A", "Add"),)  # the shared producer is not absorbed

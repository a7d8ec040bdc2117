"""Fuzz families aimed at resource limits: external data paths, huge sizes, endless loops, deep
nesting, and tampered kernel artifacts of a compiled file. The suite lists the outcomes another
branch (hostile-a) fixes as known (tests/fuzz/test_fuzz.py)."""

from __future__ import annotations

import functools
import random
import re

import numpy as np
import onnx
from onnx import TensorProto, helper

import fusegraph
from tests.fuzz.families import Outcome, family, judge_model, note
from tests.fuzz.families_io import _load_run

X = {"x": np.ones((2, 3), np.float32)}


def _model(nodes, inits=(), outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_empty_tensor_value_info(o) for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _external(rng: random.Random) -> onnx.ModelProto:
    t = onnx.numpy_helper.from_array(np.ones(3, np.float32), "c")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    where = rng.choice(["/etc/hostname", "../../../../etc/hostname", "nonexistent.bin", "/dev/zero", "/proc/self/mem"])
    for k, v in (("location", where), ("offset", str(rng.choice([0, 2**40]))), ("length", "12")):
        entry = t.external_data.add()
        entry.key, entry.value = k, v
    return _model([helper.make_node("Add", ["x", "c"], ["y"])], [t])


def _huge(rng: random.Random) -> onnx.ModelProto:
    n = rng.choice([2**20, 2**31, 2**40])
    shape = onnx.numpy_helper.from_array(np.array([n, n], np.int64), "s")
    op = rng.choice(["ConstantOfShape", "Expand"])
    node = helper.make_node("ConstantOfShape", ["s"], ["y"]) if op == "ConstantOfShape" else \
        helper.make_node("Expand", ["x", "s"], ["y"])
    return _model([node], [shape])


def _endless_loop(rng: random.Random) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["v_in"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2, 3])])
    inits = [onnx.numpy_helper.from_array(np.array(rng.choice([2**62, 2**63 - 1]), np.int64), "n"),
             onnx.numpy_helper.from_array(np.array(True), "c")]
    return _model([helper.make_node("Loop", ["n", "c", "x"], ["y"], body=body)], inits)


def _nested_if(rng: random.Random) -> onnx.ModelProto:
    depth = rng.choice([10, 30])  # protobuf itself refuses messages nested much deeper (~100 levels)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [out])
    graph = leaf
    for _ in range(depth):  # nested in one branch only: the model grows linearly with the depth
        node = helper.make_node("If", ["c"], ["y"], then_branch=graph, else_branch=leaf)
        graph = helper.make_graph([node], "level", [], [out])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    main = helper.make_graph(list(graph.node), "hostile",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]), cond], [out])
    return helper.make_model(main, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


_MODELS = {"external": _external, "huge": _huge, "loop": _endless_loop, "nested-if": _nested_if}


@family("model-hostile")
def model_hostile(rng: random.Random) -> Outcome:
    kind = rng.choice(sorted(_MODELS))
    note(kind)
    feeds = dict(X, c=np.array(True)) if kind == "nested-if" else X
    outcome, detail = judge_model(_MODELS[kind](rng), feeds)
    return outcome, f"{kind}: {detail}"


@functools.cache
def _kernel_fgx() -> bytes:
    """A cpu program with generated kernels and oneDNN packed weights: its file holds their artifacts."""
    from tests.util import make_model

    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Tanh", ["c"], ["d"]), helper.make_node("Softmax", ["d"], ["y"], axis=-1)]
    g = np.random.default_rng(0)
    m = make_model(nodes, {"x": np.ones((2, 6), np.float32)}, ["y"],
                   {"w": g.standard_normal((6, 32)).astype(np.float32), "b": np.ones(32, np.float32)})
    return fusegraph.save_buffer(fusegraph.parse_onnx(m).compile("cpu"))


@family("fgx-artifacts")
def fgx_artifacts(rng: random.Random) -> Outcome:
    """The cpu target's kernel artifacts (sources, binding tables) edited and resealed."""
    from fusegraph.runtime.fgx_format import Container
    from tests.helpers.fgx import reseal

    data = _kernel_fgx()
    c = Container.from_buffer(data)
    names = [n for n, p in c.parts.items() if p.kind == "artifact" and n.endswith((".c", ".json"))]
    name = rng.choice(names)
    note(name)
    text = bytes(c.part(name)).decode("utf-8", errors="replace")
    spots = list(re.finditer(r"\d+", text))
    if not spots:
        return "skipped", f"{name}: no numbers"
    m = rng.choice(spots)
    edited = text[:m.start()] + str(rng.choice([0, 1, 5, 7, 64, 4096, 2**31])) + text[m.end():]
    outcome, detail = _load_run(reseal(data, parts={name: edited.encode()}), rng.choice(["lazy", "eager"]))
    return outcome, f"{name}: {detail}"


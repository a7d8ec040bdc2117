"""tabulate_int8 (passes/tabulate_int8.py) and int8_lookup: a pointwise chain of one 8-bit tensor
becomes a 256-entry table; every one of the 256 input values gives ONNX Runtime's answer (without
graph optimizations: the Q/DQ nodes as written) and the reference's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from tests.corpus.compare import run_ort
from tests.util import target_or_skip

_ELEM = {"u8": TensorProto.UINT8, "s8": TensorProto.INT8}
_NP = {"u8": np.uint8, "s8": np.int8}


def _qdq_hardswish(act: str = "u8", out: str = "u8", per_channel_add: bool = False, c: int = 8):
    """x(act) -> DQ -> HardSwish as exported (x * clip(x + 3, 0, 6) / 6), a Q/DQ pair after each op
    as quantize_static writes them -> Q(out) (or the float result when out == "f")."""
    nodes, inits = [], []

    def const(name, value, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    zp_np = _NP[act]
    z = {"u8": 10, "s8": -7}[act]

    def qdq(x, tag, scale):
        s, zp = const(f"{tag}_s", scale), const(f"{tag}_z", z, zp_np)
        nodes.append(helper.make_node("QuantizeLinear", [x, s, zp], [f"{tag}_q"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", s, zp], [f"{tag}_dq"]))
        return f"{tag}_dq"

    nodes.append(helper.make_node("DequantizeLinear", ["x", const("xs", 0.05), const("xz", z, zp_np)], ["x_f"]))
    three = const("three", np.full((1, c, 1, 1), 3.0) * (np.arange(1, c + 1).reshape(1, c, 1, 1)
                                                         if per_channel_add else 1.0))
    nodes.append(helper.make_node("Add", ["x_f", three], ["a"]))
    a = qdq("a", "a", 0.04)
    nodes.append(helper.make_node("Clip", [a, const("lo", 0.0), const("hi", 6.0)], ["cl"]))
    cl = qdq("cl", "cl", 0.03)
    nodes.append(helper.make_node("Mul", ["x_f", cl], ["m"]))
    m = qdq("m", "m", 0.07)
    nodes.append(helper.make_node("Div", [m, const("six", 6.0)], ["hs"]))
    if out == "f":
        last, elem = "hs", TensorProto.FLOAT
    else:
        nodes.append(helper.make_node("QuantizeLinear", ["hs", const("ys", 0.02), const("yz", 3, _NP[out])], ["y"]))
        last, elem = "y", _ELEM[out]
    nodes.append(helper.make_node("Identity", [last], ["out"]))
    graph = helper.make_graph(nodes, "hardswish", [helper.make_tensor_value_info("x", _ELEM[act], [1, c, 16, 16])],
                              [helper.make_tensor_value_info("out", elem, [1, c, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    info = np.iinfo(_NP[act])
    every = np.arange(info.min, info.max + 1).astype(_NP[act])  # all 256 values, then the rest at random
    x = np.resize(every, (1, c, 16, 16))
    return model, {"x": x}


def _ops(p) -> list[str]:
    return [i.op.name for i in p.main]


@pytest.mark.parametrize("act,out", [("u8", "u8"), ("s8", "s8"), ("u8", "f"), ("s8", "u8")])
def test_tabulated_chain_matches_ort_and_ref_exactly(act, out):
    model, feeds = _qdq_hardswish(act, out)
    want = run_ort(model, feeds, optimize=False)[0]
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    assert "int8_lookup" in _ops(p) and "fused_pointwise" not in _ops(p)
    got = p.run(feeds)[0]
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, ref.run(feeds)[0])
    np.testing.assert_array_equal(got, want)


def test_per_channel_constant_keeps_the_pointwise_kernel():
    model, feeds = _qdq_hardswish(per_channel_add=True)
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    assert "int8_lookup" not in _ops(p)
    np.testing.assert_array_equal(p.run(feeds)[0], run_ort(model, feeds, optimize=False)[0])


def test_lookup_program_saves_and_loads(tmp_path):
    """The compiled program saves and loads with its lookup kernel."""
    model, feeds = _qdq_hardswish()
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    path = tmp_path / "m.fgx"
    fusegraph.save(p, str(path))
    q = fusegraph.load(str(path))
    np.testing.assert_array_equal(q.run(feeds)[0], p.run(feeds)[0])


@pytest.mark.parametrize("n", [1, 63, 64, 64 * 1000 + 37, 3 * (1 << 16) + 5])
def test_byte_table_kernel_reads_every_entry(n):
    """The byte-table kernel (64 lookups per step with AVX-512 VBMI, one by one in each thread's tail)
    gives table[x] for every index value, at every length around its steps and thread shares."""
    target_or_skip("cpu")
    import ctypes

    from fusegraph.targets.cpu.codegen import build_library
    from fusegraph.targets.cpu.kernels.lookup import lookup_kernel

    src = lookup_kernel(1)
    kernel = build_library([src], threads=2)[src.name]
    rng = np.random.default_rng(n)
    table = rng.integers(0, 256, 256).astype(np.uint8)
    x = np.resize(np.arange(256, dtype=np.uint8), n)  # every value, in and across the 64-byte steps
    rng.shuffle(x[n // 2:])
    out = np.zeros(n, np.uint8)
    ptrs = (ctypes.c_void_p * 3)(out.ctypes.data, x.ctypes.data, table.ctypes.data)
    kernel._fn(ptrs, (ctypes.c_int64 * 1)(n), 2)
    np.testing.assert_array_equal(out, table[x])


@pytest.mark.parametrize("out", ["u8", "f"])
def test_a_lookup_of_uint8_joins_the_native_program(out, monkeypatch):
    """A uint8 lookup (its table of bytes, or of floats) is a C call of the region around it (an
    int8 one has its bits flipped by numpy first, a Python step); the same bits as step by step."""
    from fusegraph.targets.cpu.native_program import KERNEL, Region

    model, feeds = _qdq_hardswish("u8", out)
    model.graph.node.insert(0, helper.make_node("Identity", ["x"], ["x0"]))  # (the lookup reads a planned buffer)
    model.graph.node[1].input[0] = "x0"
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    rows, _ = p.executable.main.thread_plan()
    assert all(isinstance(r[0], Region) for r in rows) and any(KERNEL in {c.kind for c in r[0].table} for r in rows)
    got = p.run(feeds)[0]
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    q = fusegraph.parse_onnx(model)
    q.compile(target_or_skip("cpu"))
    np.testing.assert_array_equal(got, q.run(feeds)[0])

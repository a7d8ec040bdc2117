"""ConvInteger's int32 convolution on the cpu target (kernels/integer_conv.py): oneDNN's float32
convolution where every partial sum is a float32 integer, the reference past that bound; equal to
the ref target bit for bit either way."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir import Program
from fusegraph.ir.op import make_op
from tests.util import make_model, run_fusegraph

rng = np.random.default_rng(4)
n = helper.make_node


def _conv_steps(p) -> list[str]:
    return [s.fn.__qualname__ for s in p.executable.main.steps if s.name == "convolution"]


@pytest.mark.parametrize("group, c, m, k", [(1, 3, 8, 3), (16, 16, 16, 3), (1, 24, 72, 1), (4, 8, 8, 3)])
def test_dynamic_conv_integer_matches_ref(group, c, m, k):
    """The activations' zero point known at run time (dynamic quantization): an int32 convolution."""
    feeds = {"x": rng.integers(0, 256, (1, c, 12, 12)).astype(np.uint8), "xz": np.array(117, np.uint8)}
    w = rng.integers(-128, 128, (m, c // group, k, k)).astype(np.int8)
    model = make_model([n("ConvInteger", ["x", "w", "xz"], ["y"], group=group, pads=[k // 2] * 4)],
                       feeds, ["y"], {"w": w})
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    assert _conv_steps(p) == ["integer_convolution.<locals>.run"]
    want = run_fusegraph(model, feeds, "ref")[0]
    got = p.run(feeds)[0]
    assert got.dtype == want.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_sums_past_float32_integers_take_the_reference():
    """int32 inputs whose sums reach 2**24: the float path would round there; the reference runs."""
    x = rng.integers(-40000, 40000, (1, 8, 6, 6)).astype(np.int32)
    w = rng.integers(-128, 128, (4, 8, 3, 3)).astype(np.int32)
    conv = make_op("convolution", padding=(1, 1, 1, 1), stride=(1, 1), dilation=(1, 1), group=1)
    prog = Program()
    m = prog.main
    m.add_return(m.add(conv, m.add_parameter("x", fusegraph.Shape.of(fusegraph.DType.int32, [1, 8, 6, 6])),
                       m.add_literal(w)))
    prog.compile(fusegraph.get_target("cpu"))
    assert _conv_steps(prog) == ["integer_convolution.<locals>.run"]
    want = np.asarray(conv.compute([x, w]))
    assert np.abs(want).max() >= 2**24  # (a case the float path would get wrong)
    np.testing.assert_array_equal(prog.run({"x": x})[0], want)

"""ConvInteger and QLinearConv on the cpu target: the integer sum through oneDNN's u8 x s8 convolution
(int8_conv with an int32 result, passes/fuse_int8.py), bit for bit ONNX Runtime's (whose sums are
exact here for weights of 7 bits: see onednn/quant.py), at the edges of the 8-bit ranges; and the
int32 convolution kept where oneDNN's float32 store could round the sum."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusegraph
from tests.corpus.compare import run_ort
from tests.util import target_or_skip

_T = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _edges(rng, shape, dtype) -> np.ndarray:
    """Values of `dtype` with its two extremes over-represented (saturation, the largest sums)."""
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape)
    pick = rng.random(shape)
    x[pick < 0.2], x[pick > 0.8] = info.min, info.max
    return x.astype(dtype)


def _model(op: str, x_dtype=np.uint8, w_dtype=np.int8, w_max: int = 64, x_zp: int = 121, w_zp=0, c: int = 16,
           m: int = 8, k: int = 3, group: int = 1, seed: int = 0):
    """A ConvInteger or QLinearConv over an [1, c, 12, 12] input; centred weights within +-w_max."""
    rng = np.random.default_rng(seed)
    w_c = rng.integers(-w_max, w_max + 1, (m, c // group, k, k))
    w_c[0, 0, 0, 0], w_c[-1, 0, 0, 0] = -w_max, w_max
    w_zp_a = np.broadcast_to(np.asarray(w_zp), (m,)) if np.ndim(w_zp) else np.asarray(w_zp)
    w = (w_c + (w_zp_a.reshape(-1, 1, 1, 1) if np.ndim(w_zp) else w_zp_a)).astype(w_dtype)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.asarray(x_zp, x_dtype), "xz"),
             numpy_helper.from_array(np.asarray(w_zp, w_dtype), "wz")]
    attrs = dict(pads=[1, 1, 1, 1], group=group)
    if op == "ConvInteger":
        node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
        out = helper.make_tensor_value_info("y", TensorProto.INT32, None)
    else:
        inits += [numpy_helper.from_array(np.float32(0.02), "xs"),
                  numpy_helper.from_array(rng.uniform(0.001, 0.01, m).astype(np.float32), "ws"),
                  numpy_helper.from_array(np.float32(0.05), "ys"), numpy_helper.from_array(np.uint8(128), "yz"),
                  numpy_helper.from_array(rng.integers(-3000, 3000, m).astype(np.int32), "b")]
        node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)
        out = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", _T[x_dtype], [1, c, 12, 12])], [out],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, {"x": _edges(rng, (1, c, 12, 12), x_dtype)}


def _compiled(model):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    return p


CASES = {
    "ConvInteger u8": ("ConvInteger", {}),
    "ConvInteger s8 activations": ("ConvInteger", {"x_dtype": np.int8, "x_zp": -5}),
    "ConvInteger u8 weights, zero point 128": ("ConvInteger", {"w_dtype": np.uint8, "w_zp": 128}),
    "ConvInteger grouped": ("ConvInteger", {"group": 4, "m": 8}),
    "QLinearConv per-channel": ("QLinearConv", {}),
    "QLinearConv x zero point 0": ("QLinearConv", {"x_zp": 0}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_integer_conv_is_onednn_and_ort_exact(case):
    op, kw = CASES[case]
    model, feeds = _model(op, **kw)
    p = _compiled(model)
    assert [i.op.name for i in p.main if i.op.name == "int8_conv"], "not lowered to oneDNN's int8 convolution"
    got, want = p.run(feeds)[0], run_ort(model, feeds, optimize=False)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_sum_that_float32_could_round_keeps_the_int32_convolution():
    """c = 512 taps of 3x3 at |x - zp| <= 255 and |w| = 64: the bound passes 2**24, oneDNN's s32
    result goes through float32 there; the exact int32 convolution runs instead, still ORT's."""
    model, feeds = _model("ConvInteger", c=512, m=4, x_zp=0)
    p = _compiled(model)
    assert not [i for i in p.main if i.op.name == "int8_conv"]
    np.testing.assert_array_equal(p.run(feeds)[0], run_ort(model, feeds, optimize=False)[0])


def test_integer_conv_on_ref_is_the_frontends_sum():
    """The rewritten program means what the model says: the int32 result on the reference target."""
    from fusegraph.passes import run_pipeline
    from fusegraph.targets.cpu.passes import fuse_int8

    model, feeds = _model("ConvInteger", w_dtype=np.uint8, w_zp=128)
    target_or_skip("cpu")  # the pass asks oneDNN whether its sums are exact here
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, [fuse_int8])
    assert any(i.op.name == "int8_conv" for i in p.main)
    p.compile(fusegraph.get_target("ref"))
    np.testing.assert_array_equal(p.run(feeds)[0], run_ort(model, feeds, optimize=False)[0])

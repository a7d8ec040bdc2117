"""Resize / Upsample / GridSample / AffineGrid on the ref target, checked against ONNX Runtime.

ONNX Runtime maps coordinates in float32 and, for align_corners with scales, divides by the integer
output length minus one, where the ONNX reference uses float64 and the real-valued length: cases
here avoid those boundaries (the node suite covers the reference's behaviour).
"""

import itertools

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir.shape import Dim
from tests.util import make_model, node_check

rng = np.random.default_rng(0)
X = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
EMPTY = np.zeros(0, np.float32)
F32 = np.float32


def resize_check(attrs, scales=None, sizes=None, roi=EMPTY, x=X, opset=19, **kw):
    inits = {"roi": roi, "scales": np.array(scales, F32) if scales is not None else EMPTY}
    if sizes is not None:
        inits["sizes"] = np.array(sizes, np.int64)
    return node_check("Resize", {"x": x}, attrs, initializers=inits, opset=opset, **kw)


COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "asymmetric"]


@pytest.mark.parametrize("mode,coords", itertools.product(["nearest", "linear", "cubic"], COORDS))
def test_resize_scales(mode, coords):
    for scales in ([1, 1, 2.0, 1.5], [1, 1, 0.6, 0.5]):
        resize_check({"mode": mode, "coordinate_transformation_mode": coords}, scales)


@pytest.mark.parametrize("mode,coords", itertools.product(["nearest", "linear", "cubic"], COORDS + ["align_corners"]))
def test_resize_sizes(mode, coords):
    for sizes in ([1, 2, 9, 4], [1, 2, 3, 11]):
        resize_check({"mode": mode, "coordinate_transformation_mode": coords}, sizes=sizes)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes(nearest_mode):
    resize_check({"mode": "nearest", "nearest_mode": nearest_mode, "coordinate_transformation_mode": "asymmetric"},
                 [1, 1, 2.5, 1.5])


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_and_exclude_outside(mode):
    for scales in ([1, 1, 0.6, 0.4], [1, 1, 0.3, 0.5]):
        resize_check({"mode": mode, "antialias": 1}, scales, opset=18)
    resize_check({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, [1, 1, 0.6, 1.7], opset=13)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_crop_and_resize(mode):
    roi = np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.2], F32)  # partly outside: extrapolated
    resize_check({"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 3.0},
                 sizes=[1, 2, 4, 6], roi=roi, opset=13)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio_with_axes(policy):
    resize_check({"mode": "linear", "keep_aspect_ratio_policy": policy, "axes": [2, 3]}, sizes=[9, 9], opset=18)
    resize_check({"mode": "nearest", "axes": [-1, 2]}, scales=[2.0, 3.0], opset=18)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_legacy_resize_and_upsample(mode):
    for scales in ([1, 1, 2, 3], [1, 1, 1.5, 2.5]):
        node_check("Resize", {"x": X}, {"mode": mode}, initializers={"scales": np.array(scales, F32)}, opset=10)
        node_check("Upsample", {"x": X}, {"mode": mode}, initializers={"scales": np.array(scales, F32)}, opset=9)
        node_check("Upsample", {"x": X}, {"mode": mode, "scales": [float(s) for s in scales]}, opset=7)
    # Resize-10 downsampling rounds nearest coordinates up (ONNX Runtime's legacy rule)
    node_check("Resize", {"x": X}, {"mode": mode}, initializers={"scales": np.array([1, 1, 0.5, 0.6], F32)},
               opset=10)


def test_resize_tf_half_pixel_for_nn_opset11():
    for scales in ([1, 1, 2.5, 1.5], [1, 1, 0.6, 0.5]):
        resize_check({"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, scales, opset=11)


def test_resize_integer_nearest_is_exact():
    x = rng.integers(0, 255, (1, 1, 4, 5)).astype(np.uint8)
    resize_check({"mode": "nearest"}, [1, 1, 1.7, 0.8], x=x, opset=13)


def test_resize_constant_scales_are_static_attributes():
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest")
    model = make_model([node], {"x": X}, ["y"], {"roi": EMPTY, "scales": np.array([1, 1, 2, 2], F32)}, 13)
    (ins,) = [i for i in fusegraph.parse_onnx(model).main.instructions if i.op.name.startswith("resize")]
    assert ins.op.name == "resize" and ins.op.out_lens == (1, 2, 10, 14)


def test_resize_runtime_scales():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    scales = np.array([1, 1, 2, 0.5], F32)
    model = make_model([node], {"x": X, "scales": scales}, ["y"], opset=13)
    (shape,) = [o.shape for o in fusegraph.parse_onnx(model).main.outputs]
    assert shape.dims == (Dim(0, None),) * 4  # any axis may be resized: known at run time
    node_check("Resize", {"x": X, "scales": scales}, {"mode": "linear"}, opset=13, input_names=["x", "", "scales"])


def test_resize_dynamic_input_dims():
    bounds = {"x": [1, 2, (3, 8), (5, 9)]}
    resize_check({"mode": "nearest"}, [1, 1, 2, 2], map_dyn_input_dims=bounds)
    resize_check({"mode": "linear"}, [1, 1, 2, 2], x=X[:, :, :4, :6], map_dyn_input_dims=bounds)


# -- grid sampling ------------------------------------------------------------------------------------
GRID_X = rng.standard_normal((2, 3, 5, 6)).astype(F32)
GRID = rng.random((2, 4, 7, 2)).astype(F32) * 2.6 - 1.3  # some positions outside [-1, 1]


@pytest.mark.parametrize("mode,padding,align",
                         itertools.product(["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1]))
def test_grid_sample(mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    node_check("GridSample", {"x": GRID_X, "g": GRID}, attrs, opset=20)


def test_grid_sample_opset16_names_and_volumes():
    node_check("GridSample", {"x": GRID_X, "g": GRID}, {"mode": "bicubic", "padding_mode": "border"}, opset=16)
    x3 = rng.standard_normal((1, 2, 3, 4, 5)).astype(F32)
    g3 = rng.random((1, 2, 3, 4, 3)).astype(F32) * 2.6 - 1.3
    for mode, padding in itertools.product(["linear", "nearest"], ["zeros", "reflection"]):
        node_check("GridSample", {"x": x3, "g": g3}, {"mode": mode, "padding_mode": padding}, opset=20)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(align):
    theta, theta3 = rng.standard_normal((2, 2, 3)).astype(F32), rng.standard_normal((2, 3, 4)).astype(F32)
    node_check("AffineGrid", {"t": theta}, {"align_corners": align},
               initializers={"size": np.array([2, 3, 5, 6], np.int64)}, opset=20)
    node_check("AffineGrid", {"t": theta3}, {"align_corners": align},
               initializers={"size": np.array([2, 3, 4, 5, 6], np.int64)}, opset=20)
    node_check("AffineGrid", {"t": theta, "size": np.array([2, 3, 5, 6], np.int64)}, {"align_corners": align},
               opset=20)


def test_ir_text_round_trip():
    grid = GRID[:1, :2, :3]
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["r"], mode="cubic"),
             helper.make_node("Resize", ["x", "", "sr"], ["rr"], mode="linear"),
             helper.make_node("GridSample", ["x", "g"], ["gs"], mode="cubic", padding_mode="reflection")]
    feeds = {"x": X, "sr": np.array([1, 1, 2, 0.5], F32), "g": grid}
    model = make_model(nodes, feeds, ["r", "rr", "gs"], {"s": np.array([1, 1, 2.0, 1.5], F32)}, 20)
    p = fusegraph.parse_onnx(model)
    text = p.to_text()
    assert "scales=(1.0, 1.0, 2.0, 1.5), out_lens=(1, 2, 10, 10), roi=()" in text and "resize_dynamic[" in text
    back = fusegraph.Program.from_text(text)
    assert back.to_text() == text
    ref = fusegraph.get_target("ref")
    for a, b in zip(back.compile(ref).run(feeds), p.compile(ref).run(feeds)):
        np.testing.assert_array_equal(a, b)

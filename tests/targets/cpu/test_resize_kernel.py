"""float32 linear and cubic Resize as generated C (codegen/resize.py) against the ref target, bit for
bit: every coordinate map, up- and downsampling, antialias, exclude_outside, an infinity among the
inputs; and a step a native program runs."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from onnx import helper

import fusegraph
from tests.util import make_model, run_fusegraph

rng = np.random.default_rng(9)
n = helper.make_node
MAPS = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric"]


def _model(x, scales, **attrs):
    return make_model([n("Resize", ["x", "roi", "sc"], ["y"], **attrs)], {"x": x}, ["y"],
                      {"roi": np.zeros(0, np.float32), "sc": np.array(scales, np.float32)}, opset=18)


@pytest.mark.parametrize("mode, ctm", list(itertools.product(["linear", "cubic"], MAPS)))
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.5, 1.5), (1, 1.7, 1, 0.6)])
@pytest.mark.parametrize("antialias, exclude", [(0, 0), (1, 0), (0, 1)])
def test_interpolating_resize_is_c_and_matches_ref(mode, ctm, scales, antialias, exclude):
    x = rng.standard_normal((1, 3, 5, 7)).astype(np.float32)
    x.reshape(-1)[3] = np.inf  # (inf * 0 of a far cubic tap is NaN in both)
    model = _model(x, scales, mode=mode, coordinate_transformation_mode=ctm, antialias=antialias,
                   exclude_outside=exclude)
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    assert [s.fn.__qualname__ for s in p.executable.main.steps] == ["compiled_kernel.<locals>.run"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = run_fusegraph(model, {"x": x}, "ref")[0]
    for _ in range(2):  # a Python step, then a native program's call
        got = np.asarray(p.run({"x": x})[0])
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_a_bilinear_upsampling_between_convolutions_joins_the_native_program():
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    nodes = [n("Conv", ["x", "w"], ["c"]), n("Resize", ["c", "roi", "sc"], ["r"], mode="linear"),
             n("Relu", ["r"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"w": w, "roi": np.zeros(0, np.float32),
                                                 "sc": np.array([1, 1, 2, 2], np.float32)})
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    resize = [s.fn for s in p.executable.main.steps if s.name == "resize"]
    assert len(resize) == 1 and getattr(resize[0], "native", None) is not None
    want = run_fusegraph(model, {"x": x}, "ref")[0]
    for _ in range(2):
        np.testing.assert_allclose(p.run({"x": x})[0], want, rtol=1e-5, atol=1e-6)

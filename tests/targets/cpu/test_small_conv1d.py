"""The register-tiled 1-D small convolution (targets/cpu/codegen/small_conv1d.py) against the ref
target over awkward geometries: lengths off the vector width, strides, dilations, asymmetric
padding, groups, odd channel counts, batches; its tiling and weight packing; the fallback when its
scratch would not fit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.codegen.small_conv1d import SCRATCH, conv1d_tiling, fits, pack_conv1d_weights
from tests.util import make_model, target_or_skip

# (batch, channels, length, out channels, groups, kernel, stride, dilation, pads)
GEOMETRIES = [
    (1, 1, 33, 5, 1, 3, 1, 1, (1, 1)),  # one input channel, 33 positions: 3 vectors, the last of one
    (3, 3, 50, 17, 1, 4, 2, 1, (2, 0)),  # 17 channels: 5 tiles of 4 (3 zero rows), stride 2, asymmetric
    (2, 17, 71, 4, 1, 5, 1, 3, (0, 7)),  # dilation 3, padding on the right only
    (1, 6, 130, 6, 3, 3, 1, 4, (4, 4)),  # groups of 2, dilation 4
    (2, 4, 97, 8, 4, 2, 3, 2, (1, 3)),  # depthwise-like groups, stride 3 with dilation 2
    (1, 2, 400, 3, 1, 9, 2, 2, (3, 5)),  # 196 outputs: full tiles of 4 vectors and a tail of 1
    (3, 5, 16, 5, 5, 1, 1, 1, (0, 0)),  # exactly one vector, depthwise 1x1
    (1, 8, 300, 16, 2, 7, 5, 1, (0, 0)),  # stride 5: five phases
    (2, 12, 20, 12, 1, 16, 1, 1, (8, 7)),  # a kernel wider than a vector (hubert's positional conv)
    (1, 1, 800, 8, 1, 40, 10, 1, (0, 0)),  # 40 taps in 10 phases, a learned filterbank's
    (1, 2, 300, 4, 1, 17, 3, 2, (5, 5)),  # 17 taps in 3 phases, dilated
]


def _conv_model(b, c, length, m, g, k, stride, dil, pads, chain, rng):
    x = rng.standard_normal((b, c, length)).astype(np.float32)
    w = rng.standard_normal((m, c // g, k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=g, pads=list(pads), strides=[stride],
                              dilations=[dil], kernel_shape=[k])]
    out = "c"
    if "relu" in chain:
        nodes.append(helper.make_node("Relu", [out], ["r"]))
        out = "r"
    if "residual" in chain:  # the conv's output plus its input (same shape): an epilogue residual
        nodes.append(helper.make_node("Add", [out, "x"], ["s"]))
        out = "s"
    return make_model(nodes, {"x": x}, [out], {"w": w, "b": bias}), x


def _run_both(model, x):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    return p, p.run({"x": x})[0], ref.run({"x": x})[0]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[f"g{i}" for i in range(len(GEOMETRIES))])
def test_a_tiled_1d_convolution_matches_the_reference(geometry):
    rng = np.random.default_rng(abs(hash(geometry)) % 2**32)
    p, got, want = _run_both(*_conv_model(*geometry, ("relu",), rng))
    assert "small_conv1d_" in p.executable.built.library.source  # the tiled kernel ran
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("length", [15, 16, 17, 64, 65, 125])
def test_a_residual_epilogue_over_lengths_around_the_vector_width(length):
    # the same-shape residual (the conv's own input) added at the store, positions past the last
    # full vector included
    rng = np.random.default_rng(length)
    p, got, want = _run_both(*_conv_model(2, 8, length, 8, 1, 3, 1, 1, (1, 1), ("residual", "relu"), rng))
    assert "small_conv1d_" in p.executable.built.library.source
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_nan_in_the_input_reaches_only_the_outputs_that_read_it():
    rng = np.random.default_rng(3)
    model, x = _conv_model(1, 2, 40, 3, 1, 3, 1, 1, (1, 1), (), rng)
    x[0, 1, 20] = np.nan
    p, got, want = _run_both(model, x)
    assert np.isnan(got[:, :, 19:22]).all() and not np.isnan(np.delete(got, [19, 20, 21], axis=2)).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_input_too_long_for_the_scratch_takes_the_tap_table_kernel():
    # 8 channels of 2400 positions, stride 8 and 8 taps (every phase read): few multiply-adds, more
    # scratch than the stack may hold
    assert not fits(8, 2, 8, 300, 8, 1) and fits(8, 2, 8, 300 * SCRATCH // 20000, 8, 1)
    rng = np.random.default_rng(5)
    p, got, want = _run_both(*_conv_model(1, 8, 2400, 2, 1, 8, 8, 1, (0, 0), (), rng))
    source = p.executable.built.library.source
    assert "small_conv1d_" not in source and "small_conv_" in source
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mg, s_out, jb, vb, tail", [(12, 62, 4, 4, 0), (16, 125, 4, 4, 0), (17, 196, 4, 4, 1),
                                                     (5, 16, 5, 1, 0), (2, 127, 2, 4, 0), (40, 30, 8, 2, 0)])
def test_tiles_are_balanced_over_the_channels_and_cover_the_positions(mg, s_out, jb, vb, tail):
    t = conv1d_tiling(mg, 3, s_out, 1, 1)
    assert (t.jb, t.vb, t.tail) == (jb, vb, tail)


def test_packed_weights_put_a_steps_channels_side_by_side():
    rng = np.random.default_rng(9)
    w = rng.standard_normal((10, 3, 4)).astype(np.float32)  # 2 groups of 5 channels, 3 inputs, 4 taps
    t = conv1d_tiling(5, 4, 40, 1, 1)
    packed = pack_conv1d_weights(w, 2, t)
    tiles = -(-5 // t.jb)
    assert packed.shape == (2, tiles, 3, 4, t.jb)
    for g in range(2):
        for j in range(tiles * t.jb):
            want = w[g * 5 + j] if j < 5 else np.zeros((3, 4), np.float32)  # zeros past the group
            np.testing.assert_array_equal(packed[g, j // t.jb, :, :, j % t.jb], want)


@pytest.mark.parametrize("attrs", [dict(kernel_shape=[3], strides=[2], pads=[1, 1]),  # an ECG's stem
                                   dict(kernel_shape=[2], strides=[2], ceil_mode=1),  # odd length: a half window
                                   dict(kernel_shape=[5], strides=[3], pads=[2, 1]),
                                   dict(kernel_shape=[4], strides=[1], pads=[0, 3])])
@pytest.mark.parametrize("length", [31, 250])
def test_a_signals_max_pooling_runs_on_contiguous_runs(attrs, length):
    # padding is -inf (all-negative inputs see it), a NaN in a window is the result, as the reference's
    rng = np.random.default_rng(length)
    x = rng.standard_normal((3, 5, length)).astype(np.float32)
    model = make_model([helper.make_node("MaxPool", ["x"], ["out"], **attrs)], {"x": x}, ["out"])
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    ref = fusegraph.parse_onnx(model)
    ref.compile(fusegraph.get_target("ref"))
    assert "small_max_pool1d_" in p.executable.built.library.source
    bad = x.copy()
    bad[1, 2, 7] = np.nan
    for feeds in ({"x": x}, {"x": bad}, {"x": -np.abs(x) - 1}):
        got, want = p.run(feeds)[0], ref.run(feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert np.isnan(p.run({"x": bad})[0]).sum() >= 1


@pytest.mark.parametrize("length, tiled", [(15, True), (12, True), (9, False)])
def test_a_signal_of_fewer_positions_than_channels_is_tiled_when_it_fills_most_of_a_vector(length, tiled):
    # 20 -> 32 channels: more channels than positions; from 12 positions the tiles, below the tap table
    rng = np.random.default_rng(length)
    p, got, want = _run_both(*_conv_model(2, 20, length, 32, 1, 3, 1, 1, (1, 1), ("relu",), rng))
    assert ("small_conv1d_" in p.executable.built.library.source) == tiled
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_signal_too_long_for_the_pooling_scratch_takes_the_tap_table():
    x = np.random.default_rng(4).standard_normal((1, 1, SCRATCH + 100)).astype(np.float32)
    model = make_model([helper.make_node("MaxPool", ["x"], ["out"], kernel_shape=[2], strides=[2])], {"x": x}, ["out"])
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu"))
    source = p.executable.built.library.source
    assert "small_max_pool1d_" not in source and "small_max_pool_" in source
    np.testing.assert_array_equal(p.run({"x": x})[0], x.reshape(1, 1, -1, 2).max(-1))

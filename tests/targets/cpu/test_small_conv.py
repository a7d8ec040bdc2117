"""small_conv (numpy im2col for convolutions below oneDNN's call cost) against the convolution op's
reference, over random geometries: 1-3 spatial axes, padding, strides, dilations, groups."""

import numpy as np
import pytest

from fusegraph.errors import ShapeError
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Shape
from fusegraph.targets.cpu.kernels.small import small_conv

RNG = np.random.default_rng(7)


def _geometry(seed):
    rng = np.random.default_rng(seed)
    nsp = int(rng.integers(1, 4))
    g = int(rng.choice([1, 2]))
    c, m = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    sp = tuple(int(rng.integers(2, 7)) for _ in range(nsp))
    ks = tuple(int(rng.integers(1, 4)) for _ in range(nsp))
    pads = tuple(int(rng.integers(0, 3)) for _ in range(2 * nsp))
    strides = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
    dils = tuple(int(rng.integers(1, 3)) for _ in range(nsp))
    return nsp, g, c, m, sp, ks, pads, strides, dils


@pytest.mark.parametrize("seed", range(24))
def test_small_conv_matches_the_reference(seed):
    nsp, g, c, m, sp, ks, pads, strides, dils = _geometry(seed)
    op = make_op("convolution", padding=pads, stride=strides, dilation=dils, group=g)
    x = RNG.standard_normal((2, c, *sp)).astype(np.float32)
    w = RNG.standard_normal((m, c // g, *ks)).astype(np.float32)
    try:
        out_lens = op.compute_shape([Shape.of(x.dtype, x.shape), Shape.of(w.dtype, w.shape)]).lens
    except ShapeError:  # the window does not fit this input: no convolution to compare
        pytest.skip("window larger than the padded input")
    fn = small_conv(x.shape, w, None, op, (), out_lens)
    got = fn(x, np.empty(out_lens, np.float32), ())
    np.testing.assert_allclose(got, op.compute([x, w]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed, length", [(s, (9, 40)) for s in range(8)] + [(s, (70, 300)) for s in range(8, 14)])
def test_a_1d_small_convolution_sums_as_the_tap_table_kernel_does(seed, length):
    # the 1-D kernel (register tiles, codegen/small_conv1d.py) against the same convolution as a 2-D
    # one of height 1 (the tap-table kernel): the same products summed in the same order, so the same
    # bits; short signals (mostly edges, where taps fall in the padding) and long ones
    from onnx import helper

    import fusegraph
    from tests.util import make_model, target_or_skip

    rng = np.random.default_rng(seed)
    g = int(rng.choice([1, 2]))
    c, m, w_len, k = g * int(rng.integers(1, 4)), g * int(rng.integers(1, 3)), int(rng.integers(*length)), int(rng.integers(1, 6))
    pads, stride, dil = [int(rng.integers(0, 3)), int(rng.integers(0, 3))], int(rng.integers(1, 3)), int(rng.integers(1, 3))
    x = rng.standard_normal((2, c, w_len)).astype(np.float32)
    w = rng.standard_normal((m, c // g, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    outs = []
    for two_d in (False, True):
        xs, ws = (x[:, :, None], w[:, :, None]) if two_d else (x, w)
        attrs = dict(pads=[0, pads[0], 0, pads[1]], strides=[1, stride], dilations=[1, dil]) if two_d else \
            dict(pads=pads, strides=[stride], dilations=[dil])
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=g, **attrs), helper.make_node("Relu", ["c"], ["out"])]
        model = make_model(nodes, {"x": xs}, ["out"], {"w": ws, "b": b})
        p = fusegraph.parse_onnx(model)
        p.compile(target_or_skip("cpu"))
        (step,) = [s for s in p.executable.steps if s.name.startswith("conv")]
        assert "c_small_conv" in step.fn.__qualname__
        outs.append(p.run({"x": xs})[0].reshape(-1))
        if not two_d:
            ref = fusegraph.parse_onnx(model)
            ref.compile(fusegraph.get_target("ref"))
            np.testing.assert_allclose(outs[0], ref.run({"x": xs})[0].reshape(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(outs[0], outs[1])

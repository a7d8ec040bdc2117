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

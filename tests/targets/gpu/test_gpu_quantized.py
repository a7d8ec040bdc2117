"""A program quantize_int8 / quantize_fp8 rewrote compiles on the gpu target and matches ref."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from tests.quantize.test_int8 import _conv_net, _data


@pytest.mark.parametrize("quantize", ["quantize_int8", "quantize_fp8"])
def test_quantized_conv_net_matches_ref(gpu_target, quantize):
    data, held = _data(3, 0), _data(1, 1)[0]
    ref = getattr(fusegraph, quantize)(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False).compile("ref")
    gpu = getattr(fusegraph, quantize)(fusegraph.parse_onnx(_conv_net()), data, keep_heads=False).compile(gpu_target)
    got, want = np.asarray(gpu.run(held)[0]), ref.run(held)[0]
    # the convolutions sum in another order, so a value on a rounding boundary may take the next
    # quantization step (ORT differs from itself so across machines): compare as a whole, not per element
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2

"""A small U-Net for segmentation: double (Conv -> BatchNormalization -> Relu) blocks, MaxPool down,
ConvTranspose 2x2/2 up, Concat skip connections and a final 1x1 conv to per-class logits.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from ._builder import GraphBuilder


def _double_conv(g: GraphBuilder, x: str, c_in: int, c_out: int, name: str) -> str:
    x = g.conv_bn_act(x, c_in, c_out, 3, name=f"{name}.conv1")
    return g.conv_bn_act(x, c_out, c_out, 3, name=f"{name}.conv2")


def _up(g: GraphBuilder, x: str, c_in: int, c_out: int, name: str) -> str:
    # each output pixel sees exactly one input pixel through a 2x2/2 transposed conv: fan-in is c_in
    w = g.normal([c_in, c_out, 2, 2], 1.0 / math.sqrt(c_in), f"{name}.weight")
    b = g.uniform([c_out], -0.1, 0.1, f"{name}.bias")
    return g.node("ConvTranspose", [x, w, b], name=name, kernel_shape=[2, 2], strides=[2, 2])


def build_unet(
    levels: int = 4, base: int = 16, in_channels: int = 3, num_classes: int = 2, image_size: int = 256,
    seed: int = 0, name: str = "unet",
) -> onnx.ModelProto:  # fmt: skip
    """U-Net with `levels` poolings; channels double per level from `base` (16..256 by default)."""
    assert image_size % 2**levels == 0, "every MaxPool must halve the image exactly to match its skip"
    g = GraphBuilder(name, seed)
    x = g.input("input", TensorProto.FLOAT, ["batch", in_channels, image_size, image_size])

    skips, c_in = [], in_channels
    for i in range(levels):
        c = base * 2**i
        x = _double_conv(g, x, c_in, c, f"down{i}")
        skips.append((x, c))
        x = g.node("MaxPool", [x], name=f"down{i}.pool", kernel_shape=[2, 2], strides=[2, 2])
        c_in = c
    c_in = base * 2**levels
    x = _double_conv(g, x, c_in // 2, c_in, "bottleneck")

    for i in reversed(range(levels)):
        skip, c = skips[i]
        x = _up(g, x, c_in, c, f"up{i}.upconv")
        x = g.node("Concat", [x, skip], name=f"up{i}.concat", axis=1)
        x = _double_conv(g, x, 2 * c, c, f"up{i}")
        c_in = c

    x = g.conv(x, c_in, num_classes, 1, bias=True, name="head", gain=math.sqrt(0.5))  # linear: Xavier scale
    g.output(x, "mask", TensorProto.FLOAT, ["batch", num_classes, image_size, image_size])
    return g.build(f"{name}: U-Net levels={levels} base={base}, {num_classes} classes, random weights")


def sample_unet(
    batch: int, rng: np.random.Generator, image_size: int = 256, in_channels: int = 3, **_
) -> dict[str, np.ndarray]:
    return {"input": rng.standard_normal((batch, in_channels, image_size, image_size), dtype=np.float32)}

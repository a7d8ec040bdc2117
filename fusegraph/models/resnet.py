"""ResNet-50 (torchvision v1.5: the stride sits on the 3x3 conv), as `torch.onnx.export` writes it
without BN folding: Conv (no bias) -> BatchNormalization -> Relu, MaxPool stem, residual Add,
GlobalAveragePool -> Flatten -> Gemm(transB=1). Node and weight names follow torchvision's.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from ._builder import GraphBuilder

# The last BN of each residual branch gets a small gamma (a soft "zero_init_residual"): with random
# weights every block would otherwise double the activation variance, 2**16 over ResNet-50's 16 blocks.
_RESIDUAL_GAMMA = 0.2


def _bottleneck(g: GraphBuilder, x: str, c_in: int, width: int, stride: int, name: str) -> str:
    c_out = width * 4
    y = g.conv_bn_act(x, c_in, width, 1, name=f"{name}.conv1")
    y = g.conv_bn_act(y, width, width, 3, stride, name=f"{name}.conv2")
    y = g.conv_bn_act(y, width, c_out, 1, act=None, name=f"{name}.conv3", gamma=_RESIDUAL_GAMMA)
    if stride != 1 or c_in != c_out:
        identity = g.conv_bn_act(x, c_in, c_out, 1, stride, act=None, name=f"{name}.downsample")
    else:
        identity = x
    return g.node("Relu", [g.node("Add", [y, identity], name=f"{name}.Add")], name=f"{name}.Relu")


def build_resnet(
    layers: tuple[int, ...] = (3, 4, 6, 3),
    num_classes: int = 1000,
    image_size: int = 224,
    seed: int = 0,
    name: str = "resnet50",
) -> onnx.ModelProto:
    """A bottleneck ResNet; the defaults give ResNet-50 (25.6M parameters)."""
    g = GraphBuilder(name, seed)
    x = g.input("input", TensorProto.FLOAT, ["batch", 3, image_size, image_size])

    x = g.conv_bn_act(x, 3, 64, 7, stride=2, name="conv1")
    x = g.node("MaxPool", [x], name="maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    c_in = 64
    for stage, (blocks, width) in enumerate(zip(layers, (64, 128, 256, 512), strict=True), start=1):
        for i in range(blocks):
            stride = 2 if (stage > 1 and i == 0) else 1
            x = _bottleneck(g, x, c_in, width, stride, f"layer{stage}.{i}")
            c_in = width * 4

    x = g.node("GlobalAveragePool", [x], name="avgpool")
    x = g.node("Flatten", [x], name="flatten", axis=1)
    # nn.Linear's default init scale keeps logits O(1)
    bound = 1.0 / math.sqrt(c_in)
    w = g.uniform([num_classes, c_in], -bound, bound, "fc.weight")
    b = g.uniform([num_classes], -bound, bound, "fc.bias")
    x = g.node("Gemm", [x, w, b], name="fc", alpha=1.0, beta=1.0, transB=1)
    g.output(x, "logits", TensorProto.FLOAT, ["batch", num_classes])
    return g.build(f"{name}: torchvision-style bottleneck ResNet, layers={list(layers)}, random weights")


def sample_resnet(batch: int, rng: np.random.Generator, image_size: int = 224, **_) -> dict[str, np.ndarray]:
    return {"input": rng.standard_normal((batch, 3, image_size, image_size), dtype=np.float32)}

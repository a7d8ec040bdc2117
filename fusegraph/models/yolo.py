"""YOLOv8n-style detector as an ultralytics ONNX export looks (BN already fused into conv biases).

Conv-SiLU is Conv + Sigmoid + Mul, C2f blocks Split and Concat, SPPF chains MaxPools, the neck
upsamples with nearest Resize, and the Detect head ends in DFL (Reshape, Transpose, Softmax, 1x1 Conv
with arange weights) plus box decoding against constant anchor/stride grids:
output0 = [batch, 4 + classes, anchors] with (cx, cy, w, h) in pixels and sigmoid class scores.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from ._builder import GraphBuilder

_REG_MAX = 16  # DFL bins per box side
_STRIDES = (8, 16, 32)


def _conv(g: GraphBuilder, x: str, c_in: int, c_out: int, k: int = 1, s: int = 1, name: str = "conv") -> str:
    y = g.conv_fused_bn(x, c_in, c_out, k, s, name=name)
    return g.node("Mul", [y, g.node("Sigmoid", [y], name=f"{name}.act.Sigmoid")], name=f"{name}.act.Mul")


def _c2f(g: GraphBuilder, x: str, c_in: int, c_out: int, n: int, shortcut: bool, name: str) -> str:
    c = c_out // 2
    y = _conv(g, x, c_in, 2 * c, 1, name=f"{name}.cv1")
    parts = g.node("Split", [y, g.const([c, c], np.int64)], n_out=2, name=f"{name}.Split", axis=1)
    for i in range(n):
        b = _conv(g, parts[-1], c, c, 3, name=f"{name}.m.{i}.cv1")
        b = _conv(g, b, c, c, 3, name=f"{name}.m.{i}.cv2")
        parts.append(g.node("Add", [parts[-1], b]) if shortcut else b)
    y = g.node("Concat", parts, name=f"{name}.Concat", axis=1)
    return _conv(g, y, (2 + n) * c, c_out, 1, name=f"{name}.cv2")


def _sppf(g: GraphBuilder, x: str, c_in: int, c_out: int, name: str) -> str:
    c = c_in // 2
    ys = [_conv(g, x, c_in, c, 1, name=f"{name}.cv1")]
    for _ in range(3):
        ys.append(g.node("MaxPool", [ys[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return _conv(g, g.node("Concat", ys, axis=1), 4 * c, c_out, 1, name=f"{name}.cv2")


def _upsample(g: GraphBuilder, x: str) -> str:
    scales = g.const([1.0, 1.0, 2.0, 2.0])
    return g.node(
        "Resize", [x, "", scales], mode="nearest",
        coordinate_transformation_mode="asymmetric", nearest_mode="floor",
    )  # fmt: skip


def _anchor_grids(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Anchor centres [2, A] in grid units and per-anchor strides [1, A], as make_anchors builds them."""
    points, strides = [], []
    for s in _STRIDES:
        n = image_size // s
        sy, sx = np.meshgrid(np.arange(n) + 0.5, np.arange(n) + 0.5, indexing="ij")
        points.append(np.stack([sx.ravel(), sy.ravel()]))
        strides.append(np.full(n * n, s))
    return np.concatenate(points, 1).astype(np.float32), np.concatenate(strides)[None].astype(np.float32)


def _detect(g: GraphBuilder, feats: list[str], chans: list[int], nc: int, image_size: int) -> str:
    c2, c3 = max(16, chans[0] // 4, 4 * _REG_MAX), max(chans[0], min(nc, 100))
    # prior on class logits so random scores start low, like ultralytics' bias_init (~1% objects)
    cls_bias = -math.log((1 - 0.01) / 0.01)
    levels = []
    for i, (x, c) in enumerate(zip(feats, chans, strict=True)):
        p = f"model.22.cv2.{i}"
        box = _conv(g, _conv(g, x, c, c2, 3, name=f"{p}.0"), c2, c2, 3, name=f"{p}.1")
        box = g.conv(box, c2, 4 * _REG_MAX, 1, bias=True, name=f"{p}.2")
        p = f"model.22.cv3.{i}"
        cls = _conv(g, _conv(g, x, c, c3, 3, name=f"{p}.0"), c3, c3, 3, name=f"{p}.1")
        w = g.normal([nc, c3, 1, 1], 1.0 / math.sqrt(c3), f"{p}.2.weight")
        b = g.initializer(np.full(nc, cls_bias, np.float32), f"{p}.2.bias")
        cls = g.node("Conv", [cls, w, b], name=f"{p}.2", kernel_shape=[1, 1])
        y = g.node("Concat", [box, cls], axis=1)
        levels.append(g.node("Reshape", [y, g.const([0, 4 * _REG_MAX + nc, -1], np.int64)]))
    y = g.node("Concat", levels, axis=2)  # [b, 64 + nc, A]
    box, cls = g.node("Split", [y, g.const([4 * _REG_MAX, nc], np.int64)], n_out=2, axis=1)

    # DFL: expected bin index of a softmax over 16 bins, computed by a 1x1 conv with weights 0..15
    d = g.node("Reshape", [box, g.const([0, 4, _REG_MAX, -1], np.int64)])
    d = g.node("Softmax", [g.node("Transpose", [d], perm=[0, 2, 1, 3])], axis=1)  # [b, 16, 4, A]
    bins = g.initializer(
        np.arange(_REG_MAX, dtype=np.float32).reshape(1, _REG_MAX, 1, 1), "model.22.dfl.conv.weight"
    )
    d = g.node("Conv", [d, bins], name="model.22.dfl.conv", kernel_shape=[1, 1])
    d = g.node("Reshape", [d, g.const([0, 4, -1], np.int64)])  # [b, 4, A] = (left, top, right, bottom)

    # dist2bbox(xywh=True) against the anchor grid, then scale by the per-anchor stride
    anchors, strides = _anchor_grids(image_size)
    anchors, strides = g.initializer(anchors, "anchors"), g.initializer(strides, "strides")
    lt, rb = g.node("Split", [d, g.const([2, 2], np.int64)], n_out=2, axis=1)
    x1y1, x2y2 = g.node("Sub", [anchors, lt]), g.node("Add", [anchors, rb])
    cxy = g.node("Div", [g.node("Add", [x1y1, x2y2]), g.const(2.0)])
    wh = g.node("Sub", [x2y2, x1y1])
    dbox = g.node("Mul", [g.node("Concat", [cxy, wh], axis=1), strides])
    return g.node("Concat", [dbox, g.node("Sigmoid", [cls])], axis=1)


def build_yolov8(
    num_classes: int = 80, width: float = 0.25, depth: float = 0.33, image_size: int = 640,
    seed: int = 0, name: str = "yolov8n",
) -> onnx.ModelProto:  # fmt: skip
    """YOLOv8 at the given width/depth multiples; the defaults are YOLOv8n (3.2M parameters)."""
    assert image_size % 32 == 0, "the anchor grid needs image_size divisible by the largest stride"
    c1, c2, c3, c4, c5 = (min(int(c * width), 1024) for c in (64, 128, 256, 512, 1024))
    n3, n6 = max(round(3 * depth), 1), max(round(6 * depth), 1)
    # BN statistics are measured on one N(0, 1) image (GraphBuilder.conv_fused_bn) at full size: on a
    # smaller probe, padding and the SPPF pools see different statistics and deep layers drift again
    probe = np.random.default_rng(seed).standard_normal((1, 3, image_size, image_size), dtype=np.float32)
    g = GraphBuilder(name, seed + 1, probe={"images": probe})
    x = g.input("images", TensorProto.FLOAT, ["batch", 3, image_size, image_size])

    x = _conv(g, x, 3, c1, 3, 2, name="model.0")  # P1/2
    x = _conv(g, x, c1, c2, 3, 2, name="model.1")  # P2/4
    x = _c2f(g, x, c2, c2, n3, True, "model.2")
    x = _conv(g, x, c2, c3, 3, 2, name="model.3")  # P3/8
    p3 = _c2f(g, x, c3, c3, n6, True, "model.4")
    x = _conv(g, p3, c3, c4, 3, 2, name="model.5")  # P4/16
    p4 = _c2f(g, x, c4, c4, n6, True, "model.6")
    x = _conv(g, p4, c4, c5, 3, 2, name="model.7")  # P5/32
    x = _c2f(g, x, c5, c5, n3, True, "model.8")
    p5 = _sppf(g, x, c5, c5, "model.9")

    # PAN neck: top-down with nearest upsampling, then bottom-up with strided convs
    h4 = _c2f(g, g.node("Concat", [_upsample(g, p5), p4], axis=1), c5 + c4, c4, n3, False, "model.12")
    h3 = _c2f(g, g.node("Concat", [_upsample(g, h4), p3], axis=1), c4 + c3, c3, n3, False, "model.15")
    x = g.node("Concat", [_conv(g, h3, c3, c3, 3, 2, name="model.16"), h4], axis=1)
    o4 = _c2f(g, x, c3 + c4, c4, n3, False, "model.18")
    x = g.node("Concat", [_conv(g, o4, c4, c4, 3, 2, name="model.19"), p5], axis=1)
    o5 = _c2f(g, x, c4 + c5, c5, n3, False, "model.21")

    y = _detect(g, [h3, o4, o5], [c3, c4, c5], num_classes, image_size)
    anchors = sum((image_size // s) ** 2 for s in _STRIDES)
    g.output(y, "output0", TensorProto.FLOAT, ["batch", 4 + num_classes, anchors])
    return g.build(f"{name}: YOLOv8 width={width} depth={depth}, {num_classes} classes, random weights")


def sample_yolov8(batch: int, rng: np.random.Generator, image_size: int = 640, **_) -> dict[str, np.ndarray]:
    return {"images": rng.standard_normal((batch, 3, image_size, image_size), dtype=np.float32)}

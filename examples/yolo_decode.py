"""A worked custom op: a fused YOLO box decoder (sigmoid, grid offsets and stride scaling in one op).

One detection level's raw head output x [B, H, W, 4 + C] (per cell: tx, ty, tw, th, then C class
logits) becomes [B, H*W, 4 + C]: per cell (cx, cy, w, h) in pixels, then the class probabilities,

    cx = (sigmoid(tx) + col) * stride     w = exp(tw) * stride
    cy = (sigmoid(ty) + row) * stride     h = exp(th) * stride
    p  = sigmoid(logits)                  (or the logits as they are, sigmoid_scores=0)

one pass over memory where the ONNX graph spells it as a dozen ops (Sigmoid, Exp, Add of a grid
constant, Mul, Slice, Concat, Reshape). The definition below gives the op everything: its ONNX
domain and name, typed attributes, a shape rule that takes dynamic H and W, the numpy reference,
a C kernel for the cpu target and a torch function for the gpu target.

    python examples/yolo_decode.py          # builds a model with the op, runs it on ref and cpu
    fusegraph --custom-ops examples/yolo_decode.py verify decode.onnx --target cpu
"""

from __future__ import annotations

import numpy as np

import fusegraph
from fusegraph.custom import Attr, CKernel, TorchKernel
from fusegraph.errors import ShapeError
from fusegraph.ir import Dim, Shape

DOMAIN, NAME = "com.example.vision", "YoloDecode"


def decode_shape(inputs, *, stride, sigmoid_scores):
    """[B, H, W, 4 + C] -> [B, H*W, 4 + C]; H and W may be ranges (Dim(min, max), max None: unbounded)."""
    (x,) = inputs
    if x.ndim != 4 or x.dims[3].max is None or x.dims[3].min != x.dims[3].max or x.dims[3].min < 5:
        raise ShapeError(f"{DOMAIN}.{NAME}: expects [B, H, W, 4 + classes] with classes >= 1 fixed, got {x}")
    h, w = x.dims[1], x.dims[2]
    cells = Dim(h.min * w.min, None if h.max is None or w.max is None else h.max * w.max)
    return Shape.dynamic(x.dtype, [x.dims[0], cells, x.dims[3]])


def decode_reference(x, *, stride, sigmoid_scores):
    b, h, w, k = x.shape
    row, col = np.meshgrid(np.arange(h, dtype=x.dtype), np.arange(w, dtype=x.dtype), indexing="ij")
    sig = 1 / (1 + np.exp(-x))
    s = x.dtype.type(stride)
    out = np.empty_like(x)
    out[..., 0] = (sig[..., 0] + col) * s
    out[..., 1] = (sig[..., 1] + row) * s
    out[..., 2] = np.exp(x[..., 2]) * s
    out[..., 3] = np.exp(x[..., 3]) * s
    out[..., 4:] = sig[..., 4:] if sigmoid_scores else x[..., 4:]
    return out.reshape(b, h * w, k)


C_SOURCE = r"""
#include <math.h>
/* p[0] out [B, H*W, K], p[1] x [B, H, W, K]; d = 3, B, H*W, K, 4, B, H, W, K */
void yolo_decode(void *const *p, const int64_t *d, int nt) {
    float *out = (float *)p[0];
    const float *x = (const float *)p[1];
    const int64_t B = d[5], H = d[6], W = d[7], K = d[8];
    const float s = ATTR_stride;
    #pragma omp parallel for num_threads(nt) collapse(2) if (B * H * W * K > 65536)
    for (int64_t b = 0; b < B; ++b)
        for (int64_t r = 0; r < H; ++r)
            for (int64_t c = 0; c < W; ++c) {
                const float *t = x + ((b * H + r) * W + c) * K;
                float *o = out + ((b * H + r) * W + c) * K;
                o[0] = (1.0f / (1.0f + expf(-t[0])) + (float)c) * s;
                o[1] = (1.0f / (1.0f + expf(-t[1])) + (float)r) * s;
                o[2] = expf(t[2]) * s;
                o[3] = expf(t[3]) * s;
                for (int64_t k = 4; k < K; ++k)
                    o[k] = ATTR_sigmoid_scores ? 1.0f / (1.0f + expf(-t[k])) : t[k];
            }
}
"""


def decode_torch(x, *, stride, sigmoid_scores):
    import torch

    b, h, w, k = x.shape
    row = torch.arange(h, device=x.device, dtype=x.dtype)[:, None].expand(h, w)
    col = torch.arange(w, device=x.device, dtype=x.dtype)[None, :].expand(h, w)
    sig = torch.sigmoid(x)
    xy = (sig[..., :2] + torch.stack([col, row], -1)) * stride
    wh = torch.exp(x[..., 2:4]) * stride
    cls = sig[..., 4:] if sigmoid_scores else x[..., 4:]
    return torch.cat([xy, wh, cls], -1).reshape(b, h * w, k)


YOLO_DECODE = fusegraph.custom_op(
    NAME, domain=DOMAIN, version=1,
    attributes={"stride": Attr(float, 8.0, check=lambda v: v > 0, must="be positive"),
                "sigmoid_scores": Attr(bool, True)},
    shape=decode_shape, reference=decode_reference,
    cpu=CKernel(C_SOURCE, "yolo_decode"), gpu=TorchKernel(decode_torch),
    doc="A fused YOLO box decoder: sigmoid + grid offsets + stride scaling (examples/yolo_decode.py).")


def decode_model(classes: int = 3, stride: float = 8.0, opset: int = 17):
    """An ONNX model: raw [B, H, W, 4 + classes] (B, H, W symbolic) -> YoloDecode -> decoded."""
    from onnx import TensorProto, helper

    node = helper.make_node(NAME, ["raw"], ["decoded"], domain=DOMAIN, stride=stride, name="decode")
    graph = helper.make_graph(
        [node], "yolo_decode", [helper.make_tensor_value_info("raw", TensorProto.FLOAT, ["B", "H", "W", 4 + classes])],
        [helper.make_tensor_value_info("decoded", TensorProto.FLOAT, ["B", "cells", 4 + classes])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=8)


def main() -> None:
    x = np.random.default_rng(0).standard_normal((1, 20, 20, 7)).astype(np.float32)
    dims = {"raw": [1, (1, 80), (1, 80), 7]}  # any grid up to 80 x 80: one compile serves them all
    want = fusegraph.parse_onnx(decode_model(), map_dyn_input_dims=dims).compile("ref").run({"raw": x})[0]
    got = fusegraph.parse_onnx(decode_model(), map_dyn_input_dims=dims).compile("cpu").run({"raw": x})[0]
    print(f"decoded {got.shape}; cpu vs ref max |diff| {np.abs(got - want).max():.2e}")


if __name__ == "__main__":
    main()

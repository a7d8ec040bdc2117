"""ResNet-50 (torchvision v1.5, BN folded into the convs, random weights) as a chain of oneDNN primitives,
and the same network with the same weights as an ONNX model for ONNX Runtime.

A chain runs in one activation layout: "nchw", "nhwc" or "any" (oneDNN's choice, handed from each
primitive's dst_desc to the next one's src, so only the network's edges reorder). Every buffer is
allocated once (residual blocks accumulate in place); a call only binds pointers and executes. Used by
benchmarks/onednn_vs_numpy.py.
"""

from __future__ import annotations

import numpy as np

from fusegraph.targets.cpu import onednn as dnnl

LAYERS, WIDTHS = (3, 4, 6, 3), (64, 128, 256, 512)


class ResNetChain:
    def __init__(self, layout: str, threads: int, seed: int = 0, fpmath: str = "strict"):
        self.rng = np.random.default_rng(seed)
        self.layout, self.threads, self.fpmath = layout, threads, fpmath
        self.spec: list[tuple] = []    # (kind, name, inputs, params) for the ONNX twin
        self.steps: list = []          # (primitive, input buffer names, output name)
        self.bufs: dict[str, np.ndarray] = {}
        self.descs: dict[str, dnnl.MemDesc] = {}
        self.gflop, self.reorders = 0.0, 0
        self._build()

    # -- construction -----------------------------------------------------------------------------
    def _conv(self, src: str, cin: int, cout: int, k: int, s: int, name: str, relu=True, residual=None) -> str:
        w = (self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))).astype(np.float32)
        if residual is not None:
            w *= 0.2  # a soft zero-init of the residual branch keeps activations O(1) over 16 blocks
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        # the residual add is a Sum post-op into the identity's own buffer (in place: nothing reads the
        # identity later); every optimized kernel has it, unlike a full-size Binary in NCHW
        post = [dnnl.Sum()] if residual is not None else []
        if relu:
            post.append(dnnl.Eltwise("relu"))
        p = k // 2
        conv = dnnl.Convolution(self.descs[src], w, b, stride=(s, s), padding=(p,) * 4, post_ops=post,
                                dst_layout=self.descs[residual] if residual else self.layout, fpmath=self.fpmath,
                                threads=self.threads)
        self._add(conv, [src], name)
        if residual is not None:
            self.bufs[name] = self.bufs[residual]
        self.spec.append(("conv", name, [src] + ([residual] if residual else []), dict(w=w, b=b, s=s, p=p, relu=relu)))
        self.gflop += 2 * w.size * np.prod(conv.out_shape[2:]) / 1e9
        return name

    def _add(self, prim, inputs: list[str], name: str) -> None:
        self.descs[name] = prim.dst_desc
        self.bufs[name] = prim.dst_desc.empty()
        self.steps.append((prim, inputs, name))

    def _bottleneck(self, x: str, cin: int, width: int, stride: int, name: str) -> str:
        y = self._conv(x, cin, width, 1, 1, f"{name}.conv1")
        y = self._conv(y, width, width, 3, stride, f"{name}.conv2")
        identity = x
        if stride != 1 or cin != width * 4:
            identity = self._conv(x, cin, width * 4, 1, stride, f"{name}.downsample", relu=False)
        return self._conv(y, width, width * 4, 1, 1, f"{name}.conv3", residual=identity)

    def _build(self) -> None:
        plain_in = dnnl.MemDesc.plain((1, 3, 224, 224))
        # the stem takes the caller's NCHW image; in another layout one edge reorder goes first
        first = dnnl.activation_desc((1, 3, 224, 224), self.layout if self.layout != "any" else "nchw")
        if self.layout == "any":
            probe = dnnl.Convolution((1, 3, 224, 224), np.zeros((64, 3, 7, 7), np.float32), stride=(2, 2),
                                     padding=(3,) * 4, src_layout="any", dst_layout="any", threads=self.threads)
            first = probe.src_desc
        self.descs["x"] = plain_in
        if first != plain_in:
            self._add(dnnl.Reorder(plain_in, first, self.threads), ["x"], "x_in")
            self.descs["x_in"], self.reorders = first, self.reorders + 1
        x = self._conv("x_in" if first != plain_in else "x", 3, 64, 7, 2, "conv1")
        pool = dnnl.Pooling(self.descs[x], "max", (3, 3), stride=(2, 2), padding=(1,) * 4, dst_layout=self.layout,
                            threads=self.threads)
        self._add(pool, [x], "maxpool")
        self.spec.append(("maxpool", "maxpool", [x], {}))
        x, cin = "maxpool", 64
        for stage, (blocks, width) in enumerate(zip(LAYERS, WIDTHS), start=1):
            for i in range(blocks):
                x = self._bottleneck(x, cin, width, 2 if stage > 1 and i == 0 else 1, f"layer{stage}.{i}")
                cin = width * 4
        # pooling keeps the layout (a jit kernel needs src and dst alike); the 8 KB result goes plain after
        gap = dnnl.Pooling(self.descs[x], "average", (7, 7), dst_layout=self.layout, threads=self.threads)
        plain = dnnl.MemDesc.plain(gap.out_shape)
        self._add(gap, [x], "avgpool" if gap.dst_desc == plain else "avgpool.raw")
        if gap.dst_desc != plain:
            self._add(dnnl.Reorder(gap.dst_desc, plain, self.threads), ["avgpool.raw"], "avgpool")
            self.reorders += 1
        self.spec.append(("avgpool", "avgpool", [x], {}))
        w = (self.rng.standard_normal((cin, 1000)) / np.sqrt(cin)).astype(np.float32)
        b = (self.rng.standard_normal(1000) * 0.1).astype(np.float32)
        fc = dnnl.MatMul((1, cin), w, b, fpmath=self.fpmath, threads=self.threads)
        self.bufs["avgpool.2d"] = self.bufs["avgpool"].reshape(1, cin)  # Flatten: a view
        self._add(fc, ["avgpool.2d"], "fc")
        self.spec.append(("fc", "fc", ["avgpool"], dict(w=w, b=b)))
        self.gflop += 2 * w.size / 1e9

    # -- running ----------------------------------------------------------------------------------
    def __call__(self, x: np.ndarray) -> np.ndarray:
        bufs = self.bufs
        bufs["x"] = x
        for prim, inputs, name in self.steps:
            prim(*[bufs[i] for i in inputs], out=bufs[name])
        return bufs["fc"]


def ort_resnet(chain: ResNetChain):
    """The chain's network as ONNX (Conv+Relu, Add+Relu, MaxPool, GlobalAveragePool, Gemm), same weights."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    for kind, name, ins, p in chain.spec:
        ins = ["x" if i == "x_in" else i for i in ins]
        if kind == "conv":
            inits += [numpy_helper.from_array(p["w"], f"{name}.w"), numpy_helper.from_array(p["b"], f"{name}.b")]
            k = p["w"].shape[2]
            conv_out = f"{name}.conv" if (p["relu"] or len(ins) > 1) else name
            nodes.append(helper.make_node("Conv", [ins[0], f"{name}.w", f"{name}.b"], [conv_out], kernel_shape=[k, k],
                                          strides=[p["s"]] * 2, pads=[p["p"]] * 4))
            if len(ins) > 1:
                add_out = f"{name}.add" if p["relu"] else name
                nodes.append(helper.make_node("Add", [conv_out, ins[1]], [add_out]))
                conv_out = add_out
            if p["relu"]:
                nodes.append(helper.make_node("Relu", [conv_out], [name]))
        elif kind == "maxpool":
            nodes.append(helper.make_node("MaxPool", ins, [name], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4))
        elif kind == "avgpool":
            nodes += [helper.make_node("GlobalAveragePool", ins, [f"{name}.4d"]),
                      helper.make_node("Flatten", [f"{name}.4d"], [name])]
        else:
            inits += [numpy_helper.from_array(p["w"], "fc.w"), numpy_helper.from_array(p["b"], "fc.b")]
            nodes.append(helper.make_node("Gemm", [ins[0], "fc.w", "fc.b"], ["fc"]))
    graph = helper.make_graph(nodes, "resnet50_folded",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("fc", TensorProto.FLOAT, [1, 1000])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

"""A small ONNX graph builder shared by the model zoo.

It keeps the zoo's model files short: initializers get deterministic random values from one seeded
numpy Generator, nodes get unique names/outputs automatically, and common blocks (conv + bn + act)
are one call. Only onnx.helper / onnx.numpy_helper are used, so the output looks like an exporter's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view
from onnx import helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # onnxruntime 1.17+ loads IR 8 / opset 17 everywhere

Dim = int | str | None


# -- numpy evaluation of a probe batch ------------------------------------------------------------------
# Just enough ops to push a probe batch through conv backbones while they are built, so that
# `conv_fused_bn` can fold *measured* BatchNorm statistics into a conv, as real exports do. Ops without
# an entry simply produce no probe value; a conv that needs one then fails loudly.
def _windows(x: np.ndarray, k: list[int], strides: list[int], pads: list[int], fill: float) -> np.ndarray:
    x = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])], constant_values=fill)
    return sliding_window_view(x, k, axis=(2, 3))[:, :, :: strides[0], :: strides[1]]


def _conv(x, w, b=None, *, kernel_shape, strides=(1, 1), pads=(0, 0, 0, 0), group=1, **_):
    assert group == 1, "probe evaluation supports dense convolutions only"
    y = np.einsum("nchwij,ocij->nohw", _windows(x, kernel_shape, strides, pads, 0.0), w, optimize=True)
    return y if b is None else y + b[:, None, None]


def _split(x, split, *, axis):
    return np.split(x, np.cumsum(split)[:-1], axis=axis)


def _maxpool(x, *, kernel_shape, strides, pads, **_):
    return _windows(x, kernel_shape, strides, pads, -np.inf).max(axis=(-2, -1))


def _resize(x, roi, scales, **_):
    for axis, s in enumerate(scales):  # nearest + asymmetric + floor with integer scales is a repeat
        x = np.repeat(x, int(s), axis=axis) if s != 1 else x
    return x


_EVAL = {
    "Conv": _conv,
    "Sigmoid": lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)),  # the tanh form cannot overflow
    "Relu": lambda x: np.maximum(x, 0),
    "Mul": np.multiply,
    "Add": np.add,
    "Concat": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "Split": _split,
    "MaxPool": _maxpool,
    "Resize": _resize,
}


class GraphBuilder:
    """Accumulates nodes, initializers and graph inputs/outputs for one model."""

    def __init__(self, name: str, seed: int = 0, probe: dict[str, np.ndarray] | None = None):
        """`probe` (graph input name -> small batch) turns on eager numpy evaluation for `conv_fused_bn`."""
        self.name = name
        self.probe = probe
        self.values: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._counts: dict[str, int] = {}
        self._consts: dict[tuple, str] = {}  # dedupes small constants by (dtype, shape, bytes)

    # -- naming ---------------------------------------------------------------------------------
    def unique(self, base: str) -> str:
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    # -- graph interface ----------------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        if self.probe is not None and name in self.probe:
            # float64 so BLAS summation order (machine, thread count) cannot change the measured stats
            self.values[name] = self.probe[name].astype(np.float64)
        return name

    def output(self, value: str, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        """Declares `value` as a graph output called `name`; use the returned name from then on.

        Like an exporter, the producing node's output is renamed rather than copied through Identity.
        """
        producers = [n for n in self.nodes if value in n.output]
        if value != name and producers:
            for n in self.nodes:
                for field in (n.input, n.output):
                    for i, v in enumerate(field):
                        if v == value:
                            field[i] = name
            if value in self.values:
                self.values[name] = self.values.pop(value)
        elif value != name:  # a graph input or initializer passed straight through
            self.nodes.append(helper.make_node("Identity", [value], [name], name=self.unique("Identity")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def initializer(self, array: np.ndarray, name: str) -> str:
        name = self.unique(name)
        # asarray (not ascontiguousarray, which promotes 0-d to 1-d) keeps scalar constants rank 0
        array = np.asarray(array, order="C")
        self.initializers.append(numpy_helper.from_array(array, name))
        if self.probe is not None:
            self.values[name] = array
        return name

    def const(self, value, dtype=np.float32) -> str:
        """A small constant initializer, shared between all users of the same value."""
        array = np.asarray(value, dtype=dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            self._consts[key] = self.initializer(array, "const")
        return self._consts[key]

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, name: str | None = None, **attrs):
        """Appends a node; returns its output name (or a list of them when n_out > 1)."""
        node_name = self.unique(name or op)
        outs = [f"{node_name}_out{i}" if n_out > 1 else f"{node_name}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=node_name, **attrs))
        if self.probe is not None and op in _EVAL and all(i in self.values for i in inputs if i):
            result = _EVAL[op](*(self.values.get(i) for i in inputs), **attrs)
            for out, value in zip(outs, result if n_out > 1 else [result], strict=True):
                self.values[out] = value
        return outs[0] if n_out == 1 else outs

    # -- random weights -----------------------------------------------------------------------------
    def normal(self, shape: Sequence[int], std: float, name: str) -> str:
        # float32 draw avoids a float64 intermediate for the 100M-parameter models
        w = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        w *= np.float32(std)
        return self.initializer(w, name)

    def uniform(self, shape: Sequence[int], low: float, high: float, name: str) -> str:
        return self.initializer(self.rng.uniform(low, high, tuple(shape)).astype(np.float32), name)

    def he(self, shape: Sequence[int], fan_in: int, name: str, gain: float = 1.0) -> str:
        """He-normal init: keeps the activation variance ~constant through ReLU-like layers."""
        return self.normal(shape, gain * math.sqrt(2.0 / fan_in), name)

    # -- blocks ---------------------------------------------------------------------------------------
    def conv(
        self,
        x: str,
        c_in: int,
        c_out: int,
        k: int,
        stride: int = 1,
        pad: int | None = None,
        group: int = 1,
        bias: bool = False,
        name: str = "conv",
        gain: float = 1.0,
    ) -> str:
        pad = k // 2 if pad is None else pad
        fan_in = c_in // group * k * k
        ins = [x, self.he([c_out, c_in // group, k, k], fan_in, f"{name}.weight", gain)]
        if bias:
            ins.append(self.uniform([c_out], -0.1, 0.1, f"{name}.bias"))
        return self.node(
            "Conv", ins, name=name, kernel_shape=[k, k], strides=[stride, stride],
            pads=[pad] * 4, dilations=[1, 1], group=group,
        )  # fmt: skip

    def batchnorm(self, x: str, c: int, name: str = "bn", gamma: float = 1.0) -> str:
        """Inference BatchNormalization with random but sane statistics (var > 0, gamma ~ `gamma`)."""
        scale = self.uniform([c], 0.8 * gamma, 1.2 * gamma, f"{name}.weight")
        b = self.uniform([c], -0.1, 0.1, f"{name}.bias")
        mean = self.uniform([c], -0.1, 0.1, f"{name}.running_mean")
        var = self.uniform([c], 0.8, 1.2, f"{name}.running_var")
        return self.node("BatchNormalization", [x, scale, b, mean, var], name=name, epsilon=1e-5)

    def conv_fused_bn(
        self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, name: str = "conv"
    ) -> str:  # fmt: skip
        """Conv with bias whose weights are a random conv with a trained-looking BN folded in.

        The BN statistics are measured on the probe batch, so every output channel leaves with mean
        ~beta and std ~gamma: without that, random SiLU nets drift to 0 or to overflow with depth.
        """
        if x not in self.values:
            raise ValueError(f"conv_fused_bn({name}): input {x!r} has no probe value; build with probe=...")
        pad = k // 2
        w = self.rng.standard_normal((c_out, c_in, k, k), dtype=np.float32)
        attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1])
        y = _conv(self.values[x], w, **attrs)
        mean, std = y.mean(axis=(0, 2, 3)), y.std(axis=(0, 2, 3)) + 1e-5
        # float64 probe + fp16-rounded stats: builds are bit-identical across machines in practice
        mean, std = (v.astype(np.float16).astype(np.float32) for v in (mean, std))
        gamma = self.rng.uniform(0.8, 1.2, c_out).astype(np.float32)
        beta = self.rng.uniform(-0.2, 0.2, c_out).astype(np.float32)
        w *= (gamma / std)[:, None, None, None]
        b = (beta - mean * gamma / std).astype(np.float32)
        ins = [x, self.initializer(w, f"{name}.weight"), self.initializer(b, f"{name}.bias")]
        return self.node("Conv", ins, name=name, **attrs)

    def conv_bn_act(
        self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, act: str | None = "Relu",
        name: str = "conv", gamma: float = 1.0,
    ) -> str:  # fmt: skip
        y = self.batchnorm(self.conv(x, c_in, c_out, k, stride, name=name), c_out, f"{name}.bn", gamma)
        return self.node(act, [y], name=f"{name}.{act.lower()}") if act else y

    def linear(self, x: str, d_in: int, d_out: int, name: str, std: float | None = None) -> str:
        """MatMul + Add, as transformers exports nn.Linear on 3-D activations.

        Xavier-like std 1/sqrt(d_in) by default, so every sublayer contributes O(1) to its residual
        (with BERT's own 0.02 the random layers would be near-identities and hide numeric bugs).
        """
        std = 1.0 / math.sqrt(d_in) if std is None else std
        y = self.node("MatMul", [x, self.normal([d_in, d_out], std, f"{name}.weight")], name=f"{name}.MatMul")
        bias = self.uniform([d_out], -0.05, 0.05, f"{name}.bias")
        return self.node("Add", [y, bias], name=f"{name}.Add")

    def layer_norm(self, x: str, d: int, name: str) -> str:
        """LayerNormalization (opset 17) over the last axis, with gamma ~1 and beta ~0."""
        scale = self.uniform([d], 0.9, 1.1, f"{name}.weight")
        bias = self.uniform([d], -0.05, 0.05, f"{name}.bias")
        return self.node("LayerNormalization", [x, scale, bias], name=name, axis=-1, epsilon=1e-12)

    # -- finish ---------------------------------------------------------------------------------------
    def build(self, doc: str = "") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fusegraph.models"
        )
        # weights go in after make_model, which deep-copies its graph: one copy of ~440 MB for BERT-base
        model.graph.initializer.extend(self.initializers)
        model.ir_version = IR_VERSION
        model.doc_string = doc
        return model

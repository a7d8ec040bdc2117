"""Models with control flow (If / Loop from scripted torch, Scan built with onnx.helper) and a
hand-built graph network over GatherND / ScatterND (torch lowers its indexing to Gather instead)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .build import export
from .registry import register


@register("script_if", "control flow", lambda rng: {"x": rng.standard_normal((2, 16)).astype(np.float32)})
def script_if(feeds):  # a data-dependent branch: gate on the input's energy (If with two subgraphs)
    import torch

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 8), torch.nn.Linear(16, 8)

        def forward(self, x):
            if bool(x.pow(2).mean() > 0.5):
                y = torch.tanh(self.a(x))
            else:
                y = torch.relu(self.b(x)) * 2.0
            return y

    return export(torch.jit.script(Branchy()), feeds, ["y"])


@register("script_loop", "control flow",
          lambda rng: {"x": rng.standard_normal((2, 8)).astype(np.float32), "steps": np.array([5], dtype=np.int64)})
def script_loop(feeds):  # a recurrence run for a data-given number of steps (Loop with a carried state)
    import torch

    class Iterate(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.Linear(8, 8)

        def forward(self, x, steps):
            h = x
            acc = torch.zeros_like(x)
            for _ in range(int(steps)):
                h = torch.tanh(self.cell(h)) + 0.5 * h
                acc = acc + h
            return h, acc

    return export(torch.jit.script(Iterate()), feeds, ["h", "acc"])


def _w(rng, *shape, name):
    return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)


@register("scan_rnn", "control flow", lambda rng: {"x": rng.standard_normal((10, 2, 6)).astype(np.float32),
                                                    "h0": np.zeros((2, 4), dtype=np.float32)}, needs=())
def scan_rnn(feeds):  # an RNN written as Scan over time: state h, per-step output y, reversed second scan
    rng = np.random.default_rng(1)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "Wx"], ["a"]), helper.make_node("MatMul", ["h", "Wh"], ["b"]),
         helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Tanh", ["c"], ["h_next"]),
         helper.make_node("ReduceSum", ["h_next", "axis"], ["y_t"], keepdims=0)],
        "cell", [helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 4]),
                 helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.array([1], dtype=np.int64), "axis")])
    nodes = [helper.make_node("Scan", ["h0", "x"], ["h_fwd", "y_fwd"], body=body, num_scan_inputs=1),
             helper.make_node("Scan", ["h_fwd", "x"], ["h_bwd", "y_bwd"], body=body, num_scan_inputs=1,
                              scan_input_directions=[1])]
    graph = helper.make_graph(
        nodes, "scan_rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 2, 6]),
                            helper.make_tensor_value_info("h0", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
         (("h_bwd", [2, 4]), ("y_fwd", [10, 2]), ("y_bwd", [10, 2]))],
        [_w(rng, 6, 4, name="Wx"), _w(rng, 4, 4, name="Wh")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@register("gnn_gathernd", "graph", lambda rng: {
    "x": rng.standard_normal((6, 5, 4)).astype(np.float32),  # (graphs, nodes, features)
    "edges": np.stack([rng.integers(0, 6, 20), rng.integers(0, 5, 20)], 1).astype(np.int64)}, needs=())
def gnn_gathernd(feeds):  # edge features by GatherND (graph, node) pairs, messages written back by ScatterND add
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("GatherND", ["x", "edges"], ["h_e"]),  # (20, 4)
             helper.make_node("MatMul", ["h_e", "W"], ["m"]), helper.make_node("Relu", ["m"], ["msg"]),
             helper.make_node("ScatterND", ["x", "edges", "msg"], ["agg"], reduction="add"),
             helper.make_node("ScatterND", ["x", "edges", "msg"], ["mx"], reduction="max"),
             helper.make_node("Sub", ["agg", "mx"], ["out"])]
    graph = helper.make_graph(
        nodes, "gnn_gathernd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 5, 4]),
                                helper.make_tensor_value_info("edges", TensorProto.INT64, [20, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [6, 5, 4])], [_w(rng, 4, 4, name="W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


_ = onnx

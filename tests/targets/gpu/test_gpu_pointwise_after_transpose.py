"""pointwise_after_transpose (gpu pass): a pointwise op between a value and the transpose a reduction
reads moves after the transpose and joins the reduction's kernel (ConvNeXt's depthwise convolution
bias before its permute and layer norm). IR checks without a GPU; results against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.passes import eliminate_dead_code, generic_pipeline, run_pipeline
from fusegraph.targets.gpu.pointwise_after_transpose import pointwise_after_transpose
from tests.util import assert_close, make_model, run_ort

C = 8


def _block(extra_reader: bool = False, residual: bool = False):
    """conv -> add(bias) [-> mul(scale) -> add(r)] -> transpose(NHWC) -> layer norm over C."""
    rng = np.random.default_rng(11)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["a"], group=C, pads=[1, 1, 1, 1])]
    last = "a"
    if residual:
        nodes += [helper.make_node("Mul", ["a", "s"], ["m"]), helper.make_node("Add", ["m", "r"], ["y"])]
        last = "y"
    nodes += [helper.make_node("Transpose", [last], ["t"], perm=[0, 2, 3, 1]),
              helper.make_node("LayerNormalization", ["t", "g", "beta"], ["n"], axis=-1, epsilon=1e-6)]
    inits = {"w": rng.standard_normal((C, 1, 3, 3)).astype(np.float32), "b": rng.standard_normal(C).astype(np.float32),
             "g": rng.standard_normal(C).astype(np.float32), "beta": rng.standard_normal(C).astype(np.float32),
             "s": rng.standard_normal((C, 1, 1)).astype(np.float32)}
    x = {"x": rng.standard_normal((2, C, 6, 5)).astype(np.float32)}
    if residual:
        x["r"] = rng.standard_normal((2, C, 6, 5)).astype(np.float32)
    outputs = ["n", last] if extra_reader else ["n"]
    return make_model(nodes, x, outputs, initializers=inits, opset=17), x


def _top_level_ops(model) -> list[str]:
    p = fusegraph.parse_onnx(model)
    run_pipeline(p, generic_pipeline(before_fusion=(pointwise_after_transpose, eliminate_dead_code)))
    return [i.op.name for i in p.main.instructions if not i.is_literal and not i.is_param]


def test_the_bias_add_joins_the_layer_norm():
    ops = _top_level_ops(_block()[0])
    assert "add" not in ops and ops.count("fused_reduce") == 1


def test_a_chain_moves_whole():
    ops = _top_level_ops(_block(residual=True)[0])  # bias add, scale, residual add: all in the norm
    assert not {"add", "mul", "fused_pointwise"} & set(ops) and ops.count("fused_reduce") == 1


def test_an_op_with_another_reader_stays():
    ops = _top_level_ops(_block(extra_reader=True)[0])  # the add's value is also an output
    assert "transpose" in ops and ("add" in ops or "fused_pointwise" in ops)


@pytest.mark.parametrize("residual", [False, True])
def test_moved_ops_are_right(gpu_target, residual):
    model, x = _block(residual=residual)
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    assert_close(p.run(x), run_ort(model, x), rtol=1e-4, atol=1e-4)

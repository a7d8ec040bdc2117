"""plan_memory: epilogues write over a residual that dies with them; nothing live is overwritten."""

from __future__ import annotations

import numpy as np
from onnx import helper

import fusegraph
from fusegraph.passes.memory_coloring import plan_buffers
from fusegraph.targets.cpu.passes.plan_memory import SMALL_OUTPUT, TUPLE_WRITERS
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(13)
n = helper.make_node


def _w(*shape):
    return (rng.standard_normal(shape) * (1.0 / np.prod(shape[1:])) ** 0.5).astype(np.float32)


def _blocks(k: int, keep_residual: bool):
    """k residual blocks relu(conv(relu(conv(x))) + x); with `keep_residual` each block's input is
    also an output of the model, so it outlives the block."""
    nodes, init, outs, x = [], {}, [], "x"
    for b in range(k):
        init[f"w{b}a"], init[f"w{b}b"] = _w(8, 8, 3, 3), _w(8, 8, 3, 3)
        nodes += [n("Conv", [x, f"w{b}a"], [f"a{b}"], pads=[1, 1, 1, 1]), n("Relu", [f"a{b}"], [f"r{b}"]),
                  n("Conv", [f"r{b}", f"w{b}b"], [f"c{b}"], pads=[1, 1, 1, 1]), n("Add", [f"c{b}", x], [f"s{b}"]),
                  n("Relu", [f"s{b}"], [f"y{b}"])]
        if keep_residual and b:
            outs.append(x)
        x = f"y{b}"
    return nodes, init, outs + [x]


def _plan_is_sound(module) -> None:
    plan = module.memory_plan
    own = {b.uid: b for b in plan_buffers(module, TUPLE_WRITERS, SMALL_OUTPUT)}
    lives = {}  # buffer -> [first writer, last reader] over every uid planned into it
    for uid, b in plan.buffers.items():
        lo, hi = lives.get(id(b), (own[uid].start, own[uid].end))
        lives[id(b)] = (min(lo, own[uid].start), max(hi, own[uid].end))
    bufs = {id(b): b for b in plan.buffers.values()}
    items = list(lives.items())
    for i, (ka, (sa, ea)) in enumerate(items):
        for kb, (sb, eb) in items[i + 1:]:
            a, b = bufs[ka], bufs[kb]
            if sa <= eb and sb <= ea:  # alive together: disjoint bytes
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset


def _compiled_blocks(k: int, keep_residual: bool):
    """The program of `_blocks` compiled for cpu, checked against ONNX Runtime."""
    x = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    nodes, init, outs = _blocks(k, keep_residual)
    model = make_model(nodes, x, outs, init)
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    assert_close(p.run(x), run_ort(model, x))
    return p


def test_residual_chain_shares_buffers_and_stays_correct():
    p = _compiled_blocks(4, keep_residual=False)
    plan = p.main.memory_plan
    fused = [i for i in p.main.instructions if i.op.name == "conv_epilogue" and i.op.n_residual]
    shared = [i for i in fused if plan.buffers.get(i.uid) is plan.buffers.get(i.inputs[-1].uid)]
    # the first block's residual is the network input; the last block's result, the network output,
    # is small enough to be planned (and copied out)
    assert len(fused) == 4 and len(shared) == 3
    _plan_is_sound(p.main)


def test_residual_read_later_keeps_its_buffer():
    p = _compiled_blocks(3, keep_residual=True)
    plan = p.main.memory_plan
    for i in p.main.instructions:
        if i.op.name == "conv_epilogue" and i.op.n_residual and i.inputs[-1].uid in plan.buffers:
            assert plan.buffers[i.uid] is not plan.buffers[i.inputs[-1].uid]
    _plan_is_sound(p.main)


def test_residual_that_is_also_the_convolutions_input_keeps_its_buffer():
    # r + conv(r) (PP-OCRv6's depthwise blocks): r dies with the epilogue, but the convolution reads
    # it while writing its result; sharing r's buffer would read neighbours it has overwritten already
    x = {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}
    nodes = [n("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), n("Relu", ["a"], ["r"]),
             n("Conv", ["r", "w"], ["c"], pads=[1, 1, 1, 1], group=8), n("Add", ["c", "r"], ["s"]),
             n("Conv", ["s", "w1"], ["y"])]
    model = make_model(nodes, x, ["y"], {"w0": _w(8, 8, 3, 3), "w": _w(8, 1, 3, 3), "w1": _w(8, 8, 1, 1)})
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    plan = p.main.memory_plan
    fused = [i for i in p.main.instructions if i.op.name == "conv_epilogue" and i.op.n_residual]
    assert len(fused) == 1 and fused[0].inputs[0] is fused[0].inputs[-1]
    assert plan.buffers[fused[0].uid] is not plan.buffers[fused[0].inputs[-1].uid]
    assert_close(p.run(x), run_ort(model, x))
    _plan_is_sound(p.main)


def test_small_conv_whose_residual_is_its_input_adds_the_residual_not_itself():
    # 1-D convs stay channels-first and under SMALL_CONV, so numpy's small-conv kernel runs them; the
    # second epilogue's residual (the first's result) dies with it but is also its input, so it keeps
    # its own buffer, and the kernel adds the residual, not its own product (tcn_audio gave 2 * conv)
    x = {"x": rng.standard_normal((1, 6, 40)).astype(np.float32)}
    init = {"wa": _w(6, 6, 1), "wb": _w(6, 6, 3)}
    nodes = [n("Conv", ["x", "wa"], ["a"]), n("Add", ["a", "x"], ["r"]),
             n("Conv", ["r", "wb"], ["b"], pads=[1, 1]), n("Add", ["b", "r"], ["s"]),
             n("Pad", ["s", "pads"], ["out"], mode="constant")]
    init["pads"] = np.array([0, 0, 2, 0, 0, 0], np.int64)
    model = make_model(nodes, x, ["out"], init)
    p = fusegraph.parse_onnx(model)
    p.compile(fusegraph.get_target("cpu"))
    plan = p.main.memory_plan
    (second,) = [i for i in p.main.instructions if i.op.name == "conv_epilogue" and i.inputs[-1].op.name ==
                 "conv_epilogue"]
    assert plan.buffers[second.uid] is not plan.buffers[second.inputs[-1].uid]
    assert_close(p.run(x), run_ort(model, x))

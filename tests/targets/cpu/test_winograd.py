"""Winograd 3 x 3 convolutions on the cpu target (passes/choose_winograd.py, kernels/winograd.py,
codegen/winograd.py): which convolutions take it, and their results against the ref target (the
corpus's float32 tolerance), against the direct convolution, with NaN and infinity in the input,
as Python steps and as a native program."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.targets.cpu.codegen import winograd as codegen
from fusegraph.targets.cpu.kernels.winograd import chunks_of
from fusegraph.targets.cpu.native_program import GUARDED, Region
from tests.util import make_model, target_or_skip

rng = np.random.default_rng(5)
n = helper.make_node
DIRECT = ("choose_winograd",)


def _conv_model(c=32, k=32, h=32, w=32, batch=1, pads=(1, 1, 1, 1), strides=(1, 1), dilations=(1, 1), group=1,
                kernel=3, bias=True, act="Relu", residual=False, weights=None):
    """x -> sin -> Conv (-> + sin(x)) (-> act) -> a 1 x 1 Conv: the convolution's input and output in the
    arena, as inside a network (a native program's buffers)."""
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    init = {"w": weights if weights is not None else
            (rng.standard_normal((k, c // group, kernel, kernel)) / np.sqrt(9 * c)).astype(np.float32),
            "tail": (rng.standard_normal((k, k, 1, 1)) / np.sqrt(k)).astype(np.float32)}
    ins = ["s", "w"]
    if bias:
        init["b"] = rng.standard_normal(k).astype(np.float32)
        ins.append("b")
    nodes = [n("Sin", ["x"], ["s"]),
             n("Conv", ins, ["c"], pads=list(pads), strides=list(strides), dilations=list(dilations), group=group)]
    last = "c"
    if residual:
        nodes.append(n("Add", ["c", "s"], ["r"]))
        last = "r"
    if act:
        nodes.append(n(act, [last], ["a"]))
        last = "a"
    nodes.append(n("Conv", [last, "tail"], ["y"]))
    return make_model(nodes, {"x": x}, ["y"], init), x


def _compile(model, target="cpu", **options):
    p = fusegraph.parse_onnx(model)
    p.compile(target_or_skip("cpu") if target == "cpu" else fusegraph.get_target(target), fusegraph.CompileOptions(**options))
    return p


def _tiles(p) -> list[int]:
    """Each convolution's Winograd tile (0: direct) but the models' last, their 1 x 1 tail."""
    return [i.op.winograd for i in p.main if i.op.name == "conv_epilogue"][:-1]


def _matches_ref(model, feeds):
    got = _compile(model).run(feeds)[0]
    want = _compile(model, "ref").run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)  # tests/corpus/compare.py's float32 tolerance
    return got


@pytest.mark.parametrize("kw, tile", [
    ({}, 4),  # 32 x 32: 64 tiles of 4 x 4
    ({"h": 16, "w": 16}, 2),  # 16 tiles of 4 x 4: too few rows for F(4, 3)'s weights; 64 of 2 x 2
    ({"h": 8, "w": 8, "batch": 2}, 2),
    ({"h": 8, "w": 8}, 0),  # 16 tiles even of 2 x 2
    ({"strides": (2, 2)}, 0),
    ({"dilations": (2, 2), "pads": (2, 2, 2, 2)}, 0),
    ({"group": 2}, 0),
    ({"kernel": 1, "pads": (0, 0, 0, 0)}, 0),
    ({"c": 8}, 0),  # too few channels for the products
    ({"k": 8}, 0),
])
def test_which_convolutions_take_winograd(kw, tile):
    model, _ = _conv_model(**kw)
    assert _tiles(_compile(model)) == [tile]


def test_non_finite_or_huge_weights_and_the_disabled_pass_keep_the_direct_convolution():
    w = (rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)
    for bad in (np.nan, np.inf, 1e20):
        wb = w.copy()
        wb[3, 4, 1, 1] = bad
        assert _tiles(_compile(_conv_model(weights=wb)[0])) == [0]
    model, _ = _conv_model(weights=w)
    assert _tiles(_compile(model)) == [4]
    assert _tiles(_compile(model, disabled_passes=DIRECT)) == [0]


@pytest.mark.parametrize("kw", [
    {},
    {"h": 15, "w": 21},  # tiles past the edge on both axes
    {"h": 23, "w": 18, "pads": (0, 0, 0, 0)},
    {"h": 20, "w": 17, "pads": (0, 2, 1, 0)},  # asymmetric: output 19 x 17
    {"pads": (2, 2, 2, 2)},  # the output larger than the input
    {"c": 48, "k": 80, "h": 16, "w": 16},  # F(2, 3); channels not a multiple of the kernels' block
    {"c": 130, "k": 70, "h": 28, "w": 28, "bias": False, "act": "Sigmoid"},
    {"residual": True},  # the residual: plan_memory may hand its buffer to the output
    {"residual": True, "act": None, "batch": 3, "h": 12, "w": 12},
    {"act": "LeakyRelu", "batch": 2},
])
def test_winograd_matches_the_reference(kw):
    model, x = _conv_model(**kw)
    assert _tiles(_compile(model))[0] in (2, 4)
    got = _matches_ref(model, {"x": x})
    direct = _compile(model, disabled_passes=DIRECT).run({"x": x})[0]
    assert not np.array_equal(got, direct)  # another sum: not the direct convolution's bits


def test_a_large_batch_goes_through_in_passes_of_tiles():
    # 3 x 13 x 13 = 507 tiles of 4 x 4: two passes of 254 and 253 tiles, the second's products over
    # the first's leftover row
    model, x = _conv_model(c=16, k=24, h=52, w=52, batch=3, residual=False)
    assert _tiles(_compile(model)) == [4]
    assert chunks_of(507) == [(0, 254), (254, 253)]
    _matches_ref(model, {"x": x})


@pytest.mark.parametrize("m, size", [(2, 16), (4, 24)])
def test_the_transforms_are_within_float32_rounding_of_the_exact_convolution(m, size):
    # against float64: F(2, 3) within the direct convolution's rounding, F(4, 3) within ~10x of it
    x = rng.standard_normal((1, size, size, 64))
    w = rng.standard_normal((64, 64, 3, 3)) / 24
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    exact = sum(xp[:, i:i + size, j:j + size] @ w[:, :, i, j].T for i in range(3) for j in range(3))
    feeds = {"x": x.transpose(0, 3, 1, 2).astype(np.float32)}
    model = make_model([n("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], feeds, ["y"], {"w": w.astype(np.float32)})
    p = _compile(model)
    assert [i.op.winograd for i in p.main if i.op.name == "conv_epilogue"] == [m]
    errors = [np.abs(q.run(feeds)[0].transpose(0, 2, 3, 1) - exact).max()
              for q in (p, _compile(model, disabled_passes=DIRECT))]
    assert errors[0] < (1.5 if m == 2 else 12) * errors[1], errors


def test_the_weight_transform_makes_each_products_the_convolutions():
    # one tile, F(m, 3) by the matrices: A^T [(G g G^T) * (B^T d B)] A is the valid 3 x 3 correlation
    for m, (bt, g, at) in codegen.MATRICES.items():
        bt, g, at = (np.array(a, dtype=np.float64) for a in (bt, g, at))
        d, k = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
        y = at @ ((g @ k @ g.T) * (bt @ d @ bt.T)) @ at.T
        want = np.array([[np.sum(d[i:i + 3, j:j + 3] * k) for j in range(m)] for i in range(m)])
        np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
        u = codegen.weights(k.reshape(1, 1, 3, 3), m).reshape(m + 2, m + 2)
        np.testing.assert_allclose(u, g @ k @ g.T, rtol=1e-6)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_input_takes_the_direct_convolution(monkeypatch, value):
    # the transforms would spread it over whole tiles (inf - inf: NaN): the output is NaN (or inf)
    # exactly where the reference's is, natively and as Python steps
    model, x = _conv_model(residual=True, act="Relu")
    bad = x.copy()
    bad[0, 3, 5, 5] = value
    bad[0, 7, 0, 31] = value  # at the padded edge
    p = _compile(model)
    assert _tiles(p) == [4]
    (region,) = [r[0] for r in p.executable.main.thread_plan()[0] if isinstance(r[0], Region)]
    assert GUARDED in [c[0][0] for c in region.calls]
    want = _compile(model, "ref").run({"x": bad})[0]
    for native in ("1", "0"):
        monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", native)
        for feeds in ({"x": bad}, {"x": x}, {"x": bad}):  # a finite run between: the table goes on
            got = p.run(feeds)[0]
            if feeds["x"] is bad:
                np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
        monkeypatch.undo()


def test_the_native_program_and_the_python_steps_agree_bit_for_bit(monkeypatch):
    model, x = _conv_model(c=48, k=64, h=20, w=20, residual=False, act="Relu", batch=2)
    p = _compile(model)
    native = p.run({"x": x})[0]
    monkeypatch.setenv("FUSEGRAPH_NATIVE_PROGRAMS", "0")
    np.testing.assert_array_equal(_compile(model).run({"x": x})[0], native)


def test_resnet_blocks_match_the_reference_with_several_winograd_steps():
    # two 3 x 3 convolutions in a row with a skip: the second reads the first's output from the
    # arena, the residual adds the block's input; one scratch serves both steps
    c = 32
    x = rng.standard_normal((1, c, 28, 28)).astype(np.float32)
    init = {f"w{i}": (rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32) for i in range(3)}
    nodes = [n("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]), n("Add", ["c1", "x"], ["s1"]), n("Relu", ["s1"], ["r1"]),
             n("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), n("Add", ["c2", "r1"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], init)
    assert [i.op.winograd for i in _compile(model).main if i.op.name == "conv_epilogue"] == [4, 4, 4]
    _matches_ref(model, {"x": x})

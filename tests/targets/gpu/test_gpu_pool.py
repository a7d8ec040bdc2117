"""The gpu target's Triton pooling kernels (triton_pool.py) against ONNX Runtime: window geometry
(pads, strides, dilations, ceil mode), count_include_pad, global pooling, 1 to 3 spatial dims, fp16,
channels-last buffers after a convolution, and outputs written straight into a concat's slices. On the
GPU when there is one, else through Triton's interpreter (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import fusegraph
from fusegraph.ir.dtypes import DType
from fusegraph.targets.gpu.triton_pool import PoolSpec, pool_source
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(1)


def compiled(target, model, fp16=False):
    p = fusegraph.parse_onnx(model)
    p.compile(target, fusegraph.CompileOptions(fp16=fp16))
    return p


@pytest.mark.parametrize("op, attrs, shape", [
    ("MaxPool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), (2, 5, 9, 9)),
    ("MaxPool", dict(kernel_shape=[3, 2], pads=[0, 1, 2, 0], strides=[2, 1], dilations=[2, 1], ceil_mode=1), (1, 3, 10, 7)),
    ("MaxPool", dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1]), (1, 4, 6, 6)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], count_include_pad=1), (2, 3, 8, 9)),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 0, 1, 2], strides=[2, 2], ceil_mode=1), (1, 3, 8, 9)),
    ("MaxPool", dict(kernel_shape=[3], pads=[1, 1], strides=[2]), (2, 3, 11)),
    ("AveragePool", dict(kernel_shape=[2, 2, 2], strides=[2, 1, 2]), (1, 2, 4, 5, 6)),
    ("GlobalAveragePool", {}, (2, 6, 5, 7)),
    ("GlobalMaxPool", {}, (2, 6, 3, 4, 2)),
])
def test_pooling_matches_onnxruntime(gpu_target, op, attrs, shape):
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], x, ["y"])
    p = compiled(gpu_target, model)
    assert any(name.startswith("pool_") for name in p.executable.sources)  # the Triton kernel ran
    assert_close(p.run(x), run_ort(model, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_maxpool(gpu_target, dtype):
    x = {"x": rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (1, 3, 6, 6), endpoint=True).astype(dtype)}
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], x, ["y"])
    got = compiled(gpu_target, model).run(x)[0]
    np.testing.assert_array_equal(got, run_ort(model, x)[0])


def test_maxpool_propagates_nan(gpu_target):
    x = {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32)}
    x["x"][0, 1, 2, 2] = np.nan
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], x, ["y"])
    got = compiled(gpu_target, model).run(x)[0]
    assert np.isnan(got[0, 1, 1, 1]) and np.isfinite(np.delete(got.reshape(-1), 7)).all()


def test_sppf_pools_write_into_the_concat_in_fp16(gpu_target):
    """YOLO's SPPF: conv -> three chained 5x5 max pools -> concat of all four (channels-last, fp16)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("MaxPool", ["s"], ["m1"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
             helper.make_node("MaxPool", ["m1"], ["m2"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
             helper.make_node("MaxPool", ["m2"], ["m3"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
             helper.make_node("Concat", ["s", "m1", "m2", "m3"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"])]
    inits = {"w": rng.standard_normal((8, 4, 1, 1)).astype(np.float32),
             "w2": rng.standard_normal((3, 32, 1, 1)).astype(np.float32) * 0.2}
    x = {"x": rng.standard_normal((1, 4, 7, 7)).astype(np.float32)}
    model = make_model(nodes, x, ["y"], initializers=inits)
    p = compiled(gpu_target, model, fp16=True)
    plan = p.executable.plan
    pools = [s.ins.uid for s in plan.steps if s.kind == "pooling"]
    assert len(pools) == 3 and all(plan.storage[u] == "slice" for u in pools)
    assert_close(p.run(x), run_ort(model, x), rtol=2e-2, atol=2e-2)


def test_source_follows_the_output_layout():
    spec = PoolSpec("max", DType.float16, (3, 3), (1, 1), (1, 1), (1, 1), order=(0, 2, 3, 1))
    src = pool_source(spec, "k")
    first_split = next(line for line in src.splitlines() if "rem %" in line)
    assert first_split.strip() == "i1 = rem % o1"  # channels split off first: the fastest dim
    big = PoolSpec("average", DType.float32, (9, 9), (1, 1), (0, 0), (1, 1), order=(0, 1, 2, 3))
    assert "in range(9)" in pool_source(big, "k") and "static_range" not in pool_source(big, "k")


# -- large windows: the tiled, split form (a pool that is really a reduction) --------------------------
@pytest.mark.parametrize("op, attrs, shape", [
    ("GlobalAveragePool", {}, (2, 3, 18, 19)),                 # 342 taps: one split per output block
    ("GlobalAveragePool", {}, (1, 3, 40, 41)),                 # 1640 taps: split, then combined
    ("GlobalMaxPool", {}, (1, 2, 33, 35)),
    ("AveragePool", dict(kernel_shape=[17, 19], pads=[3, 2, 4, 5], strides=[5, 4]), (1, 2, 30, 31)),
    ("AveragePool", dict(kernel_shape=[16, 20], pads=[2, 2, 2, 2], strides=[3, 3], count_include_pad=1), (1, 2, 24, 27)),
    ("MaxPool", dict(kernel_shape=[8, 8, 5], strides=[2, 2, 1], dilations=[1, 2, 1]), (1, 2, 12, 20, 6)),
    ("AveragePool", dict(kernel_shape=[17, 17], pads=[2, 2, 2, 2], strides=[9, 9], ceil_mode=1), (1, 2, 30, 31)),
])
def test_large_windows_match_onnxruntime(gpu_target, op, attrs, shape):
    x = {"x": rng.standard_normal(shape).astype(np.float32)}
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)], x, ["y"])
    p = compiled(gpu_target, model)
    assert any("_tile" in src for src in p.executable.sources.values())  # the split form ran
    assert_close(p.run(x), run_ort(model, x), rtol=1e-5, atol=1e-6)


def test_split_global_pool_of_a_channels_last_conv_in_fp16(gpu_target):
    """EfficientNet's squeeze-excite pool: a global average of a channels-last conv output, fp16."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("GlobalMaxPool", ["c"], ["m"])]
    inits = {"w": (rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32)}
    x = {"x": rng.standard_normal((2, 3, 36, 36)).astype(np.float32)}
    model = make_model(nodes, x, ["g", "m"], initializers=inits)
    p = compiled(gpu_target, model, fp16=True)
    assert_close(p.run(x), run_ort(model, x), rtol=1e-2, atol=1e-2)


def test_integer_max_in_the_split_form(gpu_target):
    x = {"x": rng.integers(-128, 127, (1, 2, 40, 40), endpoint=True).astype(np.int8)}
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[40, 40])], x, ["y"])
    np.testing.assert_array_equal(compiled(gpu_target, model).run(x)[0], run_ort(model, x)[0])


def test_split_form_fills_the_gpu_and_tiles_whole_splits():
    from fusegraph.targets.gpu.triton_pool import MIN_SPLIT_TAPS, TARGET_PROGRAMS, wide_grid

    block, rblock, splits, chunk = wide_grid(32, 112 * 112)  # EfficientNet-B0's first pool at batch 1
    assert block == 32 and splits > 16 and chunk % rblock == 0 and chunk >= MIN_SPLIT_TAPS
    assert (splits - 1) * chunk < 112 * 112 <= splits * chunk  # every tap in exactly one split
    block, rblock, splits, chunk = wide_grid(32 * 1152, 20 * 20)  # many outputs: no split needed
    assert splits == 1 and -(-32 * 1152 // block) >= TARGET_PROGRAMS // 8


def test_split_form_propagates_nan(gpu_target):
    x = {"x": rng.standard_normal((1, 2, 40, 40)).astype(np.float32)}
    x["x"][0, 1, 33, 7] = np.nan  # in the second split of channel 1
    model = make_model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], x, ["y"])
    got = compiled(gpu_target, model).run(x)[0].reshape(-1)
    assert np.isfinite(got[0]) and np.isnan(got[1])

"""Sizes are checked before native code and before allocation (ir/limits.py, targets/resources.py):
a tensor or a compile past the limits is a ResourceError naming it, fast, on every target."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import helper

import fusegraph
from fusegraph.driver import cli
from fusegraph.errors import ResourceError
from fusegraph.ir.limits import physical_memory
from fusegraph.targets import CompileOptions
from tests.util import make_model, target_or_skip

I64 = np.int64
TARGETS = ["ref", "cpu"]


def mlp(hidden: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return make_model(nodes, {"x": np.zeros((2, 8), np.float32)}, ["y"],
                      {"w": rng.standard_normal((8, hidden)).astype(np.float32)})


def test_range_folded_at_parse_is_refused_before_it_allocates():
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["y"])]
    model = make_model(nodes, {"x": np.zeros(1, np.float32)}, ["y"],
                       {"s": np.array(0, I64), "l": np.array(2**40, I64), "d": np.array(1, I64)})
    with pytest.raises(ResourceError, match=r"range: its output int64\[1099511627776\] would take 8.0 TiB"):
        fusegraph.parse_onnx(model)  # before: MemoryError from np.arange


def test_a_sparse_constant_is_sized_before_it_is_made_dense():
    vals = onnx.numpy_helper.from_array(np.ones(1, np.float32), "w")
    sparse = helper.make_sparse_tensor(vals, onnx.numpy_helper.from_array(np.zeros(1, I64), "i"), [2**40])
    model = make_model([helper.make_node("Constant", [], ["y"], sparse_value=sparse)], {"x": np.zeros(1, np.float32)}, ["y"])
    with pytest.raises(ResourceError, match="sparse tensor 'w'"):  # before: MemoryError from np.zeros
        fusegraph.parse_onnx(model)


@pytest.mark.parametrize("target", TARGETS)
def test_a_resize_by_1e5_is_refused_at_compile(target):
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")]
    model = make_model(nodes, {"x": np.zeros((1, 1, 4, 4), np.float32)}, ["y"],
                       {"sc": np.array([1, 1, 1e5, 1e5], np.float32)})
    p = fusegraph.parse_onnx(model)
    with pytest.raises(ResourceError, match=r"more than max_memory .*largest tensor is resize : float32\[1,1,400000,400000\]"):
        p.compile(target_or_skip(target))


RUN_TIME = {  # ops that make a tensor from values, fed values that ask for terabytes
    "Tile": ([helper.make_node("Tile", ["x", "r"], ["y"])], {"x": np.zeros(4, np.float32), "r": np.array([2**38], I64)}),
    "Expand": ([helper.make_node("Expand", ["x", "s"], ["y"])], {"x": np.zeros(1, np.float32), "s": np.array([2**20, 2**20], I64)}),
    "ConstantOfShape": ([helper.make_node("ConstantOfShape", ["s"], ["y"])], {"s": np.array([2**20, 2**20], I64)}),
    "Pad": ([helper.make_node("Pad", ["x", "p"], ["y"])], {"x": np.zeros((2, 2), np.float32), "p": np.array([0, 0, 2**20, 2**20], I64)}),
    "OneHot": ([helper.make_node("OneHot", ["i", "d", "v"], ["y"])], {"i": np.zeros(2**12, I64), "d": np.array(2**30, I64)}),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", sorted(RUN_TIME))
def test_ops_that_make_tensors_from_values_check_their_size_at_run(op, target):
    nodes, feeds = RUN_TIME[op]
    inits = {"v": np.array([0, 1], np.float32)} if op == "OneHot" else None
    p = fusegraph.parse_onnx(make_model(nodes, feeds, ["y"], inits)).compile(target_or_skip(target))
    start = time.perf_counter()
    with pytest.raises(ResourceError, match="would take .* more than the machine's memory"):
        p.run(feeds)  # before: MemoryError (OneHot: after 40-50 s of work)
    assert time.perf_counter() - start < 30


def test_a_compile_past_max_memory_names_its_largest_tensor():
    p = fusegraph.parse_onnx(mlp(), map_input_dims={"x": [1024, 8]})
    # the product, alive until the relu, and the relu's output: 64 KiB each, and the weight
    with pytest.raises(ResourceError, match=r"needs 128.5 KiB \(weights 512 B, intermediates 64.0 KiB, outputs "
                                            r"64.0 KiB\), more than max_memory 10.0 KiB; its largest tensor is dot"):
        p.compile(target_or_skip("ref"), CompileOptions(max_memory=10 << 10))
    p.compile(target_or_skip("ref"), CompileOptions(max_memory=1 << 20))
    use = p.executable.peak_memory  # every compile knows what it holds
    assert (use.weights, use.intermediates, use.outputs) == (512, 64 << 10, 64 << 10)


@pytest.mark.parametrize("target", TARGETS)
def test_a_batch_of_2_40_is_refused_before_the_kernels_are_built(target):
    # before (cpu): SIGFPE inside oneDNN's matmul creation for every batch from 2**32 to about 2**60
    p = fusegraph.parse_onnx(mlp(), map_input_dims={"x": [2**40, 8]})
    with pytest.raises(ResourceError, match="more than max_memory"):
        p.compile(target_or_skip(target))
    assert physical_memory() < 2**40 * 16 * 4


def test_onednn_is_never_given_a_dim_its_kernels_truncate():
    p = fusegraph.parse_onnx(mlp(), map_input_dims={"x": [2**32, 8]})
    with pytest.raises(ResourceError, match="oneDNN: a tensor of dims .* past 2147483647"):
        p.compile(target_or_skip("cpu"), CompileOptions(max_memory=2**62))  # past the memory check on purpose


def test_a_tensor_past_64_bit_byte_offsets_is_refused_whatever_the_limit():
    p = fusegraph.parse_onnx(mlp(), map_input_dims={"x": [2**61, 8]})
    with pytest.raises(ResourceError, match="64-bit byte offsets"):
        p.compile(target_or_skip("ref"), CompileOptions(max_memory=2**63))


def test_the_cli_reports_a_resource_error_as_a_user_error(tmp_path, capsys):
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    assert cli.main(["run", str(tmp_path / "mlp.onnx"), "--input-dim", f"x={2**40},8", "--target", "ref"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fusegraph: error: ") and "more than max_memory" in err and "internal" not in err

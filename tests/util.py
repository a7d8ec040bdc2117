"""Shared test helpers: build one-node ONNX models and compare fusegraph's ref target with ONNX Runtime."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

import fusegraph
from fusegraph.errors import TargetError
from fusegraph.ir.dtypes import DType


def make_model(nodes: Sequence[onnx.NodeProto], inputs: dict[str, np.ndarray],
               outputs: Sequence[str], initializers: dict[str, np.ndarray] | None = None,
               opset: int = 17, extra_opsets: dict[str, int] | None = None) -> onnx.ModelProto:
    """A model over `nodes`; graph inputs typed from example arrays, outputs left untyped."""
    vis = [helper.make_tensor_value_info(n, DType.from_numpy(a.dtype).onnx, a.shape) for n, a in inputs.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    inits = [onnx.numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), "test", vis, outs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def target_or_skip(name: str):
    """The target, or a skip naming why it cannot run here (the cpu target without oneDNN, whose
    primitives it creates as it compiles: the machine's TargetError would come from the compile)."""
    try:
        target = fusegraph.get_target(name)
        if name == "cpu":
            from fusegraph.targets.cpu import onednn

            ok, why = onednn.available()
            if not ok:
                raise TargetError(why)
    except TargetError as e:
        pytest.skip(f"{name} target unavailable: {e}")
    return target


def run_fusegraph(model: onnx.ModelProto, inputs: dict[str, np.ndarray], target: Any = "ref",
                  **parse_kwargs: Any) -> list[np.ndarray]:
    """`target`: a target's name or a Target (the gpu target on Triton's interpreter, say)."""
    p = fusegraph.parse_onnx(model, **parse_kwargs)
    p.compile(fusegraph.get_target(target) if isinstance(target, str) else target)
    return [np.asarray(v) for v in p.run(inputs)]


@functools.cache
def every_target() -> tuple:
    """The targets an op's ONNX Runtime test runs on where each can: ref; cpu where oneDNN loads; the
    gpu target where torch and triton are installed (on CUDA, else on Triton's interpreter, as the
    gpu tests' `gpu_target` fixture does). CI's install has no triton: there it is ref and cpu."""
    import importlib.util

    targets: list[Any] = ["ref"]
    from fusegraph.targets.cpu import onednn

    if onednn.available()[0]:
        targets.append("cpu")
    if all(importlib.util.find_spec(m) is not None for m in ("torch", "triton")):
        import torch

        from fusegraph.targets.gpu import GpuTarget
        from fusegraph.targets.gpu.interpreter import interpreted_target

        targets.append(GpuTarget() if torch.cuda.is_available() else interpreted_target())
    return tuple(targets)


def run_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def assert_close(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                 rtol: float = 1e-3, atol: float = 1e-4) -> None:
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype, f"output {k}: dtype {a.dtype}, expected {e.dtype}"
        assert a.shape == e.shape, f"output {k}: shape {a.shape}, expected {e.shape}"
        if a.dtype.kind in "biuO":
            np.testing.assert_array_equal(a, e, err_msg=f"output {k}")
        else:
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"output {k}")


def check_on_every_target(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
                          expected: Sequence[np.ndarray] | None = None, rtol: float = 1e-3,
                          atol: float = 1e-4) -> None:
    """`model` on every target here (every_target) against ONNX Runtime's outputs (or `expected`)."""
    expected = run_ort(model, inputs) if expected is None else expected
    for target in every_target():
        name = target if isinstance(target, str) else target.name
        try:
            assert_close(run_fusegraph(model, inputs, target=target), expected, rtol, atol)
        except AssertionError as e:
            raise AssertionError(f"target {name}: {e}") from None


def check_vs_ort(model: onnx.ModelProto, inputs: dict[str, np.ndarray], rtol: float = 1e-3,
                 atol: float = 1e-4, **parse_kwargs: Any) -> list[np.ndarray]:
    """Run on fusegraph ref and ONNX Runtime; assert equal dtypes/shapes and close values."""
    got = run_fusegraph(model, inputs, **parse_kwargs)
    assert_close(got, run_ort(model, inputs), rtol, atol)
    return got


def node_check(op_type: str, inputs: dict[str, np.ndarray], attrs: dict[str, Any] | None = None,
               n_outputs: int = 1, initializers: dict[str, np.ndarray] | None = None, opset: int = 17,
               domain: str = "", input_names: Sequence[str] | None = None, everywhere: bool = False,
               **tol: float) -> list[np.ndarray] | None:
    """One node of `op_type` over graph inputs (and constant initializers), checked against ORT on
    ref (returning its outputs), or with `everywhere` on every target here (every_target)."""
    names = list(input_names) if input_names is not None else list(inputs) + list(initializers or {})
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **(attrs or {}))
    extra = {domain: 1} if domain else None
    model = make_model([node], inputs, outs, initializers, opset, extra)
    if everywhere:
        return check_on_every_target(model, inputs, **tol)
    return check_vs_ort(model, inputs, **tol)

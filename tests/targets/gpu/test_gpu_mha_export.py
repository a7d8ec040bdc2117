"""The gpu target on torch's own export of multi-head attention (issue 23: torchvision's ViT-B/16):
the packed in-projection split by Gathers of literal indices (gather_views.py makes them slices,
views), and scaled_dot_product_attention exported as q * sqrt(s), K^T * sqrt(s), MatMul, Softmax,
MatMul (patterns.py folds both factors into SDPA's scale). IR-level forms first (no torch needed),
then the exported model end to end against ONNX Runtime (interpreted without a GPU)."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import helper

import fusegraph
from fusegraph.passes import eliminate_dead_code, generic_pipeline, run_pipeline
from fusegraph.targets.gpu.gather_views import evenly_stepped, gather_views
from fusegraph.targets.gpu.patterns import match_groups
from fusegraph.targets.gpu.view_chain import compose
from tests.util import assert_close, make_model, run_ort

rng = np.random.default_rng(3)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# -- gathers at literal indices -> slices ----------------------------------------------------------------
@pytest.mark.parametrize("idx, n, expected", [
    (np.array(1), 3, (1, 2, 1)), (np.array(-1), 3, (2, 3, 1)), (np.array([0, 2, 4]), 5, (0, 5, 2)),
    (np.array([[1, 2], [3, 4]]), 6, (1, 5, 1)), (np.array([2, 1]), 3, None), (np.array([0, 0]), 3, None),
    (np.array([0, 1, 3]), 4, None), (np.array(3), 3, None), (np.zeros(0, np.int64), 3, None),
])
def test_evenly_stepped_indices(idx, n, expected):
    assert evenly_stepped(idx, n) == expected


def _gather_model(idx, axis, shape=(3, 4, 5)):
    nodes = [helper.make_node("Gather", ["x", "i"], ["g"], axis=axis), helper.make_node("Relu", ["g"], ["y"])]
    return make_model(nodes, {"x": randn(*shape)}, ["y"], initializers={"i": np.asarray(idx, np.int64)})


@pytest.mark.parametrize("idx, axis, ops", [
    (1, 0, ["slice", "squeeze"]), (-2, 1, ["slice", "squeeze"]), ([0, 2], 2, ["slice"]),
    ([[1], [2]], 1, ["slice", "reshape"]), ([2, 0], 0, None),
])
def test_gather_views_rewrite(idx, axis, ops):
    p = fusegraph.parse_onnx(_gather_model(idx, axis))
    changed = gather_views(p.main)
    eliminate_dead_code(p.main)
    names = [i.op.name for i in p.main.instructions if i.op.name in ("slice", "squeeze", "reshape", "gather")]
    assert changed == (ops is not None) and names == (ops or ["gather"])


def test_integer_gathers_stay_gathers():  # shape arithmetic: fold_symbolic_shapes reads gathers
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)]
    model = make_model(nodes, {"x": np.arange(4, dtype=np.int64)}, ["y"], initializers={"i": np.array(1, np.int64)})
    assert not gather_views(fusegraph.parse_onnx(model).main)


@pytest.mark.parametrize("idx, axis", [(1, 0), (-1, 1), ([1, 3], 1), ([[0], [2]], 2), ([3, 1, 0], 2)])
def test_gathers_match_onnxruntime(gpu_target, idx, axis):
    model = _gather_model(idx, axis)
    x = {"x": randn(3, 4, 5)}
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target)
    assert_close(p.run(x), run_ort(model, x), rtol=1e-6, atol=1e-6)


# -- attention with pre-scaled q and K^T -------------------------------------------------------------------
def _sdpa_export_model(q_scale_users: int = 1):
    """torch.onnx's form of scaled_dot_product_attention(q, k, v): q * c and transpose(k) * c, c = s^0.5,
    q and k projected as in a model (an input's fp16 convert would fuse with the factor: a fused
    pointwise body, which the pattern leaves alone)."""
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("Mul", ["q", "c"], ["qs"]), helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("Mul", ["kt", "c"], ["ks"]), helper.make_node("MatMul", ["qs", "ks"], ["sc"]),
             helper.make_node("Softmax", ["sc"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    outputs = ["y"] + (["qs"] if q_scale_users > 1 else [])
    x = {"x": randn(2, 3, 7, 8), "v": randn(2, 3, 7, 8)}
    inits = {"c": np.array([8 ** -0.25], np.float32), "wq": randn(8, 8) * 0.5, "wk": randn(8, 8) * 0.5}
    return make_model(nodes, x, outputs, initializers=inits), x


@pytest.mark.parametrize("fp16", [False, True])
def test_prescaled_q_and_kt_fold_into_the_scale(fp16):
    p = fusegraph.parse_onnx(_sdpa_export_model()[0])
    if fp16:
        fusegraph.quantize_fp16(p)
    run_pipeline(p, generic_pipeline())
    (g,) = [g for g in match_groups(p.main).values() if g.kind == "attention"]
    c = float((np.float16 if fp16 else np.float32)(8 ** -0.25))  # the factor as the program holds it
    assert g.data["scale"] == pytest.approx(c * c, rel=1e-6)
    q, k, v = g.inputs  # the projections themselves: q unscaled, K^T a view of k (unit last stride)
    assert q.op.name == k.op.name == "dot" and g.data["chains"][1][-1][0].name == "transpose"
    assert all(compose(x.shape.lens, x.shape.strides, c) is not None for x, c in zip(g.inputs, g.data["chains"]))
    assert sum(m.op.name == "mul" for m in g.members) == 2


def test_a_prescaled_q_read_elsewhere_stays():
    p = fusegraph.parse_onnx(_sdpa_export_model(q_scale_users=2)[0])
    run_pipeline(p, generic_pipeline())
    (g,) = [g for g in match_groups(p.main).values() if g.kind == "attention"]
    assert g.inputs[0].op.name == "mul" and g.data["scale"] == pytest.approx(8 ** -0.25, rel=1e-6)


@pytest.mark.parametrize("fp16", [False, True])
def test_prescaled_attention_matches_onnxruntime(gpu_target, fp16):
    model, x = _sdpa_export_model()
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    kinds = [s.kind for s in p.executable.plan.steps]
    assert "attention" in kinds and "mul" not in kinds
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)


# -- torch's own export ------------------------------------------------------------------------------------
def _exported_vit_block():
    torch = pytest.importorskip("torch")
    from torch import nn

    class Block(nn.Module):  # torchvision's ViT EncoderBlock with a class token, small
        def __init__(self, d=32, h=4):
            super().__init__()
            self.cls = nn.Parameter(torch.randn(1, 1, d))
            self.ln = nn.LayerNorm(d)
            self.att = nn.MultiheadAttention(d, h, batch_first=True)
            self.head = nn.Linear(d, 5)

        def forward(self, x):
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1)
            y = self.ln(x)
            y, _ = self.att(y, y, y, need_weights=False)
            return self.head((x + y)[:, 0])

    torch.manual_seed(0)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the export torchvision's ViT needs
    try:
        f = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(Block().eval(), (torch.randn(2, 9, 32),), f, input_names=["x"],
                              output_names=["y"], opset_version=17, dynamo=False)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    return onnx.load_from_string(f.getvalue())


@pytest.mark.parametrize("fp16", [False, True])
def test_torch_mha_export_runs_as_slices_and_sdpa(gpu_target, fp16):
    model = _exported_vit_block()
    x = {"x": randn(2, 9, 32)}
    p = fusegraph.parse_onnx(model)
    p.compile(gpu_target, fusegraph.CompileOptions(fp16=fp16))
    steps = p.executable.plan.steps
    kinds = [s.kind for s in steps]
    assert kinds.count("attention") == 1 and "gather" not in kinds and "mul" not in kinds
    (att,) = [s for s in steps if s.kind == "attention"]
    assert [x.op.name for x in att.inputs] == ["dot"] * 3  # q, k, v: strided views of the in-projection
    assert all(compose(x.shape.lens, x.shape.strides, c) is not None for x, c in zip(att.inputs, att.data["chains"]))
    tol = 2e-2 if fp16 else 1e-4
    assert_close(p.run(x), run_ort(model, x), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype, stride_m, kept", [
    ("float16", 64, True),    # an aligned half view: flash reads it as it is
    ("float16", 36, False),   # rows 72 bytes apart: off 16 bytes, copied
    ("float32", 64, False),   # float32: the memory-efficient kernel refuses some views on CUDA
])
def test_sdpa_operands_are_views_only_where_the_kernels_take_them(dtype, stride_m, kept):
    import torch

    from fusegraph.targets.gpu.lower_attention import sdpa_operand

    base = torch.zeros(2, 4, 8, stride_m, dtype=getattr(torch, dtype))
    x = base[..., :16]  # [2, 4, 8, 16], unit last stride, rows stride_m apart
    got = sdpa_operand(x)
    assert (got.data_ptr() == x.data_ptr() and got.stride() == x.stride()) == kept
    assert torch.equal(got, x)
    assert sdpa_operand(x.transpose(-1, -2)).stride(-1) == 1  # never a non-unit last stride


@pytest.mark.parametrize("shape, strides, dense", [
    ((1, 2, 1, 8), (1, 8, 1, 1), (16, 8, 8, 1)),      # a one-token query of a GPT-2 kv-step (corpus, H200)
    ((1, 1, 64, 16), (1, 1, 16, 1), (1024, 1024, 16, 1)),  # SegFormer's one-head attention (corpus, H200)
    ((2, 3, 4), (12, 4, 1), (12, 4, 1)),               # no size-1 dim: unchanged
])
def test_sdpa_operands_have_dense_strides_on_size_one_dims(shape, strides, dense):
    """torch calls a tensor contiguous whatever its size-1 dims' strides are; the memory-efficient
    kernel checks them ("query is not correctly aligned (strideM)", "cutlassF: no kernel found")."""
    import torch

    from fusegraph.targets.gpu.lower_attention import sdpa_operand

    x = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float32).as_strided(shape, strides)
    got = sdpa_operand(x)
    assert got.stride() == dense and got.data_ptr() == x.data_ptr()
    assert torch.equal(got, x)

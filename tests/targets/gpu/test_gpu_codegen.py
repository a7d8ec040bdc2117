"""The gpu target's Triton source generation and index spaces, checked as text and data (no GPU, no
torch, no triton needed): what CI can say about the kernels without running them."""

from __future__ import annotations

import pytest

import fusegraph
from fusegraph.ir.dtypes import DType
from fusegraph.ops.scalar import parse_expr
from fusegraph.passes import generic_pipeline, run_pipeline
from fusegraph.targets.gpu.layout import channels_last_order, dense_strides, index_space, merge_dims
from fusegraph.targets.gpu.triton_expr import TritonExprRenderer, result_type
from fusegraph.targets.gpu.triton_pointwise import PointwiseSpec, pointwise_source
from fusegraph.targets.gpu.triton_reduce import Unsupported, analyze_body, reduce_source

F16, F32, I64, BOOL = DType.float16, DType.float32, DType.int64, DType.bool


def render(text: str, types: list[DType]) -> tuple[list[str], str, DType]:
    lines: list[str] = []
    name, dt = TritonExprRenderer(lines, "").emit(parse_expr(text), [f"x{i}" for i in range(len(types))], types)
    return lines, name, dt


def test_result_types_follow_numpy_with_weak_constants():
    assert result_type(parse_expr("add(x0, 1.0)"), [F16]) == F16
    assert result_type(parse_expr("lt(x0, x1)"), [F32, F32]) == BOOL
    assert result_type(parse_expr("convert_float32(x0)"), [I64]) == F32
    assert result_type(parse_expr("where(x0, x1, 0)"), [BOOL, I64]) == I64
    assert result_type(parse_expr("add(x0, x1)"), [F16, F32]) == F32


def test_render_float_and_integer_division_and_nan_propagating_max():
    lines, _, _ = render("div(x0, x1)", [F32, F32])
    assert lines == ["t0 = libdevice.div_rn((x0), (x1))"]  # correctly rounded, as numpy divides
    lines, _, _ = render("div(x0, x1)", [I64, I64])
    assert lines == ["t0 = ((x0) // (x1))"]  # Triton's integer // truncates toward zero, like the reference
    lines, _, _ = render("max(x0, 0)", [F32])
    assert lines == ["t0 = tl.maximum(x0, 0.0, propagate_nan=tl.PropagateNan.ALL)"]


def test_half_conversion_rounds_then_computes_in_float32():
    lines, name, dt = render("convert_float16(x0)", [F32])
    assert lines == ["t0 = (x0).to(tl.float16).to(tl.float32)"] and dt == F16


def test_small_literal_powers_are_products_and_others_stay_powf():
    assert render("pow(x0, 3.0)", [F32])[0] == ["t0 = (x0) * (x0) * (x0)"]
    assert render("pow(x0, 2)", [F16])[0] == ["t0 = (x0) * (x0)"]
    assert render("pow(x0, 4.0)", [F32])[0] == ["t0 = libdevice.pow((x0), (4.0))"]
    assert "libdevice.pow" in render("pow(x0, x1)", [F32, F32])[0][0]  # a run-time exponent
    assert "float64" in render("pow(x0, 3)", [I64])[0][0]  # integers keep their exact path


def test_a_literal_exponent_input_is_written_into_the_body():
    """GPT-2's tanh GELU reaches the fused body as pow(x0, x3) with x3 the broadcast of a
    one-element literal input."""
    import numpy as np

    from fusegraph.ir.module import Module
    from fusegraph.ir.op import make_op
    from fusegraph.ir.shape import Shape
    from fusegraph.targets.gpu.triton_expr import literal_exponents

    m = Module("m")
    x = m.add_parameter("x", Shape.of(F32, (4,)))
    three, half = (m.add_literal(np.array([v], np.float32)) for v in (3.0, 0.5))
    n = m.add_literal(np.array(3, np.int64))
    body = parse_expr("add(pow(x0, x1), pow(x0, x2))")
    assert str(literal_exponents(body, [x, three, half])) == "add(pow(x0, 3.0), pow(x0, x2))"
    wide = m.add(make_op("broadcast", out_lens=(4,)), three)  # as the frontend broadcasts it
    assert str(literal_exponents(parse_expr("pow(x0, x1)"), [x, wide])) == "pow(x0, 3.0)"
    assert str(literal_exponents(parse_expr("pow(x0, x1)"), [x, x])) == "pow(x0, x1)"  # data: kept
    ints = m.add_parameter("i", Shape.of(I64, (4,)))
    assert str(literal_exponents(parse_expr("pow(x0, x1)"), [ints, n])) == "pow(x0, x1)"  # integer pow kept


def test_python_mod_from_the_c_remainder():
    lines, _, _ = render("mod(x0, x1)", [I64, I64])
    assert "tl.where" in lines[0] and "% (x1)" in lines[0]


def test_pointwise_source_flat_operands_need_no_index_arithmetic():
    spec = PointwiseSpec(parse_expr("max(add(x0, x1), 0)"), (F16, F16), F16, 1, ("flat", "flat", "flat"))
    src = pointwise_source(spec, "k")
    assert "rem" not in src and "tl.load(in1_ptr + offs, mask=mask).to(tl.float32)" in src
    assert "tl.store(out_ptr + offs, (t1).to(tl.float16), mask=mask)" in src


def test_pointwise_source_strided_and_scalar_operands():
    spec = PointwiseSpec(parse_expr("mul(add(x0, x1), x2)"), (F32, F32, F32), F32, 2,
                         ("flat", "flat", "strided", "scalar"))
    src = pointwise_source(spec, "k")
    assert "def k(out_ptr, in0_ptr, in1_ptr, in2_ptr, numel, s1, st2_0, st2_1, BLOCK: tl.constexpr)" in src
    assert "i1 = rem % s1" in src and "tl.load(in1_ptr + i0 * st2_0 + i1 * st2_1, mask=mask)" in src
    assert "x2 = tl.load(in2_ptr)" in src


def test_constant_body_fills_the_block():
    spec = PointwiseSpec(parse_expr("1.5"), (F32,), F32, 1, ("flat", "flat"))
    assert "tl.full([BLOCK], 1.5, tl.float32)" in pointwise_source(spec, "k")


@pytest.mark.parametrize("sizes, strides, expect", [
    ((2, 3, 4, 5), [(60, 20, 5, 1), (60, 20, 5, 1)], ((120,), (True, True))),
    # channels-last output, per-channel bias: two dims, C innermost
    ((2, 3, 4, 5), [(60, 1, 15, 3), (0, 1, 0, 0)], ((40, 3), (True, False))),
    # standard output, per-channel bias: H*W merged
    ((2, 3, 4, 5), [(60, 20, 5, 1), (0, 1, 0, 0)], ((2, 3, 20), (True, False))),
    ((1,), [(1,), (0,)], ((1,), (True, True))),
])
def test_index_space_orders_by_the_output_and_merges_dims(sizes, strides, expect):
    space = index_space(sizes, strides)
    assert (space.sizes, space.flat) == expect


def test_merge_dims_and_layouts():
    assert merge_dims((4, 1, 8), [(8, 8, 1), (0, 0, 1)]) == ((4, 8), ((8, 1), (0, 1)))
    assert merge_dims((1, 1), [(1, 1)]) == ((1,), ((0,),))
    assert channels_last_order(4) == (0, 2, 3, 1)
    assert dense_strides((2, 3, 4, 5), (0, 2, 3, 1)) == (60, 1, 15, 3)


def _bert_reductions(fp16: bool = False):
    from fusegraph.models import get_model

    p = fusegraph.parse_onnx(get_model("bert_small"), map_input_dims={
        "input_ids": [1, 16], "attention_mask": [1, 16], "token_type_ids": [1, 16]})
    if fp16:
        fusegraph.quantize_fp16(p)
    run_pipeline(p, generic_pipeline())
    return [i for i in p.main.instructions if i.op.name == "fused_reduce"]


def test_layer_norm_body_is_one_kernel_with_two_stages():
    ln = next(i for i in _bert_reductions() if any(b.op.name == "moments" for b in i.module_args[0].instructions))
    rb = analyze_body(ln.module_args[0], ln.op.axes)
    assert not rb.out_reduced and rb.acc_type == F32
    persistent = reduce_source(rb, 1, 1, True, "ln")
    assert "for r0" not in persistent and persistent.count("tl.sum(") == 2  # mean, then centered variance
    looped = reduce_source(rb, 1, 1, False, "ln")
    assert looped.count("for r0 in range(0, R, RBLOCK):") == 3  # two reductions and the store


def test_every_layers_layer_norm_is_the_same_kernel():
    # a key made of instruction uids gave each layer its own kernel name, so Triton's on-disk cache
    # missed on every compile and load (BERT-base: 25 kernels rebuilt, 6 s per load on an H200)
    lns = [i for i in _bert_reductions() if any(b.op.name == "moments" for b in i.module_args[0].instructions)]
    keys = {analyze_body(ln.module_args[0], ln.op.axes).key() for ln in lns[1:]}  # [0]: the embeddings'
    assert len(lns) >= 3 and len(keys) == 1


def test_softmax_body_in_fp16_accumulates_in_float32():
    sm = next(i for i in _bert_reductions(fp16=True)
              if any(b.op.name == "softmax" for b in i.module_args[0].instructions))
    rb = analyze_body(sm.module_args[0], sm.op.axes)
    src = reduce_source(rb, 2, 1, True, "sm")
    assert rb.out_type == F16 and "tl.max(" in src and "tl.exp(" in src and ".to(tl.float16)" in src


def test_integer_reductions_are_left_to_torch():
    from fusegraph.ir.module import Module
    from fusegraph.ir.shape import Shape
    from fusegraph.ops.reduce import ReduceSum

    body = Module("b")
    x = body.add_parameter("x0", Shape.of(I64, (2, 3)))
    body.add_return(body.add(ReduceSum(axes=(1,)), x))
    with pytest.raises(Unsupported):
        analyze_body(body, (1,))

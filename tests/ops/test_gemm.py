"""Matrix products, Einsum, Det and Attention: converters against ONNX Runtime, and the IR they make."""

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import fusegraph
from fusegraph.errors import ShapeError
from fusegraph.ir.dtypes import DType
from fusegraph.ir.op import make_op
from fusegraph.ir.shape import Shape
from tests.util import assert_close, make_model, node_check, run_fusegraph

rng = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def op_names(model):
    return [i.op.name for i in fusegraph.parse_onnx(model).main.instructions]


# -- MatMul / Gemm ----------------------------------------------------------------------------------
@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                 ((4,), (4, 5)), ((2, 3, 4), (4,)), ((4,), (4,)), ((4,), (2, 4, 3)),
                                 ((2, 3, 4), (4, 6))])
def test_matmul(a, b):
    node_check("MatMul", {"a": randn(*a), "b": randn(*b)})


def test_matmul_integer_and_half():
    ai, bi = rng.integers(-9, 9, (3, 4)).astype(np.int32), rng.integers(-9, 9, (4, 2)).astype(np.int32)
    node_check("MatMul", {"a": ai, "b": bi})
    node_check("MatMul", {"a": randn(3, 8, dtype=np.float16), "b": randn(8, 2, dtype=np.float16)},
               rtol=2e-3, atol=2e-3)


def test_matmul_with_shared_weights_is_one_2d_dot():
    model = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": randn(2, 3, 4)}, ["y"],
                       {"w": randn(4, 5)})
    dots = [i for i in fusegraph.parse_onnx(model).main.instructions if i.op.name == "dot"]
    assert [d.shape.lens for d in dots] == [(6, 5)]


def test_matmul_and_gemm_with_dynamic_batch():
    a = randn(2, 5, 8)
    node_check("MatMul", {"a": a}, initializers={"w": randn(8, 3)}, map_dyn_input_dims={"a": [(1, 4), (1, 16), 8]})
    node_check("MatMul", {"a": a, "b": randn(2, 8, 3)},
               map_dyn_input_dims={"a": [(1, 4), (1, 16), 8], "b": [(1, 4), 8, 3]})
    node_check("Gemm", {"a": randn(3, 8)}, {"transB": 1}, initializers={"b": randn(4, 8), "c": randn(4)},
               map_dyn_input_dims={"a": [(1, 8), 8]})


@pytest.mark.parametrize("attrs,c", [({}, (1, 4)), ({"transA": 1}, (3, 4)), ({"transB": 1, "alpha": 0.5}, (4,)),
                                     ({"alpha": 2.0, "beta": 0.25, "transA": 1, "transB": 1}, ()),
                                     ({"beta": 0.0}, (3, 4))])
def test_gemm(attrs, c):
    a = randn(5, 3) if attrs.get("transA") else randn(3, 5)
    b = randn(4, 5) if attrs.get("transB") else randn(5, 4)
    node_check("Gemm", {"a": a, "b": b, "c": randn(*c)}, attrs)


def test_gemm_without_c_is_transpose_dot_scale():
    node_check("Gemm", {"a": randn(3, 5), "b": randn(4, 5)}, {"transB": 1, "alpha": 0.5}, opset=13)
    model = make_model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1)],
                       {"a": randn(3, 5), "b": randn(4, 5), "c": randn(4)}, ["y"])
    assert op_names(model)[-5:-1] == ["transpose", "dot", "broadcast", "add"]


def test_dot_shape_rule():
    f32 = DType.float32
    assert make_op("dot").compute_shape([Shape.of(f32, [2, 3, 4]), Shape.of(f32, [2, 4, 5])]).lens == (2, 3, 5)
    with pytest.raises(ShapeError):
        make_op("dot").compute_shape([Shape.of(f32, [2, 3, 4]), Shape.of(f32, [3, 4, 5])])
    with pytest.raises(ShapeError):
        make_op("quant_dot").compute_shape([Shape.of(f32, [3, 4]), Shape.of(f32, [4, 5])])


# -- Einsum / Det -----------------------------------------------------------------------------------
@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]), ("i,i", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]), ("ii->i", [(3, 3)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]), ("bqhd,bkhd->bhqk", [(2, 4, 3, 8), (2, 5, 3, 8)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("ij,ij->ij", [(3, 4), (3, 4)]), ("abc", [(2, 3, 4)]),
])
def test_einsum(eq, shapes):
    node_check("Einsum", {f"x{i}": randn(*s) for i, s in enumerate(shapes)}, {"equation": eq}, opset=12)


def test_einsum_lowers_contractions_to_dot():
    feeds = {"a": randn(2, 3, 4), "b": randn(2, 4, 5)}
    model = make_model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")], feeds, ["y"],
                       opset=12)
    assert "dot" in op_names(model) and "einsum" not in op_names(model)
    diag = make_model([helper.make_node("Einsum", ["a"], ["y"], equation="ii->i")], {"a": randn(3, 3)}, ["y"],
                      opset=12)
    assert "einsum" in op_names(diag)


def test_det():
    node_check("Det", {"x": randn(3, 3)}, opset=11)
    node_check("Det", {"x": randn(2, 4, 4)}, opset=11)


# -- Attention --------------------------------------------------------------------------------------
def attention_check(inputs, attrs, n_outputs=1):
    names = list(inputs)
    node_check("Attention", inputs, attrs, n_outputs=n_outputs, opset=23, input_names=names)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"scale": 0.3, "softcap": 2.0},
                                   {"qk_matmul_output_mode": 3}])
def test_attention_4d(attrs):
    inputs = {"q": randn(2, 4, 5, 8), "k": randn(2, 2, 6, 8), "v": randn(2, 2, 6, 3)}  # GQA, v head 3
    attention_check(inputs, attrs, n_outputs=4 if attrs.get("qk_matmul_output_mode") else 1)


def test_attention_3d_with_mask_and_cache():
    inputs = {"q": randn(2, 3, 16), "k": randn(2, 3, 8), "v": randn(2, 3, 8),
              "mask": rng.random((3, 7)) > 0.3, "past_k": randn(2, 2, 4, 4), "past_v": randn(2, 2, 4, 4)}
    attention_check(inputs, {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}, n_outputs=3)


def test_attention_float_mask():
    inputs = {"q": randn(1, 2, 3, 4), "k": randn(1, 2, 5, 4), "v": randn(1, 2, 5, 4), "mask": randn(3, 5)}
    attention_check(inputs, {"qk_matmul_output_mode": 2}, n_outputs=4)


def reference_check(op_type, inputs, attrs, opset, domain="", extra_opsets=None, names=None, outputs=("y",)):
    """One node against the ONNX reference (ONNX Runtime has neither LinearAttention nor FlexAttention)."""
    node = helper.make_node(op_type, names or list(inputs), list(outputs), domain=domain, **attrs)
    model = make_model([node], inputs, list(outputs), opset=opset, extra_opsets=extra_opsets)
    assert_close(run_fusegraph(model, inputs), ReferenceEvaluator(model).run(None, inputs))


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention(rule):
    b, t, hq, hkv, dk, dv = 2, 5, 4, 2, 3, 2
    inputs = {"q": randn(b, t, hq * dk), "k": randn(b, t, hkv * dk) / 2, "v": randn(b, t, hkv * dv),
              "state": randn(b, hkv, dk, dv)}
    if rule.startswith("gated"):
        inputs["decay"] = -np.abs(randn(b, t, hkv * dk))  # per-key-dim log decay
    if rule.endswith("delta"):
        inputs["beta"] = rng.random((b, t, hkv)).astype(np.float32)
    names = ["q", "k", "v", "state", "decay" if "decay" in inputs else "", "beta" if "beta" in inputs else ""]
    reference_check("LinearAttention", inputs, {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv},
                    opset=27, names=names, outputs=("y", "present_state"))  # its schema: both outputs


@pytest.mark.parametrize("with_mods", [False, True])
def test_flex_attention(with_mods):
    inputs = {"q": randn(1, 4, 3, 8), "k": randn(1, 2, 5, 8), "v": randn(1, 2, 5, 6)}
    attrs = {}
    if with_mods:  # score_mod: softcap 5 * tanh(s / 5); prob_mod: halve
        s = helper.make_tensor_value_info("s", 1, None)
        half = helper.make_tensor("half", 1, [], [0.5])
        five = helper.make_tensor("five", 1, [], [5.0])
        attrs["score_mod"] = helper.make_graph(
            [helper.make_node("Div", ["s", "five"], ["d"]), helper.make_node("Tanh", ["d"], ["t"]),
             helper.make_node("Mul", ["t", "five"], ["o"])], "cap", [s],
            [helper.make_tensor_value_info("o", 1, None)], [five])
        attrs["prob_mod"] = helper.make_graph([helper.make_node("Mul", ["s", "half"], ["o"])], "halve", [s],
                                              [helper.make_tensor_value_info("o", 1, None)], [half])
    reference_check("FlexAttention", inputs, attrs, opset=26, domain="ai.onnx.preview",
                    extra_opsets={"ai.onnx.preview": 1})

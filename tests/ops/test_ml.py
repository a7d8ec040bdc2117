"""ai.onnx.ml ops (ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble) and TfIdfVectorizer,
against ONNX Runtime."""

import numpy as np
import pytest
from onnx import helper, numpy_helper

import fusegraph
from fusegraph.errors import ParseError
from fusegraph.ir.text import parse_program
from tests.util import check_vs_ort, make_model, run_fusegraph

ML = "ai.onnx.ml"
rng = np.random.default_rng(0)


def ml_check(op_type, inputs, attrs, ml_opset=1, opset=17, **tol):
    node = helper.make_node(op_type, list(inputs), ["y"], domain=ML, **attrs)
    model = make_model([node], inputs, ["y"], opset=opset, extra_opsets={ML: ml_opset})
    return check_vs_ort(model, inputs, **tol)


def tensor(values, dtype, name="t"):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


@pytest.mark.parametrize("shape,idx", [((3, 4), [0, 3, 1]), ((2, 3, 5), [[4, 0]]), ((5,), [2, 2])])
def test_array_feature_extractor(shape, idx):
    x = rng.standard_normal(shape).astype(np.float32)
    ml_check("ArrayFeatureExtractor", {"x": x, "i": np.array(idx, np.int64)}, {})


def test_binarizer():
    ml_check("Binarizer", {"x": np.array([[-1, 0.5, 1, 1.5, 3]], np.float32)}, {"threshold": 1.0})


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_binarizer_other_types(dtype):
    # ONNX Runtime has float32 only (and refuses nan); nan is not above the threshold, as in ONNX's reference.
    x = {"x": np.array([[-1, 0, 1, 2, np.nan if dtype == np.float64 else 3]]).astype(dtype)}
    model = make_model([helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=1.0)], x, ["y"],
                       extra_opsets={ML: 1})
    got = run_fusegraph(model, x)[0]
    assert got.dtype == dtype and got.tolist() == [[0, 0, 0, 1, 0 if dtype == np.float64 else 1]]


@pytest.mark.parametrize("attrs,x", [
    ({"keys_strings": ["a", "b"], "values_int64s": [7, 8], "default_int64": 42}, ["a", "c", "b"]),
    ({"keys_strings": ["a", "b"], "values_floats": [0.5, 1.5]}, ["a", "c", "b"]),
    ({"keys_int64s": [1, 5], "values_strings": ["one", "five"]}, [5, 2, 1]),
    ({"keys_int64s": [1, 5], "values_strings": ["one", "five"], "default_string": "?"}, [5, 2, 1]),
    ({"keys_floats": [0.5, float("nan")], "values_int64s": [1, 2]}, [0.5, float("nan"), 3.0]),
    ({"keys_tensor": tensor(["a", "b"], object), "values_tensor": tensor([3, 4], np.int16),
      "default_tensor": tensor([-9], np.int16)}, ["b", "z"]),
    ({"keys_strings": ["a", "b"], "values_tensor": tensor([3.5, 4.5], np.float64),
      "default_tensor": tensor([0.0], np.float64)}, ["b", "z"]),
])
def test_label_encoder(attrs, x):
    x = np.array(x, dtype=object if isinstance(x[0], str) else np.int64 if isinstance(x[0], int) else np.float32)
    ml_check("LabelEncoder", {"x": x}, attrs, ml_opset=4)


def test_label_encoder_opset_1_maps_classes_to_indices():
    ml_check("LabelEncoder", {"x": np.array(["b", "q", "a"], dtype=object)},
             {"classes_strings": ["a", "b"], "default_int64": -5}, ml_opset=1)
    ml_check("LabelEncoder", {"x": np.array([1, 7, 0], np.int64)},
             {"classes_strings": ["a", "b"], "default_string": "none"}, ml_opset=1)


def tree_attrs(**over):
    """Two trees over 2 features: tree 0 splits x0 <= 0.5 then x1 < 2; tree 1 tests x1 in {1, 3}."""
    attrs = dict(
        n_targets=2, tree_roots=[0, 3], nodes_featureids=[0, 1, 0, 1],
        nodes_modes=tensor([0, 1, 0, 6], np.uint8), nodes_splits=tensor([0.5, 2.0, 0, 0], np.float32),
        nodes_truenodeids=[1, 0, 0, 2], nodes_trueleafs=[0, 1, 0, 1],
        nodes_falsenodeids=[1, 1, 0, 3], nodes_falseleafs=[1, 1, 0, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 0],
        membership_values=tensor([1.0, 3.0, np.nan], np.float32),
        leaf_targetids=[0, 1, 1, 0], leaf_weights=tensor([1.0, 10.0, 100.0, 1000.0], np.float32),
        aggregate_function=1, post_transform=0)
    attrs.update(over)
    return attrs


X_TREE = np.array([[0.1, 1.0], [0.9, 3.0], [np.nan, 2.5], [0.5, 7.0], [-4, 1.5]], np.float32)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_aggregates(aggregate):
    ml_check("TreeEnsemble", {"x": X_TREE}, tree_attrs(aggregate_function=aggregate), ml_opset=5, opset=21)


@pytest.mark.parametrize("post", [1, 2, 3])
def test_tree_ensemble_post_transforms(post):
    # ONNX Runtime swaps SOFTMAX (1) and LOGISTIC (2) of TreeEnsemble-5 (it reads the codes of its
    # TreeEnsembleRegressor); so transform its untransformed scores here, as the spec defines.
    scores = ml_check("TreeEnsemble", {"x": X_TREE}, tree_attrs(), ml_opset=5, opset=21)[0].astype(np.float64)
    if post == 2:
        want = 1 / (1 + np.exp(-scores))
    else:  # SOFTMAX_ZERO (3) leaves zero scores out and at zero
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        e = np.where(scores != 0, e, 0) if post == 3 else e
        want = e / e.sum(axis=1, keepdims=True)
    model = make_model([helper.make_node("TreeEnsemble", ["x"], ["y"], domain=ML, **tree_attrs(post_transform=post))],
                       {"x": X_TREE}, ["y"], opset=21, extra_opsets={ML: 5})
    np.testing.assert_allclose(run_fusegraph(model, {"x": X_TREE})[0], want, rtol=1e-6, atol=1e-7)
    if post == 3:
        check_vs_ort(model, {"x": X_TREE})


def test_tree_ensemble_probit():
    # ONNX Runtime's probit uses a 4e-3-accurate erfinv; ours is exact to double precision.
    attrs = tree_attrs(n_targets=1, leaf_targetids=[0, 0, 0, 0],
                       leaf_weights=tensor([0.1, 0.3, 0.6, 0.25], np.float32), post_transform=4)
    ml_check("TreeEnsemble", {"x": X_TREE}, attrs, ml_opset=5, opset=21, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("mode", [2, 3, 4, 5])
def test_tree_ensemble_modes(mode):
    attrs = tree_attrs(nodes_modes=tensor([mode, 1, 0, 6], np.uint8))
    ml_check("TreeEnsemble", {"x": X_TREE.astype(np.float64)},
             {**attrs, "nodes_splits": tensor([0.5, 2.0, 0, 0], np.float64),
              "leaf_weights": tensor([1.0, 10.0, 100.0, 1000.0], np.float64),
              "membership_values": tensor([1.0, 3.0, np.nan], np.float64)}, ml_opset=5, opset=21)


def test_tree_ensemble_member_sets_must_match_member_nodes():
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain=ML,
                            **tree_attrs(membership_values=tensor([1.0, np.nan, 2.0, np.nan], np.float32)))
    model = make_model([node], {"x": X_TREE}, ["y"], opset=21, extra_opsets={ML: 5})
    with pytest.raises(ParseError, match="membership_values"):
        fusegraph.parse_onnx(model)


POOL = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 3), ((2, 2), 5)])
@pytest.mark.parametrize("weights", [None, [0.5, 1, 2, 3, 4, 5, 6]])
def test_tfidf_int(mode, grams, skip, weights):
    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int32)
    attrs = dict(POOL, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skip)
    if weights:
        attrs["weights"] = weights
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    for inp in (x, x.reshape(-1).astype(np.int64)):
        check_vs_ort(make_model([node], {"x": inp}, ["y"], opset=9), {"x": inp})


def test_tfidf_strings():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=2,
                            max_skip_count=1, ngram_counts=[0, 3], ngram_indexes=[4, 0, 1, 2, 3],
                            pool_strings=["a", "b", "c", "a", "b", "b", "c"])
    x = np.array(["a", "b", "a", "b", "x", "c"], dtype=object)
    check_vs_ort(make_model([node], {"x": x}, ["y"], opset=9), {"x": x})
    got = run_fusegraph(make_model([node], {"x": x}, ["y"], opset=9), {"x": x})[0]
    # columns: b, c, (a, b) twice adjacent, (b, c) once skipping one item, a
    assert got.tolist() == [2, 1, 2, 1, 2]


def test_label_encoder_keys_must_match_the_input_type():
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_int64s=[1], values_int64s=[2])
    model = make_model([node], {"x": np.array(["a"], dtype=object)}, ["y"], extra_opsets={ML: 4})
    with pytest.raises(ParseError, match="keys cannot match"):
        fusegraph.parse_onnx(model)


def test_ir_text_round_trip():
    # Nested tuples (member sets, n-grams), nan keys and quoted strings print and parse back.
    models = [
        make_model([helper.make_node("TreeEnsemble", ["x"], ["y"], domain=ML, **tree_attrs())], {"x": X_TREE},
                   ["y"], opset=21, extra_opsets={ML: 5}),
        make_model([helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, keys_floats=[0.5, float("nan")],
                                     values_strings=["a'", 'b"'])], {"x": X_TREE}, ["y"], extra_opsets={ML: 4}),
        make_model([helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1,
                                     max_gram_length=2, max_skip_count=0, ngram_counts=[0, 1],
                                     ngram_indexes=[0, 1], pool_strings=["a, b)", "a, b)", "c"])],
                   {"x": np.array(["a"], dtype=object)}, ["y"], opset=9),
    ]
    for model in models:
        text = str(fusegraph.parse_onnx(model))
        assert str(parse_program(text)) == text

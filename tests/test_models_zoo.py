"""The built-in model zoo: valid ONNX, runs in onnxruntime with meaningful numbers, dynamic dims work,
builds are deterministic, and the registry API behaves."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

from fusegraph.models import (
    MODELS,
    UnknownModelError,
    get_model,
    is_model_name,
    list_models,
    sample_inputs,
)
from fusegraph.models.bert import BERT_SMALL

ort = pytest.importorskip("onnxruntime")

# bert_base is 110M parameters: building, checking and loading it into ORT takes a while
SLOW = {"bert_base"}
ALL = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in list_models()]

OUTPUT_SHAPES = {  # at batch=1 and the default dims
    "resnet50": {"logits": (1, 1000)},
    "bert_base": {"last_hidden_state": (1, 128, 768), "pooler_output": (1, 768)},
    "bert_small": {"last_hidden_state": (1, 128, 128), "pooler_output": (1, 128)},
    "yolov8n": {"output0": (1, 84, 8400)},
    "unet": {"mask": (1, 2, 256, 256)},
}


@pytest.fixture(scope="module")
def sessions():
    cache: dict[str, ort.InferenceSession] = {}

    def get(name: str) -> ort.InferenceSession:
        if name not in cache:
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 2
            # idle ORT threads otherwise spin and starve the numpy-heavy builds in later tests
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            cache[name] = ort.InferenceSession(
                get_model(name).SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
        return cache[name]

    yield get
    cache.clear()


def _run(session, feeds) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def test_registry():
    assert list_models() == ["bert_base", "bert_small", "resnet50", "unet", "yolov8n"]
    assert is_model_name("bert") and MODELS["bert"] is MODELS["bert_base"]
    assert not is_model_name("resnet18")
    assert MODELS["bert_small"].default_shapes(batch=4) == {
        k: (4, 128) for k in ("input_ids", "attention_mask", "token_type_ids")
    }
    with pytest.raises(UnknownModelError, match="resnet50.*unet") as info:
        get_model("resnet18")
    assert isinstance(info.value, KeyError) and "'resnet18'" in str(info.value)


@pytest.mark.parametrize("name", ALL)
def test_valid_onnx(name):
    model = get_model(name)
    onnx.checker.check_model(model, full_check=True)  # full_check runs strict shape inference
    assert model.ir_version == 8
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    info = MODELS[name]
    assert [i.name for i in model.graph.input] == list(info.input_shapes)
    assert tuple(o.name for o in model.graph.output) == info.output_names
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize("name", ALL)
def test_runs_in_onnxruntime(name, sessions):
    outs = _run(sessions(name), sample_inputs(name))
    assert {k: v.shape for k, v in outs.items()} == OUTPUT_SHAPES[name]
    for key, value in outs.items():
        assert np.isfinite(value).all(), key
        assert value.std() > 1e-3, f"{key} is (nearly) constant"


@pytest.mark.parametrize("name", ALL)
def test_dynamic_batch_keeps_samples_independent(name, sessions):
    feeds = sample_inputs(name, batch=2, seed=1)
    both = _run(sessions(name), feeds)
    first = _run(sessions(name), {k: v[:1] for k, v in feeds.items()})
    for key, value in both.items():
        assert value.shape[0] == 2
        np.testing.assert_allclose(value[:1], first[key], rtol=1e-3, atol=1e-3, err_msg=key)
        assert not np.allclose(value[0], value[1]), f"{key}: different samples gave the same output"


def test_bert_other_sequence_length_and_mask(sessions):
    feeds = sample_inputs("bert_small", batch=3, seq=37, seed=2)
    assert (feeds["attention_mask"].sum(1) < 37).any(), "the sampler should pad some rows"
    outs = _run(sessions("bert_small"), feeds)
    assert outs["last_hidden_state"].shape == (3, 37, 128)
    assert outs["pooler_output"].shape == (3, 128)
    # masked positions must not influence the others: scramble the padding tokens
    scrambled = {k: v.copy() for k, v in feeds.items()}
    pad = feeds["attention_mask"] == 0
    scrambled["input_ids"][pad] = 777
    again = _run(sessions("bert_small"), scrambled)
    keep = ~pad
    np.testing.assert_allclose(
        again["last_hidden_state"][keep], outs["last_hidden_state"][keep], rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(again["pooler_output"], outs["pooler_output"], rtol=1e-4, atol=1e-4)


def test_sample_inputs_are_realistic():
    bert = sample_inputs("bert_small", batch=4, seq=16)
    assert all(v.dtype == np.int64 for v in bert.values())
    assert bert["input_ids"].min() >= 0 and bert["input_ids"].max() < BERT_SMALL.vocab_size
    assert (bert["attention_mask"][0] == 1).all() and (bert["token_type_ids"] == 0).all()
    image = sample_inputs("resnet50", batch=2)["input"]
    assert image.dtype == np.float32 and image.shape == (2, 3, 224, 224)
    assert abs(image.std() - 1) < 0.01
    np.testing.assert_array_equal(
        sample_inputs("unet", seed=3)["input"], sample_inputs("unet", seed=3)["input"]
    )


@pytest.mark.parametrize("name", ["resnet50", "bert_small", "yolov8n", "unet"])
def test_builds_are_deterministic(name):
    build = MODELS[name].builder  # bypasses get_model's cache
    a, b, other = build(), build(), build(seed=1)
    assert a.SerializeToString() == b.SerializeToString()
    weights = lambda m: [onnx.numpy_helper.to_array(t) for t in m.graph.initializer]  # noqa: E731
    assert any(not np.array_equal(x, y) for x, y in zip(weights(a), weights(other), strict=True))


def test_get_model_returns_independent_copies():
    a = get_model("bert_small")
    a.graph.ClearField("node")
    assert len(get_model("bert_small").graph.node) > 0


def test_builder_kwargs():
    model = get_model("bert_small", layers=1, vocab_size=100)
    assert sum(n.op_type == "Softmax" for n in model.graph.node) == 1
    feeds = sample_inputs("bert_small", seq=8, vocab_size=100)
    assert feeds["input_ids"].max() < 100
    unet = get_model("unet", num_classes=5, image_size=64)
    assert [d.dim_value for d in unet.graph.output[0].type.tensor_type.shape.dim][1:] == [5, 64, 64]


def test_import_is_light():
    code = "import sys, fusegraph.models; print(sorted(m for m in ('torch', 'onnxruntime', 'scipy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("name", "expected"),
    [  # op counts of the reference exports these graphs imitate
        ("resnet50", {"Conv": 53, "BatchNormalization": 53, "Relu": 49, "Add": 16, "Gemm": 1}),
        ("yolov8n", {"Conv": 64, "Resize": 2, "MaxPool": 3, "Softmax": 1, "BatchNormalization": 0}),
        ("bert_small", {"LayerNormalization": 5, "Softmax": 2, "Erf": 2, "MatMul": 16, "Gemm": 1}),
        ("unet", {"ConvTranspose": 4, "Concat": 4, "MaxPool": 4, "BatchNormalization": 18}),
    ],
)
def test_structure_matches_reference_exports(name, expected):
    ops = [n.op_type for n in get_model(name).graph.node]
    assert {op: ops.count(op) for op in expected} == expected
    assert "Identity" not in ops  # outputs are named by their producers, as exporters do


def test_yolo_output_decodes_to_plausible_boxes(sessions):
    out = _run(sessions("yolov8n"), sample_inputs("yolov8n"))["output0"][0]
    cx, cy, w, h = out[:4]
    assert (w > 0).all() and (h > 0).all()
    # DFL distances are at most 15 strides per side around anchors inside the image
    assert -15 * 32 <= cx.min() and cx.max() <= 640 + 15 * 32 and abs(cy.mean() - 320) < 40
    scores = out[4:]
    assert ((scores > 0) & (scores < 1)).all() and scores.mean() < 0.1  # low class prior, like bias_init

"""The three MIGraphX-style example scripts run unchanged but for their import line, on ref and cpu
(and gpu where there is one), and their outputs match ONNX Runtime's on the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from tests.util import target_or_skip

from .conftest import ort_run, run_example

TARGETS = ["ref", "cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


def _target(name: str) -> str:
    target_or_skip(name)
    return name


@pytest.mark.parametrize("target", TARGETS)
def test_resnet50_classify(target, model_file, tmp_path, capsys):
    model = model_file("resnet50")
    images = np.random.default_rng(0).standard_normal((2, 3, 64, 64), dtype=np.float32)
    np.save(tmp_path / "images.npy", images)
    out = tmp_path / "logits.npy"
    run_example("resnet50_classify.py", [str(model), "--target", _target(target), "--batch", "2",
                                         "--input", str(tmp_path / "images.npy"), "--output", str(out),
                                         "--save", str(tmp_path / "resnet.mxr")])
    (expected,) = ort_run(model, {"input": images})
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-3, atol=1e-4)
    printed = capsys.readouterr().out
    assert "input input: float_type [2, 3, 64, 64]" in printed
    assert f"class {int(expected[0].argmax())} " in printed.split("image 0: ")[1].split(",")[0] + " "


@pytest.mark.parametrize("target", TARGETS)
def test_bert(target, model_file, tmp_path):
    model = model_file("bert_small")
    rng = np.random.default_rng(1)
    feeds = {
        "input_ids": rng.integers(0, 1024, (2, 16), dtype=np.int64),
        "attention_mask": np.concatenate([np.ones((2, 12), np.int64), np.zeros((2, 4), np.int64)], axis=1),
        "token_type_ids": np.zeros((2, 16), np.int64),
    }
    np.savez(tmp_path / "feeds.npz", **feeds)
    out = tmp_path / "out.npz"
    run_example("bert.py", [str(model), "--target", _target(target), "--batch", "2", "--seq", "16",
                            "--inputs", str(tmp_path / "feeds.npz"), "--output", str(out),
                            "--save", str(tmp_path / "bert.json")])
    got = np.load(out)
    expected = ort_run(model, feeds)
    assert len(got.files) == len(expected) == 2
    for k, e in enumerate(expected):
        np.testing.assert_allclose(got[str(k)], e, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_yolo_dynamic_batch(target, model_file, tmp_path, capsys):
    model = model_file("yolov8n")
    rng = np.random.default_rng(2)
    batches = {f"batch{n}": rng.standard_normal((n, 3, 128, 128), dtype=np.float32) for n in (1, 3)}
    np.savez(tmp_path / "images.npz", **batches)
    out = tmp_path / "out.npz"
    run_example("yolo_dynamic_batch.py", [str(model), "--target", _target(target), "--image-size", "128",
                                          "--batches", "1", "3", "--inputs", str(tmp_path / "images.npz"),
                                          "--output", str(out)])
    got = np.load(out)
    for key, images in batches.items():
        (expected,) = ort_run(model, {"images": images})
        assert got[key].shape == expected.shape == (images.shape[0], 84, 336)
        # a box coordinate is an anchor position minus a distance, both up to the image size: float32
        # rounding of those (plain fusegraph.parse_onnx on ref, unoptimized, differs from ORT as much)
        # is relative to the largest output, not to a coordinate near 0
        np.testing.assert_allclose(got[key], expected, rtol=1e-3, atol=1e-4 * np.abs(expected).max())
    assert "images: float_type dynamic=True [1..4 [1, 4]] [3..3 []]" in capsys.readouterr().out


def test_generated_inputs_run(model_file, capsys):
    """Without --input the script feeds generate_argument data, as MIGraphX's examples do."""
    run_example("resnet50_classify.py", [str(model_file("resnet50")), "--target", "ref"])
    assert "image 0: class " in capsys.readouterr().out


def test_resnet50_fp16(model_file, tmp_path):
    """--fp16 quantizes with quantize_fp16 before compiling: float16 accuracy against ORT's float32."""
    model = model_file("resnet50")
    images = np.random.default_rng(3).standard_normal((1, 3, 64, 64), dtype=np.float32)
    np.save(tmp_path / "images.npy", images)
    out = tmp_path / "logits.npy"
    run_example("resnet50_classify.py", [str(model), "--target", "ref", "--fp16", "--input",
                                         str(tmp_path / "images.npy"), "--output", str(out)])
    (expected,) = ort_run(model, {"input": images})
    got = np.load(out)
    assert got.dtype == np.float32
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-2

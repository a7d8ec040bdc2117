"""ONNX Runtime as the CLI's peer (verify's reference, perf's comparison). An optional dependency:
imported only when used, and its failures become one-line fusegraph errors."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import FusegraphError, TargetError
from .models import ModelSource

INSTALL_HINT = "pip install onnxruntime (or the fusegraph[ort] extra)"


class PeerError(FusegraphError):
    """ONNX Runtime could not load or run a model that fusegraph was asked to compare against."""


def available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


class OrtSession:
    """An ORT CPU session with a fixed thread count, so comparisons with fusegraph are like for like.

    `spin`: whether ORT's idle workers busy-wait for the next parallel section (ORT's default). Off
    here: a comparison alternates the two runtimes in one process, and ORT's spinning workers then
    hold a core through fusegraph's next run (ResNet-50 on 2 cores: fusegraph 38 -> 51 ms), while
    ORT's own latency is the same either way (29.5 vs 29.1 ms)."""

    def __init__(self, source: ModelSource, threads: int | None = None, spin: bool = False):
        if not available():
            raise TargetError(f"ONNX Runtime is not installed: {INSTALL_HINT}")
        if source.proto is None:
            raise PeerError(f"{source.label} is a compiled fusegraph program: ONNX Runtime needs the ONNX model")
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only: its warnings would interleave with our tables
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
        if not spin:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        # A file is given by path so ORT finds external weights beside it.
        model: Any = str(source.path) if source.path is not None else source.proto.SerializeToString()
        try:
            self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own pybind exception types; any failure ends here
            raise PeerError(f"ONNX Runtime cannot load {source.label}: {_one_line(e)}") from e
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.version = ort.__version__
        self.spin = spin

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(None, dict(feeds))
        except Exception as e:  # as above: ORT's exception types are not importable portably
            raise PeerError(f"ONNX Runtime failed to run the model: {_one_line(e)}") from e


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())

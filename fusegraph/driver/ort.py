"""ONNX Runtime as the CLI's peer (verify's reference, perf's comparison). An optional dependency:
imported only when used, and its failures become one-line fusegraph errors."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import FusegraphError, TargetError
from .models import ModelSource

INSTALL_HINT = "pip install onnxruntime (or the fusegraph[ort] extra)"
OPT_LEVELS = ("all", "extended", "basic", "disabled")  # ORT_ENABLE_ALL ... ORT_DISABLE_ALL


class PeerError(FusegraphError):
    """ONNX Runtime could not load or run a model that fusegraph was asked to compare against."""


def available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


@dataclasses.dataclass(frozen=True)
class OrtConfig:
    """The session settings a comparison states. The defaults are ORT's own, as shipped: intra-op
    threads one per physical core (0), idle workers spinning, every graph optimization, sequential
    execution. A comparison is against these unless it says otherwise."""

    intra_op_threads: int = 0  # 0: ORT's default
    inter_op_threads: int = 0  # 0: ORT's default; only used by parallel execution
    spinning: bool = True
    opt_level: str = "all"
    parallel: bool = False

    def __post_init__(self):
        if self.opt_level not in OPT_LEVELS:
            raise TargetError(f"ONNX Runtime optimization level {self.opt_level!r}: choose from {OPT_LEVELS}")

    @property
    def label(self) -> str:
        """What differs from ORT's defaults, e.g. 'defaults' or 'intra=1, no spinning'."""
        parts = []
        if self.intra_op_threads:
            parts.append(f"intra={self.intra_op_threads}")
        if self.parallel:
            parts.append(f"parallel, inter={self.inter_op_threads or 'default'}")
        if not self.spinning:
            parts.append("no spinning")
        if self.opt_level != "all":
            parts.append(f"opt={self.opt_level}")
        return ", ".join(parts) or "defaults"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def session_options(self):
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only: its warnings would interleave with our tables
        if self.intra_op_threads:
            opts.intra_op_num_threads = self.intra_op_threads
        if self.inter_op_threads:
            opts.inter_op_num_threads = self.inter_op_threads
        if self.parallel:
            opts.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        if not self.spinning:
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
            opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        level = {"all": "ORT_ENABLE_ALL", "extended": "ORT_ENABLE_EXTENDED", "basic": "ORT_ENABLE_BASIC",
                 "disabled": "ORT_DISABLE_ALL"}[self.opt_level]
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        return opts


def tuned_configs(cores: int) -> list[OrtConfig]:
    """The settings `--ort-best` tries (the defaults first): optimization level x spinning x intra-op
    threads (default, 1, every core when that differs from ORT's physical-core default), and the
    parallel executor with one inter-op thread per core."""
    intra = sorted({0, 1, cores})
    grid = [OrtConfig(intra_op_threads=t, spinning=s, opt_level=o)
            for o, s, t in itertools.product(("all", "extended"), (True, False), intra)]
    return [*grid, OrtConfig(parallel=True, inter_op_threads=cores)]


class OrtSession:
    """An ORT CPU session with the settings of `config` (ORT's defaults unless given)."""

    def __init__(self, source: ModelSource, config: OrtConfig | None = None):
        if not available():
            raise TargetError(f"ONNX Runtime is not installed: {INSTALL_HINT}")
        if source.proto is None:
            raise PeerError(f"{source.label} is a compiled fusegraph program: ONNX Runtime needs the ONNX model")
        import onnxruntime as ort

        self.config = config or OrtConfig()
        # A file is given by path so ORT finds external weights beside it.
        model: Any = str(source.path) if source.path is not None else source.proto.SerializeToString()
        try:
            self.session = ort.InferenceSession(model, self.config.session_options(),
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises its own pybind exception types; any failure ends here
            raise PeerError(f"ONNX Runtime cannot load {source.label}: {_one_line(e)}") from e
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.version = ort.__version__

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self.session.run(None, dict(feeds))
        except Exception as e:  # as above: ORT's exception types are not importable portably
            raise PeerError(f"ONNX Runtime failed to run the model: {_one_line(e)}") from e


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())

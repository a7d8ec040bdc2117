"""Fixtures of the fusegraph.migraphx tests: built-in models saved as ONNX files, ONNX Runtime
sessions over them, and running a MIGraphX example script with only its import line changed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from fusegraph.models import get_model

# gpu-marked tests skip without CUDA, by the gpu target's own hook
from tests.targets.gpu.conftest import pytest_collection_modifyitems  # noqa: F401

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "migraphx"
IMPORT_LINE = re.compile(r"^import migraphx$", re.MULTILINE)

# small builds of the zoo's models: the scripts' code paths, at test speed on the ref target
MODEL_ARGS = {
    "resnet50": {"layers": (1, 1, 1, 1), "image_size": 64, "num_classes": 100},
    "bert_small": {},
    "yolov8n": {"image_size": 128},
}


@pytest.fixture(scope="session")
def model_file(tmp_path_factory):
    """model_file(name) -> path of the small built-in model `name` saved as ONNX."""
    folder = tmp_path_factory.mktemp("migraphx_models")
    paths: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in paths:
            paths[name] = folder / f"{name}.onnx"
            onnx.save(get_model(name, **MODEL_ARGS[name]), paths[name])
        return paths[name]

    return get


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_example(script: str, argv: list[str]) -> None:
    """Run examples/migraphx/<script> as __main__ with `argv`, its `import migraphx` line (exactly one)
    replaced by `import fusegraph.migraphx as migraphx` and nothing else changed."""
    path = EXAMPLES / script
    source = path.read_text()
    assert len(IMPORT_LINE.findall(source)) == 1, f"{script} must import migraphx once, on a line of its own"
    source = IMPORT_LINE.sub("import fusegraph.migraphx as migraphx", source)
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        exec(compile(source, str(path), "exec"), {"__name__": "__main__", "__file__": str(path)})  # noqa: S102
    finally:
        sys.argv = saved

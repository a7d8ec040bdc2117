"""Models whose weights live in external data files parse from their path."""

import numpy as np
import onnx
import pytest

import fusegraph
from fusegraph.errors import ModelLoadError
from tests.util import make_model, run_ort


def _model():
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"])
    return make_model([node], {"x": np.zeros((2, 64), np.float32)}, ["y"], {"w": w})


def test_external_data_is_read_next_to_the_model(tmp_path):
    model = _model()
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    expected = run_ort(model, {"x": x})[0]  # before saving: saving moves the weights out of `model`
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == 64 * 32 * 4
    p = fusegraph.parse_onnx(str(path)).compile(fusegraph.get_target("ref"))
    np.testing.assert_allclose(p.run({"x": x})[0], expected, rtol=1e-5, atol=1e-5)


def test_missing_external_data_file_is_a_load_error(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelLoadError):
        fusegraph.parse_onnx(str(path))

"""Models whose weights live in external data files: read from the model's folder (a path) or the
caller's `external_data_dir` (bytes, a ModelProto), and from nowhere else (onnx/loading.py)."""

import os

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


# -- where external data may come from ---------------------------------------------------------------
W_BYTES = 64 * 32 * 4


def _external(location: str) -> onnx.ModelProto:
    """_model() with its weight's bytes moved out to `location` (the file is the caller's to write)."""
    model = _model()
    (w,) = model.graph.initializer
    onnx.external_data_helper.set_external_data(w, location=location, offset=0, length=W_BYTES)
    w.ClearField("raw_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    return model


def _weights() -> bytes:
    return onnx.numpy_helper.to_array(_model().graph.initializer[0]).tobytes()


@pytest.mark.parametrize("as_bytes", [True, False])
def test_bytes_or_a_proto_read_no_external_file_unless_told_where(tmp_path, monkeypatch, as_bytes):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.txt").write_bytes(_weights())  # in the process's working directory
    model = _external("secret.txt")
    given = model.SerializeToString() if as_bytes else model
    # before: the file was read from the working directory
    with pytest.raises(ModelLoadError, match="external_data_dir"):
        fusegraph.parse_onnx(given)
    p = fusegraph.parse_onnx(given, external_data_dir=tmp_path).compile(fusegraph.get_target("ref"))
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(p.run({"x": x})[0], run_ort(_model(), {"x": x})[0], rtol=1e-5, atol=1e-5)
    if not as_bytes:
        assert model.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL  # the caller's proto as given


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "/etc/hostname", "link.bin", "fifo.bin"])
def test_external_data_outside_the_models_folder_is_refused(tmp_path, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "secret.bin").write_bytes(_weights())
    (folder / "link.bin").symlink_to(tmp_path / "secret.bin")  # a link out of the folder
    os.mkfifo(folder / "fifo.bin")  # would block a read forever
    onnx.save(_external(location), folder / "m.onnx")
    with pytest.raises(ModelLoadError, match="tensor 'w'"):
        fusegraph.parse_onnx(folder / "m.onnx")


def test_a_link_inside_the_folder_is_followed(tmp_path):
    (tmp_path / "real.bin").write_bytes(_weights())
    (tmp_path / "link.bin").symlink_to(tmp_path / "real.bin")
    onnx.save(_external("link.bin"), tmp_path / "m.onnx")
    p = fusegraph.parse_onnx(tmp_path / "m.onnx").compile(fusegraph.get_target("ref"))
    x = np.ones((2, 64), np.float32)
    np.testing.assert_allclose(p.run({"x": x})[0], run_ort(_model(), {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_external_data_past_the_end_of_its_file_is_refused(tmp_path):
    (tmp_path / "w.bin").write_bytes(_weights()[:100])
    onnx.save(_external("w.bin"), tmp_path / "m.onnx")
    with pytest.raises(ModelLoadError, match="outside w.bin"):
        fusegraph.parse_onnx(tmp_path / "m.onnx")

"""Calibration data: folder layouts, batch splitting, and a typed error naming what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

import fusegraph
from fusegraph.errors import CalibrationError
from fusegraph.quantize.calibration import iter_calibration
from fusegraph.quantize.calibration_data import image_samples, text_samples, write_folder
from tests.quantize.test_int8 import _conv_net


@pytest.fixture(scope="module")
def program():
    return fusegraph.parse_onnx(_conv_net())


def _x(n=1, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3, 16, 16)).astype(np.float32)


def test_layouts(program, tmp_path):
    write_folder([{"x": _x(seed=k)} for k in range(3)], tmp_path / "numbered")
    assert len(list(iter_calibration(program, tmp_path / "numbered"))) == 3
    (tmp_path / "flat").mkdir()
    np.save(tmp_path / "flat" / "x.npy", _x(5))  # 5 batches of the batch-1 input: 5 samples
    samples = list(iter_calibration(program, tmp_path / "flat"))
    assert len(samples) == 5 and samples[0]["x"].shape == (1, 3, 16, 16)
    (tmp_path / "npz").mkdir()
    for k in range(2):
        np.savez(tmp_path / "npz" / f"{k}.npz", x=_x(seed=k))
    assert len(list(iter_calibration(program, tmp_path / "npz"))) == 2
    assert len(list(iter_calibration(program, tmp_path / "npz" / "0.npz"))) == 1
    assert len(list(iter_calibration(program, [{"x": _x()}] * 4, limit=2))) == 2


@pytest.mark.parametrize("make, match", [
    (lambda d: None, "holds no .npy"),
    (lambda d: (d / "a").mkdir(), "not numbered"),
    (lambda d: (np.save(d / "x.npy", _x()), np.savez(d / "s.npz", x=_x())), "mixes"),
    (lambda d: np.save(d / "y.npy", _x()), "'y' is no input"),
    (lambda d: np.save(d / "x.npy", _x().astype(np.float64)), "float64"),
    (lambda d: np.save(d / "x.npy", np.zeros((1, 3, 8, 8), np.float32)), r"shape \[1, 3, 8, 8\]"),
    (lambda d: (d / "x.npy").write_bytes(b"not numpy"), "not a .npy"),
    (lambda d: (d / "s.npz").write_bytes(b"PK junk"), "cannot read it as a .npz"),
])
def test_bad_folder_is_a_typed_error(program, tmp_path, make, match):
    d = tmp_path / "cal"
    d.mkdir()
    make(d)
    with pytest.raises(CalibrationError, match=match):
        fusegraph.quantize_int8(fusegraph.parse_onnx(_conv_net()), d)


def test_missing_folder_and_bad_samples(program, tmp_path):
    with pytest.raises(CalibrationError, match="does not exist"):
        list(iter_calibration(program, tmp_path / "nope"))
    with pytest.raises(CalibrationError, match="no samples"):
        list(iter_calibration(program, []))
    with pytest.raises(CalibrationError, match="missing"):
        list(iter_calibration(program, [{}]))
    with pytest.raises(CalibrationError, match="not int"):
        list(iter_calibration(program, 3))


def test_generated_images_and_text_are_seeded_and_shaped():
    a = image_samples("input", (2, 3, 32, 48), 3, seed=0)
    b = image_samples("input", (2, 3, 32, 48), 3, seed=0)
    c = image_samples("input", (2, 3, 32, 48), 3, seed=1)
    assert a[0]["input"].shape == (2, 3, 32, 48) and a[0]["input"].dtype == np.float32
    np.testing.assert_array_equal(a[2]["input"], b[2]["input"])
    assert not np.array_equal(a[0]["input"], c[0]["input"])
    assert a[0]["input"].std() > 0.2  # images, not a constant
    t = text_samples("x", (1, 3, 48, 320), 2)[0]["x"]
    assert t.shape == (1, 3, 48, 320) and -1.0 <= t.min() < 0.0 < t.max() <= 1.0

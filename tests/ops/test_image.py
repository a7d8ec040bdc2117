"""ImageDecoder on the ref and cpu targets. ONNX Runtime has no ImageDecoder kernel: the references are
ONNX's frozen test data (encoded with Pillow by ONNX's maintainers, kept in the onnx package, so
independent of the Pillow installed here) and lossless images made from known pixels."""

import io
import sys

import numpy as np
import pytest
from onnx import helper
from onnx.backend.test.case.node import _image_decoder_data as frozen

import fusegraph
from fusegraph.errors import ParseError, UnsupportedOpError
from tests.util import make_model, run_fusegraph

TARGETS = ["ref", "cpu"]
rng = np.random.default_rng(0)


def _model(data: np.ndarray, pixel_format: str = "RGB"):
    node = helper.make_node("ImageDecoder", ["x"], ["y"], name="decode", pixel_format=pixel_format)
    return make_model([node], {"x": data}, ["y"], opset=20)


def _decode(data: np.ndarray, pixel_format: str = "RGB", target: str = "ref") -> np.ndarray:
    (y,) = run_fusegraph(_model(data, pixel_format), {"x": data}, target)
    return y


def _encode(pixels: np.ndarray, fmt: str) -> np.ndarray:
    image = pytest.importorskip("PIL.Image")
    with io.BytesIO() as f:
        image.fromarray(pixels).save(f, format=fmt)
        return np.frombuffer(f.getvalue(), np.uint8).copy()


FROZEN = sorted(n for n in dir(frozen) if n.startswith("image_decoder_decode_"))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", FROZEN)
def test_matches_onnx_frozen_data(name, target):
    pytest.importorskip("PIL")
    case = getattr(frozen, name)
    fmt = "BGR" if name.endswith("_bgr") else "Grayscale" if name.endswith("_grayscale") else "RGB"
    y = _decode(case.data, fmt, target)
    assert y.dtype == np.uint8 and y.shape == case.output.shape
    np.testing.assert_array_equal(y, case.output)  # JPEG too: the same libjpeg-turbo decoding


@pytest.mark.parametrize("target", TARGETS)
def test_channels_follow_pixel_format(target):
    # RGBA loses alpha, a grey image gains channels: C is the spec's whatever the file holds
    rgba = rng.integers(0, 256, (7, 5, 4), dtype=np.uint8)
    grey = rng.integers(0, 256, (4, 6), dtype=np.uint8)
    np.testing.assert_array_equal(_decode(_encode(rgba, "PNG"), "RGB", target), rgba[:, :, :3])
    np.testing.assert_array_equal(_decode(_encode(rgba, "PNG"), "BGR", target), rgba[:, :, 2::-1])
    np.testing.assert_array_equal(_decode(_encode(grey, "PNG"), "RGB", target), np.repeat(grey[:, :, None], 3, 2))
    np.testing.assert_array_equal(_decode(_encode(grey, "BMP"), "Grayscale", target), grey[:, :, None])
    deep = rng.integers(0, 65536, (3, 4), dtype=np.uint16)  # 16-bit grey: its high byte, not clipped
    np.testing.assert_array_equal(_decode(_encode(deep, "PNG"), "Grayscale", target), (deep >> 8)[:, :, None])


@pytest.mark.parametrize("target", TARGETS)
def test_undecodable_stream_gives_an_empty_image(target):
    # the spec: "if it can't decode for any reason ... it will return an empty matrix"
    pytest.importorskip("PIL")
    png = _encode(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), "PNG")
    eps = np.frombuffer(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n", np.uint8)
    for data, fmt, c in ((png[: len(png) // 2], "RGB", 3), (rng.integers(0, 256, 64, dtype=np.uint8), "BGR", 3),
                         (eps, "Grayscale", 1), (np.zeros(0, np.uint8), "RGB", 3)):
        y = _decode(data, fmt, target)
        assert y.dtype == np.uint8 and y.shape == (0, 0, c)


def test_without_pillow_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # `import PIL` raises ImportError
    monkeypatch.setitem(sys.modules, "PIL.Image", None)
    data = np.zeros(4, np.uint8)
    with pytest.raises(UnsupportedOpError, match=r"ImageDecoder.*'decode'.*pip install pillow"):
        fusegraph.parse_onnx(_model(data))


def test_bad_stream_type_and_pixel_format_are_parse_errors():
    pytest.importorskip("PIL")
    with pytest.raises(ParseError, match="1-D uint8"):
        fusegraph.parse_onnx(_model(np.zeros((2, 2), np.uint8)))
    with pytest.raises(ParseError, match="pixel_format 'RGBA'"):
        fusegraph.parse_onnx(_model(np.zeros(4, np.uint8), "RGBA"))

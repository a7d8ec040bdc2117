"""Image decoding (ONNX ImageDecoder): an encoded file's bytes in, uint8 pixels (H, W, C) out.

The codecs are Pillow's, an optional dependency imported when an image is decoded: ONNX's reference
and the generator of its test data decode with Pillow too, and Pillow's JPEG decoder is
libjpeg-turbo, whose default "fancy" chroma upsampling is the one the spec prescribes.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedOpError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape

# The formats the spec lists, as Pillow names its decoders (PPM reads PBM, PGM, PPM and PNM). Only
# these are tried: Pillow's others include EPS, whose decoder runs Ghostscript on the bytes.
FORMATS = ("BMP", "JPEG", "JPEG2000", "TIFF", "PNG", "WEBP", "PPM")
# pixel_format -> (Pillow mode to convert to, channels, whether to reverse the channels)
PIXEL_FORMATS = {"RGB": ("RGB", 3, False), "BGR": ("RGB", 3, True), "Grayscale": ("L", 1, False)}


def pillow_image(node: str = "") -> Any:
    """Pillow's Image module, or an UnsupportedOpError (naming the ONNX node) saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedOpError("ImageDecoder", node=node,
                                 reason="decoding images needs Pillow: pip install pillow") from None
    return Image


def decode_image(data: bytes, pixel_format: str) -> np.ndarray | None:
    """The first frame of `data` as (H, W, C) uint8 in `pixel_format`, or None where it is not an image
    of one of FORMATS that Pillow can read (corrupt, truncated, another format, too many pixels)."""
    image_mod = pillow_image()
    mode, channels, reverse = PIXEL_FORMATS[pixel_format]
    try:
        with image_mod.open(io.BytesIO(data), formats=FORMATS) as img:
            if img.mode.startswith("I;16"):
                # 16-bit grey keeps its high byte, as Pillow reads 16-bit colour (convert would clip)
                img = image_mod.fromarray((np.asarray(img).astype(np.uint16) >> 8).astype(np.uint8))
            # convert, as ONNX's reference does for Grayscale (ITU-R 601-2 luma); for RGB it also
            # expands palettes and grey images and drops alpha, so C is always the spec's
            pixels = np.asarray(img.convert(mode), dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, EOFError, image_mod.DecompressionBombError):
        return None
    pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
    return np.ascontiguousarray(pixels[:, :, ::-1]) if reverse else pixels


@register_op
class ImageDecoder(Op):
    """Decode a 1-D uint8 tensor holding an encoded image (BMP, JPEG, JPEG 2000, TIFF, PNG, WebP, PNM)
    into uint8 pixels (H, W, C): C is 3 for RGB and BGR, 1 for Grayscale. H and W are known only once
    the image is read. As the spec says, a stream that cannot be decoded gives an empty (0, 0, C)."""

    name = "image_decoder"
    kind = OpKind.OPAQUE
    pixel_format: str = "RGB"

    def compute_shape(self, inputs):
        (x,) = inputs
        if x.dtype is not DType.uint8 or x.ndim != 1:
            raise ShapeError(f"{self}: the encoded stream must be a 1-D uint8 tensor, got {x}")
        if self.pixel_format not in PIXEL_FORMATS:
            raise ShapeError(f"{self}: pixel_format must be one of {list(PIXEL_FORMATS)}")
        channels = PIXEL_FORMATS[self.pixel_format][1]
        return Shape.dynamic(DType.uint8, [Dim(0, None), Dim(0, None), Dim.fixed(channels)])

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        pixels = decode_image(np.ascontiguousarray(x, dtype=np.uint8).tobytes(), self.pixel_format)
        if pixels is None:
            return np.zeros((0, 0, PIXEL_FORMATS[self.pixel_format][1]), np.uint8)
        return pixels

"""ImageDecoder -> `image_decoder`. Pillow, which decodes, is optional: a model that decodes images
fails at parse time on a machine without it, with an error that says how to install it."""

from __future__ import annotations

from ...ir.dtypes import DType
from ...ops.image import PIXEL_FORMATS, pillow_image
from ..registry import converter


@converter("ImageDecoder", since=20)
def image_decoder(ctx, node, args):
    (x,) = args
    if x.shape.dtype is not DType.uint8 or x.shape.ndim != 1:
        raise ctx.error(f"the encoded stream must be a 1-D uint8 tensor, got {x.shape}")
    pixel_format = node.attr("pixel_format", "RGB")
    if pixel_format not in PIXEL_FORMATS:
        raise ctx.error(f"pixel_format {pixel_format!r} is not one of {list(PIXEL_FORMATS)}")
    pillow_image(node.name)
    return ctx.add("image_decoder", x, pixel_format=pixel_format)

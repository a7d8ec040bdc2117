"""Calibration and held-out inputs from real images, seeded: random crops, flips and colour jitter of
the image files found in installed packages and system docs, plus scenes drawn with PIL (shapes over
gradients and textures) so that there is always enough variety; and text lines rendered with PIL for
OCR recognizers.

    images = image_samples("input", (1, 3, 224, 224), count=32, seed=0)            # ImageNet-normalized
    held_out = image_samples("input", (1, 3, 224, 224), count=64, seed=1)          # other crops
    lines = text_samples("x", (1, 3, 48, 320), count=16, seed=0)                    # PP-OCR rec

Needs Pillow (imported when called). Different seeds give disjoint draws of crops and scenes, not
disjoint source files: the pool is small, so held-out crops can come from a calibration image.
"""

from __future__ import annotations

import functools
import os
import string
import sysconfig
from pathlib import Path

import numpy as np

from ..errors import ArgumentError

# mean / std per channel of RGB values in [0, 1]; (0, 1) is raw [0, 1] pixels
NORMALIZATIONS = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "unit": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),          # YOLO: pixels / 255
    "symmetric": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),     # PP-OCR: (pixels / 255 - 0.5) / 0.5
}
_IMAGE_DIRS = (Path(sysconfig.get_paths()["purelib"]), Path("/usr/share/doc"), Path("/usr/share/pixmaps"))
_MAX_FILES = 64
_TEXT = string.ascii_letters + string.digits + "  .,:-/%"


@functools.lru_cache(maxsize=1)
def source_images() -> tuple[Path, ...]:
    """Image files of at least 96 x 96 pixels and 8 kB found in installed packages and system docs
    (sorted; at most 64)."""
    from PIL import Image, UnidentifiedImageError

    found = []
    for root in _IMAGE_DIRS:
        for folder, _, names in os.walk(root):  # one walk: a glob per suffix walks site-packages thrice
            for n in names:
                if not n.lower().endswith((".jpg", ".jpeg", ".png")):
                    continue
                p = Path(folder) / n
                try:
                    if p.stat().st_size < 8192:
                        continue
                    with Image.open(p) as im:
                        if min(im.size) >= 96:
                            found.append(p)
                except (OSError, UnidentifiedImageError):
                    continue
    return tuple(sorted(found)[:_MAX_FILES])


def _drawn_scene(rng: np.random.Generator, size: int = 256):
    """Shapes of random colours over a two-colour gradient with blurred noise: edges, flat regions
    and texture, as photos have."""
    from PIL import Image, ImageDraw, ImageFilter

    a, b = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = np.linspace(0, 1, size)[:, None, None]
    img = (a * (1 - t) + b * t) * np.ones((1, size, 1))
    img = img + rng.normal(0, 18, (size, size, 3))
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(1.5))
    d = ImageDraw.Draw(im)
    for _ in range(int(rng.integers(3, 9))):
        x0, y0 = rng.integers(0, size, 2)
        w, h = rng.integers(size // 10, size // 2, 2)
        box = [int(x0), int(y0), int(x0 + w), int(y0 + h)]
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)(box, fill=fill)
    return im.filter(ImageFilter.GaussianBlur(float(rng.uniform(0, 1.2))))


def _augmented(im, rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A random crop (40-100 % of the shorter side) resized to h x w, maybe flipped, colour-jittered:
    float32 RGB in [0, 1], [h, w, 3]."""
    from PIL import Image

    im = im.convert("RGB")
    side = min(im.size)
    c = int(side * rng.uniform(0.4, 1.0))
    cw, ch = min(im.size[0], int(c * w / max(h, w)) or c), min(im.size[1], int(c * h / max(h, w)) or c)
    x0 = int(rng.integers(0, im.size[0] - cw + 1))
    y0 = int(rng.integers(0, im.size[1] - ch + 1))
    crop = im.crop((x0, y0, x0 + cw, y0 + ch)).resize((w, h), Image.BILINEAR)
    x = np.asarray(crop, np.float32) / 255.0
    if rng.random() < 0.5:
        x = x[:, ::-1]
    x = x * rng.uniform(0.7, 1.3) + rng.uniform(-0.1, 0.1)          # brightness, contrast
    gray = x.mean(axis=2, keepdims=True)
    x = gray + (x - gray) * rng.uniform(0.6, 1.4)                      # saturation
    return np.clip(x, 0, 1).astype(np.float32)


def _layout(x: np.ndarray, shape: tuple[int, ...], normalization: str) -> np.ndarray:
    if normalization not in NORMALIZATIONS:
        raise ArgumentError(f"normalization {normalization!r}: expected one of {', '.join(NORMALIZATIONS)}")
    mean, std = (np.asarray(v, np.float32) for v in NORMALIZATIONS[normalization])
    x = (x - mean) / std
    return np.ascontiguousarray(x.transpose(2, 0, 1) if shape[1] == 3 else x)


def _spatial(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) != 4 or 3 not in (shape[1], shape[3]):
        raise ArgumentError(f"image samples need an [N, 3, H, W] or [N, H, W, 3] input, not {list(shape)}")
    return (shape[2], shape[3]) if shape[1] == 3 else (shape[1], shape[2])


def image_samples(name: str, shape: tuple[int, ...], count: int, seed: int = 0,
                  normalization: str = "imagenet") -> list[dict[str, np.ndarray]]:
    """`count` input dicts {name: float32 array of `shape`}: each image in a batch is an augmented
    crop of a found image file or (every other one, and always when none is found) a drawn scene."""
    from PIL import Image

    h, w = _spatial(shape)
    rng = np.random.default_rng([seed, 7211])
    files = source_images()
    out = []
    for _ in range(count):
        batch = []
        for _ in range(shape[0]):
            if files and rng.random() < 0.5:
                with Image.open(files[int(rng.integers(len(files)))]) as im:
                    x = _augmented(im, rng, h, w)
            else:
                x = _augmented(_drawn_scene(rng), rng, h, w)
            batch.append(_layout(x, shape, normalization))
        out.append({name: np.stack(batch)})
    return out


def _words(rng: np.random.Generator) -> str:
    return "".join(rng.choice(list(_TEXT), int(rng.integers(4, 16)))).strip() or "text"


def _rendered(name: str, shape: tuple[int, ...], count: int, normalization: str, rng: np.random.Generator,
              draw) -> list[dict[str, np.ndarray]]:
    """`count` input dicts of images `draw(rng, h, w)` renders with PIL, each slightly blurred."""
    from PIL import ImageFilter

    h, w = _spatial(shape)
    out = []
    for _ in range(count):
        batch = []
        for _ in range(shape[0]):
            im = draw(rng, h, w).filter(ImageFilter.GaussianBlur(float(rng.uniform(0, 0.8))))
            batch.append(_layout(np.asarray(im, np.float32) / 255.0, shape, normalization))
        out.append({name: np.stack(batch)})
    return out


def text_samples(name: str, shape: tuple[int, ...], count: int, seed: int = 0,
                 normalization: str = "symmetric") -> list[dict[str, np.ndarray]]:
    """`count` input dicts of text lines rendered with PIL's font (dark on light, random words,
    size, offset, contrast and slight blur), for OCR recognizers."""
    from PIL import Image, ImageDraw, ImageFont

    def line(rng, h, w):
        words = _words(rng)
        size = int(h * rng.uniform(0.55, 0.8))
        font = ImageFont.load_default(size=size)
        bg = tuple(int(c) for c in rng.integers(170, 256, 3))
        fg = tuple(int(c) for c in rng.integers(0, 90, 3))
        im = Image.new("RGB", (w, h), bg)
        ImageDraw.Draw(im).text((int(rng.integers(0, 12)), int((h - size) / 2 - size * 0.1)), words, fill=fg, font=font)
        return im

    return _rendered(name, shape, count, normalization, np.random.default_rng([seed, 3061]), line)


def page_samples(name: str, shape: tuple[int, ...], count: int, seed: int = 0,
                 normalization: str = "symmetric") -> list[dict[str, np.ndarray]]:
    """`count` input dicts of pages: a few text lines (as `text_samples` draws them: random words,
    sizes, contrast) at random places over a light background, for OCR detectors, whose map must
    see text to be checked at all (on noise an fp32 detector's map is ~0 everywhere)."""
    from PIL import Image, ImageDraw, ImageFont

    def page(rng, h, w):
        im = Image.new("RGB", (w, h), tuple(int(c) for c in rng.integers(170, 256, 3)))
        draw = ImageDraw.Draw(im)
        for _ in range(int(rng.integers(3, 8))):
            words = _words(rng)
            size = int(rng.integers(max(h // 24, 10), max(h // 8, 12)))
            at = (int(rng.integers(0, max(w // 2, 1))), int(rng.integers(0, max(h - size, 1))))
            draw.text(at, words, fill=tuple(int(c) for c in rng.integers(0, 90, 3)), font=ImageFont.load_default(size=size))
        return im

    return _rendered(name, shape, count, normalization, np.random.default_rng([seed, 5113]), page)


def write_folder(samples: list[dict[str, np.ndarray]], folder: Path) -> Path:
    """`samples` as a calibration folder of numbered subfolders (folder/0/<input>.npy, ...)."""
    folder = Path(folder)
    for k, sample in enumerate(samples):
        (folder / str(k)).mkdir(parents=True, exist_ok=True)
        for name, value in sample.items():
            np.save(folder / str(k) / f"{name}.npy", value)
    return folder

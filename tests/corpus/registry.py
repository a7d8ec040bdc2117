"""The corpus registry: one `Entry` per model, each family file registering its own.

An entry is a name, a family, the packages its builder needs, `inputs()` (realistic feeds from a
seeded generator, numpy only) and `build(feeds)` (the ONNX model, exported from those feeds). Builders
are deterministic: torch is seeded before each one, so a rebuilt model has the same weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import onnx

Feeds = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    family: str
    build: Callable[[Feeds], onnx.ModelProto]
    inputs: Callable[[np.random.Generator], Feeds]
    needs: tuple[str, ...] = ("torch",)  # import names; the entry skips when one is missing
    precision: str = "fp32"  # fp32 | fp16 | int8: decides the comparison criterion (compare.py)
    base: str = ""  # the entry whose model this one transforms (quantized from it): part of the cache key
    ort_threads: int = 2  # ONNX Runtime's intra-op threads for the reference (its default here)

    def feeds(self) -> Feeds:
        return self.inputs(np.random.default_rng(0))


ENTRIES: dict[str, Entry] = {}


def register(name: str, family: str, inputs: Callable[[np.random.Generator], Feeds],
             needs: tuple[str, ...] = ("torch",), precision: str = "fp32", base: str = "", ort_threads: int = 2):
    """Decorator: register `build(feeds) -> ModelProto` as corpus entry `name`."""

    def deco(build: Callable[[Feeds], onnx.ModelProto]):
        if name in ENTRIES:
            raise ValueError(f"corpus entry {name!r} registered twice")
        ENTRIES[name] = Entry(name, family, build, inputs, needs, precision, base, ort_threads)
        return build

    return deco


# common realistic inputs ---------------------------------------------------------------------

def image(shape, nhwc: bool = False) -> Callable[[np.random.Generator], Feeds]:
    """ImageNet-normalized pixels: uniform [0, 1) minus the mean over the standard deviation."""
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])

    def make(rng):
        x = rng.random(shape)
        c = shape[-1] if nhwc else shape[1]
        view = (1,) * (len(shape) - 1) + (c,) if nhwc else (1, c) + (1,) * (len(shape) - 2)
        if c == 3:
            x = (x - mean.reshape(view)) / std.reshape(view)
        return {"pixel_values": x.astype(np.float32)}

    return make


def tokens(vocab: int, batch: int = 1, seq: int = 16, pad: int = 4, names=("input_ids", "attention_mask"),
           low: int = 3):
    """Token ids in [low, vocab) and an attention mask with the last `pad` positions padded."""

    def make(rng):
        ids = rng.integers(low, vocab, (batch, seq), dtype=np.int64)
        mask = np.ones((batch, seq), dtype=np.int64)
        if pad:
            mask[:, seq - pad:] = 0
        return dict(zip(names, (ids, mask)))

    return make


def audio(shape, name: str = "input_values", scale: float = 0.1):
    """A waveform: a few sines plus noise, about `scale` in amplitude."""

    def make(rng):
        t = np.arange(shape[-1]) / 16000.0
        tone = sum(np.sin(2 * np.pi * f * t) for f in (220.0, 440.0, 1250.0)) / 3
        x = scale * (tone + 0.3 * rng.standard_normal(shape))
        return {name: x.astype(np.float32)}

    return make

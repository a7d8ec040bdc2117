"""Built-in model zoo: well-known architectures as ONNX ModelProtos with deterministic random weights.

The graphs are written node by node with onnx.helper, shaped like the exports of torch / transformers /
ultralytics (opset 17, IR 8), so they exercise the same parser paths and fusions as real models
without a download. Weights are random but scaled so activations stay O(1) through every layer.

    model = get_model("resnet50")          # a fresh ModelProto (builds are cached; copies are cheap)
    feeds = sample_inputs("resnet50", batch=2)

Importing this package imports only numpy and onnx.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from ..errors import UnknownModelError
from .bert import BERT_BASE, BERT_SMALL, BertConfig, build_bert, sample_bert
from .resnet import build_resnet, sample_resnet
from .unet import build_unet, sample_unet
from .yolo import build_yolov8, sample_yolov8

__all__ = [
    "MODELS",
    "ModelInfo",
    "UnknownModelError",
    "get_model",
    "is_model_name",
    "list_models",
    "sample_inputs",
]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str
    # builder(seed=0, **kwargs) -> ModelProto; sampler(batch, rng, **kwargs) -> feeds
    builder: Callable[..., onnx.ModelProto] = field(repr=False)
    sampler: Callable[..., dict[str, np.ndarray]] = field(repr=False)
    # graph inputs with symbolic dims as declared in the model, and the values the samples use
    input_shapes: Mapping[str, tuple[int | str, ...]]
    output_names: tuple[str, ...]
    default_dims: Mapping[str, int] = field(default_factory=lambda: {"batch": 1})

    def default_shapes(self, batch: int = 1) -> dict[str, tuple[int, ...]]:
        """Concrete input shapes: symbolic dims replaced by their defaults, batch by `batch`."""
        dims = {**self.default_dims, "batch": batch}
        return {
            k: tuple(dims[d] if isinstance(d, str) else d for d in s) for k, s in self.input_shapes.items()
        }


def _bert(base: BertConfig, name: str) -> tuple[Callable, Callable]:
    """Builder and sampler for one BERT size; keyword args override BertConfig fields."""

    def builder(seed: int = 0, **overrides) -> onnx.ModelProto:
        return build_bert(dataclasses.replace(base, **overrides), seed=seed, name=name)

    def sampler(batch: int, rng: np.random.Generator, seq: int = 128, **overrides) -> dict[str, np.ndarray]:
        fields = {f.name for f in dataclasses.fields(BertConfig)}
        cfg = dataclasses.replace(base, **{k: v for k, v in overrides.items() if k in fields})
        return sample_bert(batch, rng, seq=seq, cfg=cfg)

    return builder, sampler


def _image_model(name, description, builder, sampler, input_name, size, outputs) -> ModelInfo:
    return ModelInfo(
        name, description, builder, sampler,
        input_shapes={input_name: ("batch", 3, size, size)}, output_names=outputs,
    )  # fmt: skip


def _bert_info(name: str, cfg: BertConfig) -> ModelInfo:
    builder, sampler = _bert(cfg, name)
    dims = ("batch", "sequence")
    return ModelInfo(
        name,
        f"BERT encoder + pooler: {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} heads, "
        f"vocab {cfg.vocab_size} (transformers-style export)",
        builder,
        sampler,
        input_shapes={"input_ids": dims, "attention_mask": dims, "token_type_ids": dims},
        output_names=("last_hidden_state", "pooler_output"),
        default_dims={"batch": 1, "sequence": 128},
    )


MODELS: dict[str, ModelInfo] = {
    "resnet50": _image_model(
        "resnet50", "ResNet-50 v1.5 classifier, unfolded BatchNorm (torchvision-style export)",
        build_resnet, sample_resnet, "input", 224, ("logits",),
    ),
    "bert_base": _bert_info("bert_base", BERT_BASE),
    "bert_small": _bert_info("bert_small", BERT_SMALL),
    "yolov8n": _image_model(
        "yolov8n", "YOLOv8n detector with DFL box decoding, BN fused (ultralytics-style export)",
        build_yolov8, sample_yolov8, "images", 640, ("output0",),
    ),
    "unet": _image_model(
        "unet", "U-Net segmenter, 4 levels from 16 channels, ConvTranspose upsampling",
        build_unet, sample_unet, "input", 256, ("mask",),
    ),
}  # fmt: skip
_ALIASES = {"bert": "bert_base"}
MODELS.update({alias: MODELS[target] for alias, target in _ALIASES.items()})


def list_models() -> list[str]:
    """Canonical model names (aliases such as "bert" are accepted everywhere but not listed)."""
    return sorted(name for name, info in MODELS.items() if info.name == name)


def is_model_name(s: str) -> bool:
    return s in MODELS


def _info(name: str) -> ModelInfo:
    try:
        return MODELS[name]
    except KeyError:
        aliases = ", ".join(f"{a} -> {t}" for a, t in _ALIASES.items())
        raise UnknownModelError(
            f"unknown model {name!r}; available: {', '.join(list_models())} (aliases: {aliases})"
        ) from None


@functools.lru_cache(maxsize=8)
def _build_cached(name: str, kwargs: tuple[tuple[str, Any], ...]) -> onnx.ModelProto:
    return MODELS[name].builder(**dict(kwargs))


def get_model(name: str, **kwargs) -> onnx.ModelProto:
    """A fresh ModelProto for `name`; kwargs go to the builder (seed=, num_classes=, layers=, ...).

    Builds are cached per (name, kwargs) and the caller gets its own copy (a CopyFrom: 0.1-0.7 s for
    BERT-base's 440 MB, milliseconds for the others), so mutating the result cannot corrupt later calls.
    """
    info = _info(name)
    cached = _build_cached(info.name, tuple(sorted(kwargs.items())))
    model = onnx.ModelProto()
    model.CopyFrom(cached)
    return model


def sample_inputs(name: str, batch: int = 1, seed: int = 0, **kwargs) -> dict[str, np.ndarray]:
    """Realistic feeds for `name`: N(0, 1) images; for BERT, padded token ids, mask and zero types.

    kwargs are the sampler's (seq= for BERT) and may repeat the ones given to get_model (image_size=,
    vocab_size=, ...) so the feeds match that model; keys a sampler does not use are ignored.
    """
    return _info(name).sampler(batch, np.random.default_rng(seed), **kwargs)

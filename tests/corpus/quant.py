"""Reduced-precision models: float16 exports, and int8 models made from corpus entries with
onnxruntime.quantization (static QDQ with a random-data calibration reader, and dynamic)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

from .build import export, hf_config, hf_export, model_path
from .registry import ENTRIES, image, register, tokens


def _quantized(base: str, mode: str, ort_threads: int = 2, **kwargs):
    """Register `<base>_<mode>`: the base entry's model quantized statically (QDQ) or dynamically.

    Weights use 7 bits (reduce_range): ONNX Runtime's uint8 x int8 kernels on x86 without VNNI
    (AVX2, the CI machines) sum pairs of products in int16 and saturate, so with 8-bit weights ORT
    itself is off by up to 27524 in an int32 MatMulInteger accumulator (measured here), and the
    reference would be wrong; ORT's quantization guide prescribes reduce_range for these machines."""
    entry = ENTRIES[base]
    kwargs.setdefault("reduce_range", True)

    def build(feeds):
        from onnxruntime import quantization as q

        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "q.onnx"
            if mode == "qdq":
                rng = np.random.default_rng(1)
                batches = iter([entry.inputs(rng) for _ in range(4)])  # calibration: fresh random inputs

                class Reader(q.CalibrationDataReader):
                    def get_next(self):
                        return next(batches, None)

                q.quantize_static(str(model_path(entry)), str(out), Reader(), quant_format=q.QuantFormat.QDQ,
                                  **kwargs)
            else:
                q.quantize_dynamic(str(model_path(entry)), str(out), **kwargs)
            return onnx.load(str(out))

    register(f"{base}_{mode}", "int8 " + mode, entry.inputs, (*entry.needs, "onnxruntime"), "int8", base,
             ort_threads)(build)


def register_all() -> None:
    _quantized("grouped_cnn", "qdq")
    _quantized("se_cnn", "qdq", per_channel=True)
    _quantized("bert", "qdq", op_types_to_quantize=["MatMul", "Add", "Gemm"])
    _quantized("bert", "dynamic")
    # ORT's DynamicQuantizeLSTM splits the batch across its threads and quantizes each part of H with
    # its own scale, so its answer depends on the thread count (rel L2 1.9e-3 between 1 and 2 threads,
    # measured); one thread quantizes the whole batch at once, as the op's definition does
    _quantized("lstm_bidir", "dynamic", ort_threads=1)
    _quantized("depthwise_cnn", "dynamic")  # Conv -> ConvInteger


@register("cnn_fp16", "fp16", lambda rng: {k: v.astype(np.float16) for k, v in image((1, 3, 32, 32))(rng).items()},
          precision="fp16")
def cnn_fp16(feeds):  # a float16 export (.half()): conv, batch-norm folded by torch, SiLU, pooling, linear
    import torch.nn as nn

    from .torch_cnn import conv_bn_act, squeeze_excite

    m = nn.Sequential(conv_bn_act(3, 16, stride=2, act="silu"), conv_bn_act(16, 16, groups=16, act="silu"),
                      squeeze_excite(16), conv_bn_act(16, 32, stride=2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(32, 10))
    return export(m.eval().half(), feeds, ["logits"])


@register("bert_fp16", "fp16", tokens(96), ("torch", "transformers"), precision="fp16")
def bert_fp16(feeds):  # a float16 transformer encoder (half weights and activations, int64 ids)
    import transformers as T

    cfg = hf_config(T.BertConfig, vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64)
    model = T.BertModel(cfg)
    return hf_export(model.half(), feeds, ["last_hidden_state"])

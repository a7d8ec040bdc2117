"""Vision models from transformers (classifiers, a detector, a segmenter, CLIP) and speech encoders."""

from __future__ import annotations

import numpy as np

from .build import hf_config, hf_export
from .registry import audio, image, register, tokens

NEEDS = ("torch", "transformers")
VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
           patch_size=8, num_labels=10)


def _model(config_name: str, model_name: str, outputs=("logits",), **cfg):
    def build(feeds):
        import transformers as T

        model = getattr(T, model_name)(hf_config(getattr(T, config_name), **cfg))
        return hf_export(model, feeds, list(outputs))

    return build


VISION = {
    "vit": (image((1, 3, 32, 32)), _model("ViTConfig", "ViTForImageClassification", **VIT)),
    "deit": (image((1, 3, 32, 32)), _model("DeiTConfig", "DeiTForImageClassificationWithTeacher", **VIT)),
    "swin": (image((1, 3, 32, 32)), _model("SwinConfig", "SwinForImageClassification", image_size=32, patch_size=2,
                                           embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
                                           num_labels=10)),
    "convnext": (image((1, 3, 32, 32)), _model("ConvNextConfig", "ConvNextForImageClassification",
                                               hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=10)),
    "resnet_hf": (image((1, 3, 32, 32)), _model("ResNetConfig", "ResNetForImageClassification", embedding_size=16,
                                                hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck",
                                                num_labels=10)),
    "mobilenet_v2": (image((1, 3, 32, 32)), _model("MobileNetV2Config", "MobileNetV2ForImageClassification",
                                                   image_size=32, depth_multiplier=0.25, num_labels=10)),
    "efficientnet": (image((1, 3, 32, 32)), _model("EfficientNetConfig", "EfficientNetForImageClassification",
                                                   image_size=32, width_coefficient=0.25, depth_coefficient=0.25,
                                                   hidden_dim=320, num_labels=10)),
    "regnet": (image((1, 3, 32, 32)), _model("RegNetConfig", "RegNetForImageClassification", embedding_size=16,
                                             hidden_sizes=[16, 32], depths=[1, 1], groups_width=8, num_labels=10)),
    "segformer": (image((1, 3, 32, 32)), _model("SegformerConfig", "SegformerForSemanticSegmentation",
                                                num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                                hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                                num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=5)),
    "yolos": (image((1, 3, 32, 32)), _model("YolosConfig", "YolosForObjectDetection", ("logits", "pred_boxes"),
                                            hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                            intermediate_size=64, image_size=[32, 32], patch_size=8,
                                            num_detection_tokens=5, num_labels=4)),
    "mobilevit": (image((1, 3, 32, 32)), _model("MobileViTConfig", "MobileViTModel", ("last_hidden_state",),
                                                image_size=32,
                                                patch_size=2, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16,
                                                16, 24, 32, 64], num_attention_heads=2, num_labels=10)),
}
for _name, (_inputs, _build) in VISION.items():
    register(_name, "vision", _inputs, NEEDS)(_build)


def _clip_inputs(rng):
    return {**tokens(96, seq=8, pad=2)(rng), **image((2, 3, 32, 32))(rng)}


register("clip", "vision-text", _clip_inputs, NEEDS)(_model(
    "CLIPConfig", "CLIPModel", ("logits_per_image",),
    text_config=dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, max_position_embeddings=16, eos_token_id=2),
    vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       image_size=32, patch_size=8), projection_dim=16))

SPEECH = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
              conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=4, do_stable_layer_norm=False, feat_extract_norm="group")
for _name, _cfg, _cls in [("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model"), ("hubert", "HubertConfig", "HubertModel")]:
    register(_name, "speech encoder", audio((1, 1600)), NEEDS)(
        _model(_cfg, _cls, ("last_hidden_state",), **SPEECH))
register("wav2vec2_ctc", "speech encoder", audio((1, 1600)), NEEDS)(
    _model("Wav2Vec2Config", "Wav2Vec2ForCTC", ("logits",), **{**SPEECH, "do_stable_layer_norm": True,
                                                               "feat_extract_norm": "layer", "vocab_size": 32}))
_ = np  # numpy is the feeds' type

"""Encoder-decoder transformers (text and speech) and decoder steps over a KV cache given as inputs."""

from __future__ import annotations

import numpy as np

from .build import export, hf_config, hf_export
from .registry import register, tokens

V = 96
NEEDS = ("torch", "transformers")
BART_LIKE = dict(vocab_size=V, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)


def _text2text(rng):
    feeds = tokens(V, seq=12, pad=3)(rng)
    feeds["decoder_input_ids"] = rng.integers(3, V, (1, 6), dtype=np.int64)
    return feeds


def _seq2seq(config_name: str, model_name: str, **cfg):
    def build(feeds):
        import transformers as T

        model = getattr(T, model_name)(hf_config(getattr(T, config_name), **cfg))
        return hf_export(model, feeds, ["logits"])

    return build


register("t5", "encoder-decoder", _text2text, NEEDS)(
    _seq2seq("T5Config", "T5ForConditionalGeneration", vocab_size=V, d_model=32, d_kv=16, d_ff=64, num_layers=1,
             num_decoder_layers=1, num_heads=2, relative_attention_num_buckets=8, decoder_start_token_id=0))
register("bart", "encoder-decoder", _text2text, NEEDS)(
    _seq2seq("BartConfig", "BartForConditionalGeneration", **BART_LIKE))
register("marian", "encoder-decoder", _text2text, NEEDS)(
    _seq2seq("MarianConfig", "MarianMTModel", **{**BART_LIKE, "decoder_vocab_size": V}))


def _speech(n_mel: int, frames: int, feature_layout: str):
    def make(rng):
        shape = (1, n_mel, frames) if feature_layout == "mel_first" else (1, frames, n_mel)
        # log-mel features: roughly standardized, as the feature extractors leave them
        feeds = {"input_features": rng.standard_normal(shape).astype(np.float32)}
        feeds["decoder_input_ids"] = rng.integers(3, V, (1, 5), dtype=np.int64)
        # a mask, not none: without one the causal mask is built through aten::diff, which does not export
        feeds["decoder_attention_mask"] = np.ones((1, 5), dtype=np.int64)
        return feeds

    return make


register("whisper", "speech encoder-decoder", _speech(16, 32, "mel_first"), NEEDS)(
    _seq2seq("WhisperConfig", "WhisperForConditionalGeneration", vocab_size=V, num_mel_bins=16, d_model=32,
             encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=16, max_target_positions=32,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
             suppress_tokens=None, begin_suppress_tokens=None))
register("speech2text", "speech encoder-decoder", _speech(16, 40, "time_first"), NEEDS)(
    _seq2seq("Speech2TextConfig", "Speech2TextForConditionalGeneration", vocab_size=V, d_model=32,
             encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=64, decoder_ffn_dim=64, max_source_positions=64, max_target_positions=32,
             input_feat_per_channel=16, input_channels=1, conv_channels=32, num_conv_layers=2,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2))

# a decoder step: one new token attending to a cache of PAST earlier positions (the KV cache as inputs)
PAST, LAYERS, KV_HEADS, HEAD_DIM = 7, 2, 2, 8


def _step(rng):
    feeds = {"input_ids": rng.integers(3, V, (1, 1), dtype=np.int64),
             "attention_mask": np.ones((1, PAST + 1), dtype=np.int64)}
    for i in range(LAYERS):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{i}"] = (rng.standard_normal((1, KV_HEADS, PAST, HEAD_DIM)) * 0.5).astype(np.float32)
    return feeds


def _kv_step(config_name: str, model_name: str, **cfg):
    def build(feeds):
        import torch
        import transformers as T

        model = getattr(T, model_name)(hf_config(getattr(T, config_name), **cfg))

        class Step(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, ids, mask, *past):
                cache = T.DynamicCache()
                for i in range(LAYERS):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                out = self.m(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
                present = []
                for i in range(LAYERS):
                    layer = out.past_key_values.layers[i]
                    present += [layer.keys, layer.values]
                return (out.logits, *present)

        outs = ["logits"] + [f"present_{k}_{i}" for i in range(LAYERS) for k in ("key", "value")]
        return export(Step(), feeds, outs)

    return build


register("llama_kv_step", "decoder kv-cache", _step, NEEDS)(
    _kv_step("LlamaConfig", "LlamaForCausalLM", vocab_size=V, hidden_size=32, num_hidden_layers=LAYERS,
             num_attention_heads=4, num_key_value_heads=KV_HEADS, intermediate_size=64, max_position_embeddings=64))
register("gpt2_kv_step", "decoder kv-cache", _step, NEEDS)(
    _kv_step("GPT2Config", "GPT2LMHeadModel", vocab_size=V, n_embd=16, n_layer=LAYERS, n_head=KV_HEADS,
             n_positions=64, bos_token_id=1, eos_token_id=2))

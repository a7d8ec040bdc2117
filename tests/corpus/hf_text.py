"""Transformer encoders and decoder-only language models from transformers, random small configs."""

from __future__ import annotations

from .build import hf_config, hf_export
from .registry import register, tokens

V = 96  # vocabulary: small, so embeddings stay small; ids are drawn from [3, V)
NEEDS = ("torch", "transformers")
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64, vocab_size=V)


def _encoder(config_name: str, model_name: str, **cfg):
    def build(feeds):
        import transformers as T

        model = getattr(T, model_name)(hf_config(getattr(T, config_name), **cfg))
        return hf_export(model, feeds, ["last_hidden_state"])

    return build


def _causal(config_name: str, model_name: str = "", **cfg):
    def build(feeds):
        import transformers as T

        cls = getattr(T, model_name or config_name.replace("Config", "ForCausalLM"))
        return hf_export(cls(hf_config(getattr(T, config_name), **cfg)), feeds, ["logits"])

    return build


ENCODERS = {
    "bert": _encoder("BertConfig", "BertModel", **SMALL),
    "roberta": _encoder("RobertaConfig", "RobertaModel", **SMALL, pad_token_id=1),
    "distilbert": _encoder("DistilBertConfig", "DistilBertModel", vocab_size=V, dim=32, n_layers=2, n_heads=2,
                           hidden_dim=64, max_position_embeddings=64),
    "albert": _encoder("AlbertConfig", "AlbertModel", **SMALL, embedding_size=16),
    "deberta_v2": _encoder("DebertaV2Config", "DebertaV2Model", **SMALL, relative_attention=True,
                           position_buckets=8, pos_att_type=["p2c", "c2p"]),
    "electra": _encoder("ElectraConfig", "ElectraModel", **SMALL, embedding_size=16),
}
for _name, _build in ENCODERS.items():
    register(_name, "encoder", tokens(V), NEEDS)(_build)

LLAMA_LIKE = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, max_position_embeddings=64)
DECODERS = {
    "gpt2": _causal("GPT2Config", "GPT2LMHeadModel", vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                    bos_token_id=1, eos_token_id=2),
    "gpt_neo": _causal("GPTNeoConfig", vocab_size=V, hidden_size=32, num_layers=2, num_heads=2,
                       attention_types=[[["global", "local"], 1]], window_size=8, max_position_embeddings=64,
                       bos_token_id=1, eos_token_id=2),
    "opt": _causal("OPTConfig", vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=64, pad_token_id=1, bos_token_id=2,
                   eos_token_id=2),
    "llama": _causal("LlamaConfig", **LLAMA_LIKE),
    "mistral": _causal("MistralConfig", **LLAMA_LIKE, sliding_window=8),
    "qwen2": _causal("Qwen2Config", **LLAMA_LIKE),
    "phi": _causal("PhiConfig", **LLAMA_LIKE, partial_rotary_factor=0.5),
    "falcon": _causal("FalconConfig", vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      new_decoder_architecture=False, multi_query=True, alibi=False, bos_token_id=1, eos_token_id=2),
    "bloom": _causal("BloomConfig", vocab_size=V, hidden_size=32, n_layer=2, n_head=4, bos_token_id=1,
                     eos_token_id=2, pad_token_id=3),
}
for _name, _build in DECODERS.items():
    register(_name, "decoder", tokens(V), NEEDS)(_build)

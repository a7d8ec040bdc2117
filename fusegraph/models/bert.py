"""BERT encoder (+ pooler) written the way a HuggingFace transformers export looks at opset 17.

Embeddings are Gathers (positions Sliced from a constant position_ids buffer up to Shape(input_ids)[1]),
attention is MatMul/Reshape/Transpose with the additive mask built from Unsqueeze/Cast/Sub/Mul, GELU is
the exact erf formula, and LayerNormalization is the opset-17 op. Reshapes use 0/-1 targets so any
batch and sequence length run through the same model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from ._builder import GraphBuilder

# Older transformers used -10000 for masked logits; unlike finfo(float32).min it survives fp16 casts.
_MASK_VALUE = -10000.0


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_position: int = 512
    type_vocab_size: int = 2


BERT_BASE = BertConfig()
BERT_SMALL = BertConfig(vocab_size=1024, hidden=128, layers=2, heads=2, intermediate=512, max_position=512)


def _embeddings(g: GraphBuilder, cfg: BertConfig, ids: str, types: str) -> str:
    h = cfg.hidden
    word = g.normal([cfg.vocab_size, h], 0.02, "embeddings.word_embeddings.weight")
    pos = g.normal([cfg.max_position, h], 0.02, "embeddings.position_embeddings.weight")
    typ = g.normal([cfg.type_vocab_size, h], 0.02, "embeddings.token_type_embeddings.weight")
    x = g.node("Gather", [word, ids], name="embeddings.word_embeddings.Gather", axis=0)
    t = g.node("Gather", [typ, types], name="embeddings.token_type_embeddings.Gather", axis=0)
    x = g.node("Add", [x, t])
    # position_ids = self.position_ids[:, :seq_length] -- a registered buffer sliced by the live length
    buffer = g.initializer(np.arange(cfg.max_position, dtype=np.int64)[None, :], "embeddings.position_ids")
    seq = g.node("Gather", [g.node("Shape", [ids]), g.const(1, np.int64)], axis=0)
    seq = g.node("Unsqueeze", [seq, g.const([0], np.int64)])
    pos_ids = g.node("Slice", [buffer, g.const([0], np.int64), seq, g.const([1], np.int64)])
    x = g.node("Add", [x, g.node("Gather", [pos, pos_ids], name="embeddings.position_embeddings.Gather")])
    return g.layer_norm(x, h, "embeddings.LayerNorm")


def _mask_bias(g: GraphBuilder, mask: str) -> str:
    """attention_mask [b, s] -> additive bias [b, 1, 1, s]: (1 - mask) * -10000."""
    m = g.node("Unsqueeze", [mask, g.const([1, 2], np.int64)])
    m = g.node("Cast", [m], to=TensorProto.FLOAT)
    m = g.node("Sub", [g.const(1.0), m])
    return g.node("Mul", [m, g.const(_MASK_VALUE)])


def _attention(g: GraphBuilder, cfg: BertConfig, x: str, bias: str, p: str) -> str:
    h, nh = cfg.hidden, cfg.heads
    dh = h // nh
    heads_shape = g.const([0, 0, nh, dh], np.int64)

    def project(kind: str, perm: list[int]) -> str:
        y = g.linear(x, h, h, f"{p}.attention.self.{kind}")
        return g.node("Transpose", [g.node("Reshape", [y, heads_shape])], perm=perm)

    q = project("query", [0, 2, 1, 3])  # [b, nh, s, dh]
    k = project("key", [0, 2, 3, 1])  # [b, nh, dh, s]: transpose(-1, -2) folded into the permutation
    v = project("value", [0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [q, k]), g.const(math.sqrt(dh))])
    probs = g.node("Softmax", [g.node("Add", [scores, bias])], axis=-1)
    ctx = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const([0, 0, h], np.int64)])
    out = g.linear(ctx, h, h, f"{p}.attention.output.dense")
    return g.layer_norm(g.node("Add", [out, x]), h, f"{p}.attention.output.LayerNorm")


def _gelu(g: GraphBuilder, x: str) -> str:
    """Exact GELU as exported from nn.GELU(): x * 0.5 * (1 + erf(x / sqrt(2)))."""
    e = g.node("Erf", [g.node("Div", [x, g.const(math.sqrt(2.0))])])
    y = g.node("Mul", [x, g.node("Add", [e, g.const(1.0)])])
    return g.node("Mul", [y, g.const(0.5)])


def _layer(g: GraphBuilder, cfg: BertConfig, x: str, bias: str, i: int) -> str:
    p = f"encoder.layer.{i}"
    x = _attention(g, cfg, x, bias, p)
    y = _gelu(g, g.linear(x, cfg.hidden, cfg.intermediate, f"{p}.intermediate.dense"))
    y = g.linear(y, cfg.intermediate, cfg.hidden, f"{p}.output.dense")
    return g.layer_norm(g.node("Add", [y, x]), cfg.hidden, f"{p}.output.LayerNorm")


def build_bert(cfg: BertConfig = BERT_BASE, seed: int = 0, name: str = "bert_base") -> onnx.ModelProto:
    g = GraphBuilder(name, seed)
    dims = ["batch", "sequence"]
    ids = g.input("input_ids", TensorProto.INT64, dims)
    mask = g.input("attention_mask", TensorProto.INT64, dims)
    types = g.input("token_type_ids", TensorProto.INT64, dims)

    x = _embeddings(g, cfg, ids, types)
    bias = _mask_bias(g, mask)
    for i in range(cfg.layers):
        x = _layer(g, cfg, x, bias, i)
    x = g.output(x, "last_hidden_state", TensorProto.FLOAT, [*dims, cfg.hidden])

    # pooler: dense + tanh on the [CLS] token, exported as Gather(axis=1) + Gemm
    first = g.node("Gather", [x, g.const(0, np.int64)], axis=1)
    bound = 1.0 / math.sqrt(cfg.hidden)
    w = g.uniform([cfg.hidden, cfg.hidden], -bound, bound, "pooler.dense.weight")
    b = g.uniform([cfg.hidden], -bound, bound, "pooler.dense.bias")
    pooled = g.node("Tanh", [g.node("Gemm", [first, w, b], name="pooler.dense", transB=1)])
    g.output(pooled, "pooler_output", TensorProto.FLOAT, ["batch", cfg.hidden])
    return g.build(f"{name}: BERT encoder + pooler, {cfg}, random weights")


def sample_bert(
    batch: int, rng: np.random.Generator, seq: int = 128, cfg: BertConfig = BERT_BASE, **_
) -> dict[str, np.ndarray]:
    """[CLS] tokens [SEP] [PAD]...: row 0 is full length, later rows are padded to random lengths."""
    lengths = [seq] + [int(rng.integers(max(seq // 2, 2), seq + 1)) for _ in range(batch - 1)]
    ids = np.zeros((batch, seq), np.int64)  # 0 is [PAD]
    mask = np.zeros((batch, seq), np.int64)
    lo = min(1000, cfg.vocab_size // 2)  # ordinary word pieces sit above the special tokens
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(lo, cfg.vocab_size, n)
        ids[row, 0], ids[row, n - 1] = min(101, lo - 1), min(102, lo - 1)  # [CLS], [SEP]
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros((batch, seq), np.int64)}

"""A differential corpus: models of many architectures nobody tuned fusegraph to, built offline
from small random configs (transformers, torch modules, onnx.helper), cached on disk, and run on
each target against ONNX Runtime (tests/test_corpus.py, benchmarks/corpus_table.py)."""

from __future__ import annotations

from . import control, hf_seq2seq, hf_text, hf_vision, quant, torch_cnn, torch_graph, torch_ocr, torch_signal  # noqa: F401
from .registry import ENTRIES, Entry

quant.register_all()  # after the families: the int8 entries quantize their models

__all__ = ["ENTRIES", "Entry"]

"""Converters by (domain, op type), each valid from an opset version on."""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclasses.dataclass(frozen=True)
class ConverterEntry:
    domain: str
    op_type: str
    since: int
    fn: Callable


_CONVERTERS: dict[tuple[str, str], list[ConverterEntry]] = {}


def _norm(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def converter(*op_types: str, domain: str = "", since: int = 1) -> Callable[[Callable], Callable]:
    """Register `fn(ctx, node, args)` for these op types from opset `since` of `domain` on."""

    def deco(fn: Callable) -> Callable:
        for op_type in op_types:
            entries = _CONVERTERS.setdefault((_norm(domain), op_type), [])
            if any(e.since == since for e in entries):
                raise ValueError(f"two converters for {domain or 'ai.onnx'}.{op_type} since opset {since}")
            bisect.insort(entries, ConverterEntry(_norm(domain), op_type, since, fn), key=lambda e: e.since)
        return fn

    return deco


def lookup(domain: str, op_type: str, opset: int) -> Callable | None:
    entries = _CONVERTERS.get((_norm(domain), op_type))
    if not entries:
        return None
    best = None
    for e in entries:
        if e.since <= opset:
            best = e
    return best.fn if best else None


def supported_ops() -> list[ConverterEntry]:
    return sorted((e for es in _CONVERTERS.values() for e in es), key=lambda e: (e.domain, e.op_type, e.since))

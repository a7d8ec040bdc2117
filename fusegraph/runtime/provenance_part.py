"""The .fgx `provenance` part: which ONNX nodes each instruction computes and which ONNX tensor it
equals (ir/provenance.py), so profiles, traces and `verify --per-layer` of a loaded program speak the
model's names as they do right after compiling.

JSON, UTF-8: `{"modules": {NAME: [[INDEX, TENSOR or null, [[NODE, OP_TYPE], ...]], ...]}}`, INDEX
being the instruction's position in its module as the IR part lists it; only instructions that have
a tensor or nodes appear. The part is optional (files written before it load without names), and a
reader treats it as hostile input: every entry is checked before it is applied.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..ir.program import Program
from ..ir.provenance import OnnxNode

PART = "provenance"
KIND = "meta"


def dump(program: Program) -> bytes:
    modules: dict[str, list[Any]] = {}
    for name, module in program.modules.items():
        rows = [[k, ins.tensor, [list(n) for n in ins.origin]]
                for k, ins in enumerate(module.instructions) if ins.tensor or ins.origin]
        if rows:
            modules[name] = rows
    return json.dumps({"modules": modules}, separators=(",", ":")).encode("utf-8")


def apply(program: Program, data: bytes | memoryview, error: Callable[[str], Exception]) -> None:
    """Stamp `program` (just parsed from the same file's IR) with the part's names."""
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise error(f"its provenance part is not JSON: {e}") from None
    modules = doc.get("modules") if isinstance(doc, dict) else None
    if not isinstance(modules, dict):
        raise error("its provenance part has no 'modules' table")
    for name, rows in modules.items():
        module = program.modules.get(name)
        if module is None or not isinstance(rows, list):
            raise error(f"its provenance part names module {name!r}, which the IR does not hold")
        instructions = module.instructions
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and type(row[0]) is int
                    and 0 <= row[0] < len(instructions) and (row[1] is None or isinstance(row[1], str))
                    and isinstance(row[2], list) and all(_is_node(n) for n in row[2])):
                raise error(f"its provenance part has a bad entry in module {name!r}: {str(row)[:80]}")
            ins = instructions[row[0]]
            ins.tensor = row[1]
            ins.origin = tuple(OnnxNode(*n) for n in row[2])


def _is_node(n: Any) -> bool:
    return isinstance(n, list) and len(n) == 2 and all(isinstance(s, str) for s in n)

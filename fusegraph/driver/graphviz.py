"""A program as a Graphviz dot graph (`fusegraph read MODEL --graphviz FILE`).

One node per instruction, labelled with its op and output shape; submodules (If/Loop bodies) are
clusters, and an edge runs from every input to its user, across modules too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ir.module import Instruction, Module
    from ..ir.program import Program

_STYLE = {
    "@param": 'shape=ellipse, style=filled, fillcolor="#cfe8ff"',
    "@literal": 'shape=box, style="filled,rounded", fillcolor="#eeeeee", fontsize=9',
    "@return": 'shape=doublecircle, label="return"',
}
_DEFAULT_STYLE = 'shape=box, style=filled, fillcolor="#fff2cc"'


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _label(ins: Instruction) -> str:
    if ins.is_param:
        return f"{ins.op.param_name}\n{ins.shape}"
    return f"{ins.name}\n{ins.shape}"


def to_dot(program: Program, title: str = "fusegraph") -> str:
    ids: dict[int, str] = {}
    lines = [f"digraph {_quote(title)} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];']
    for mod in program.modules_in_order():
        _module(mod, ids, lines, indent="  " if mod is program.main else "    ")
    for mod in program.modules_in_order():
        for ins in mod:
            for k, src in enumerate(ins.inputs):
                # multi-input ops: number the edges so operand order is visible
                attr = f' [label="{k}", fontsize=8]' if len(ins.inputs) > 1 else ""
                lines.append(f"  {ids[id(src)]} -> {ids[id(ins)]}{attr};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _module(mod: Module, ids: dict[int, str], lines: list[str], indent: str) -> None:
    nested = mod.name != "main"
    if nested:
        lines.append(f"  subgraph {_quote('cluster_' + mod.name)} {{")
        lines.append(f"    label={_quote(mod.name)}; style=dashed;")
    for ins in mod:
        ids[id(ins)] = f"n{len(ids)}"
        style = _STYLE.get(ins.name, _DEFAULT_STYLE)
        label = "" if ins.name == "@return" else f", label={_quote(_label(ins))}"
        lines.append(f"{indent}{ids[id(ins)]} [{style}{label}];")
    if nested:
        lines.append("  }")

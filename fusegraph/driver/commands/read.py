"""`fusegraph read MODEL`: print the parsed program's IR text (and optionally a dot graph)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..common import add_model_options, load

HELP = "parse a model and print its IR"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    p.add_argument("--graphviz", metavar="FILE", type=Path, help="also write the program as a Graphviz dot graph")


def run(args: argparse.Namespace) -> int:
    loaded = load(args)
    # plain write, not rich: IR text has brackets that rich would read as markup
    sys.stdout.write(str(loaded.program))
    if args.graphviz is not None:
        from ..graphviz import to_dot
        from ..report import note

        args.graphviz.write_text(to_dot(loaded.program, title=Path(args.model).stem))
        note(f"wrote {args.graphviz}")
    return 0

"""`fusegraph compile MODEL -o model.fgx`: compile once, save the program; every command then takes the file."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..common import add_model_options, add_target_option, compile_options, load_on_target
from ..quantize_args import add_quantize_options, preparer

HELP = "compile a model for a target and save it as an .fgx file that loads without recompiling"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    add_target_option(p)
    p.add_argument("-o", "--output", metavar="FILE", type=Path, required=True, help="the .fgx file to write")
    p.add_argument("--sign-key", metavar="KEY",
                   help="sign the file with this HMAC key (default: $FUSEGRAPH_SIGN_KEY if set; the variable "
                        "keeps the key out of the shell history and the process list)")
    add_quantize_options(p)


def run(args: argparse.Namespace) -> int:
    from ... import save
    from ...runtime.fgx_format import Container
    from ..models import ZOO_MODEL_KEY
    from ..report import note, status

    loaded = load_on_target(args, compile_options(args), prepare=preparer(args))
    if loaded.source.builtin:  # so that commands run on the file can still make realistic inputs
        loaded.program.metadata[ZOO_MODEL_KEY] = loaded.source.builtin
    with status(f"writing {args.output}"):
        save(loaded.program, args.output, sign_key=args.sign_key)
    c = Container.open(args.output)  # report what was written, as the file says it
    weights = c.manifest["weights"]
    note(f"wrote {args.output}: {os.path.getsize(args.output) / 1e6:.1f} MB, target {c.manifest['target']}, "
         f"{sum(len(m) for m in loaded.program.modules.values())} instructions, {weights['blobs']} weight "
         f"blobs ({weights['bytes'] / 1e6:.1f} MB), {'signed' if c.signed else 'unsigned'}; "
         f"parse {loaded.parse_s:.2f} s, compile {loaded.compile_s:.2f} s")
    return 0

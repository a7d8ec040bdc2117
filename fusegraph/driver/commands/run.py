"""`fusegraph run MODEL`: run once and summarize every output (optionally saving them as .npy)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..common import add_input_options, add_model_options, add_target_option, compile_options, load_on_target

HELP = "run a model once and print each output's shape, dtype and statistics"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    add_target_option(p)
    add_input_options(p)
    p.add_argument("--output", metavar="DIR", type=Path, help="save every output as DIR/<name>.npy")
    p.add_argument("--save-inputs", metavar="DIR", type=Path,
                   help="save the inputs it ran on as DIR/<name>.npy, to replay the run with --input NAME=FILE")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from ..report import dims_str, fmt, note, show, summary, table

    loaded = load_on_target(args, compile_options(args))
    feeds = loaded.inputs(args.fill, args.seed)
    if args.save_inputs is not None:
        for name, path in zip(feeds, save_outputs(args.save_inputs, list(feeds), list(feeds.values())), strict=True):
            note(f"wrote {path} (--input {name}={path})")
    outputs = loaded.run(feeds)
    names = loaded.program.output_names
    rows = []
    for name, out in zip(names, outputs, strict=True):
        out = np.asarray(out)
        s = summary(out)
        rows.append((name, dims_str(out.shape), str(out.dtype), fmt(s["min"]), fmt(s["max"]),
                     fmt(s["mean"]), fmt(s["std"]), s["nan"]))
    numeric = ("min", "max", "mean", "std", "NaN")
    show(table(f"{args.model} on {loaded.target}", ["output", "shape", "dtype", *numeric], rows, right=numeric))
    if args.output is not None:
        for path in save_outputs(args.output, names, outputs):
            note(f"wrote {path}")
    return 0


def save_outputs(directory: Path, names: list[str], outputs: list) -> list[Path]:
    """Each array as DIR/<name>.npy (the name made portable and unique); the paths, in order."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    paths, used = [], set()
    for k, (name, out) in enumerate(zip(names, outputs, strict=True)):
        # ONNX names may hold '/', ':' and the like; keep the file name portable and unique
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or f"output{k}"
        if stem in used:
            stem = f"{stem}_{k}"
        used.add(stem)
        path = directory / f"{stem}.npy"
        np.save(path, np.asarray(out), allow_pickle=False)
        paths.append(path)
    return paths

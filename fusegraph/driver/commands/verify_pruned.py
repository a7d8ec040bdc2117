"""`fusegraph verify MODEL --prune-2-4 [--held-out DIR] [--held-out-samples N]`: the program with its
product weights pruned to 2:4 (passes/prune_2_4.py) against the dense one, on held-out inputs, in
the terms of the model's task, as `verify --int8` (driver/accuracy_report.py). The inputs are the
--held-out folder's (laid out as --int8's calibration folder), or without one N made from --seed
(a built-in model's realistic samples, else random values). Both programs run on --target.

First a table of the products: each weight's shape, and whether it was pruned, found 2:4 already
or left dense (and why). An output passes when its relative L2 error is at most --quant-tol.
"""

from __future__ import annotations

import argparse

DEFAULT_GENERATED_SAMPLES = 4


def run(args: argparse.Namespace) -> int:
    from ...errors import InputError
    from ...passes.prune_2_4 import pruned_products, summary
    from ...quantize.calibration import iter_calibration
    from ..accuracy_report import finish, measure
    from ..common import compile_options, load_on_target
    from ..quantize_args import pruner
    from ..report import fmt, show, table

    if args.int8 or args.fp8:
        raise InputError(f"--prune-2-4 and --{'int8' if args.int8 else 'fp8'}: verify measures one change "
                         f"against the float program at a time")
    prune = pruner(args)
    dense = load_on_target(args, compile_options(args))
    pruned = load_on_target(args, compile_options(args), prepare=prune)
    products = pruned_products(pruned.program) or []
    show(table(f"{args.model}: product weights", ["product", "op", "weight", "2:4", "weight rel L2"],
               [(r.name, r.op_type, "x".join(map(str, r.shape)), r.status,
                 fmt(r.weight_rel_l2, 3) if r.status == "pruned" else "") for r in products],
               right=("weight rel L2",), caption="weight rel L2: ||w - pruned|| / ||w||"))
    if args.held_out is not None:
        source = str(args.held_out)
        feeds = list(iter_calibration(dense.program, args.held_out, args.held_out_samples))
    else:
        n = args.held_out_samples or DEFAULT_GENERATED_SAMPLES
        source = f"{n} inputs made from seed {args.seed}"
        feeds = [dense.inputs(args.fill, args.seed + k) for k in range(n)]
    scheme = summary(products)
    results = measure(args, dense, pruned, feeds, "2:4-pruned vs dense", scheme)
    return finish(args, results, {
        "target": pruned.target, "pruning": "2:4", "scheme": scheme, "held_out": source, "samples": len(feeds),
        "products": [r.as_dict() for r in products],
    })

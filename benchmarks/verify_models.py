"""`fusegraph verify` on every built-in model and every real model the tests use, per target.

    python benchmarks/verify_models.py [--targets ref,cpu] [--models NAME,...] [--fp16]

Real models come from PyPI packages (see README); MiniLM is exported with torch when available.
Prints one row per (model, target) with the worst max-abs error and relative L2 error over the
outputs and the verdict (`--fp16`: computed in float16, judged by relative L2 against the float32
reference, as `fusegraph verify --fp16` does). Writes benchmarks/results/verify_models-<targets>[-fp16]-<host>.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from tests.helpers import minilm  # noqa: E402
from tests.helpers.real_models import REAL_MODELS  # noqa: E402


def model_specs(tmp: Path) -> list[tuple[str, str, list[str]]]:
    """(label, model argument, extra CLI options)."""
    from fusegraph.models import list_models

    specs = [(name, name, []) for name in list_models()]
    for rm in REAL_MODELS.values():
        path = rm.path()
        if path is None:
            continue
        opts = []
        for name, value in rm.make_inputs(np.random.default_rng(0)).items():
            f = tmp / f"{rm.name}_{name}.npy"
            np.save(f, value)
            opts += ["--input", f"{name}={f}"]
        specs.append((rm.name, str(path), opts))
    path = minilm.minilm_onnx_path()
    if path is not None:
        opts = []
        for name, value in minilm.sample_inputs(batch=1, seq=128).items():
            f = tmp / f"minilm_{name}.npy"
            np.save(f, value)
            opts += ["--input", f"{name}={f}"]
        specs.append(("minilm", str(path), opts))
    return specs


def output_errors(table: str) -> list[tuple[float, float]]:
    """(max abs err, rel L2 err) of each output row of `fusegraph verify`'s results table."""
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) >= 6 and cells[1] in ("ok", "MISMATCH", "FAIL"):
            rows.append((float(cells[2]), float(cells[5])))
        elif rows:
            break  # the table's end
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="ref,cpu")
    ap.add_argument("--models", default=None, help="only these (labels, comma-separated)")
    ap.add_argument("--fp16", action="store_true", help="compute in float16 (judged by relative L2 error)")
    a = ap.parse_args()
    wanted = set(a.models.split(",")) if a.models else None
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as d:
        for label, model, opts in model_specs(Path(d)):
            if wanted is not None and label not in wanted:
                continue
            for target in a.targets.split(","):
                cmd = [sys.executable, "-m", "fusegraph", "verify", model, "--target", target, *opts]
                r = subprocess.run(cmd + (["--fp16"] if a.fp16 else []), capture_output=True, text=True, cwd=ROOT)
                errs = output_errors(r.stdout)
                verdict = {0: "pass", 1: "MISMATCH"}.get(r.returncode, "ERROR " + r.stderr.strip()[-120:])
                failed += r.returncode != 0
                worst = max((e[0] for e in errs), default=float("nan")), max((e[1] for e in errs), default=float("nan"))
                rows.append({"model": label, "target": target, "max_abs_err": worst[0], "rel_l2_err": worst[1],
                             "verdict": verdict})
                print(f"{label:<16} {target:<4} max abs err {worst[0]:<10.3g} rel L2 {worst[1]:<10.3g} {verdict}",
                      flush=True)
    print(f"{len(rows) - failed} of {len(rows)} verified")
    name = "verify_models-" + a.targets.replace(",", "-") + ("-fp16" if a.fp16 else "")
    print("wrote", write_results(name, {"fp16": a.fp16, "rows": rows}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""`fusegraph verify` on every built-in model and every real model the tests use, per target.

    python benchmarks/verify_models.py [--targets ref,cpu]

Real models come from PyPI packages (see README); MiniLM is exported with torch when available.
Prints one row per (model, target) with the worst max-abs error over the outputs and the verdict.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="ref,cpu")
    a = ap.parse_args()
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as d:
        for label, model, opts in model_specs(Path(d)):
            for target in a.targets.split(","):
                r = subprocess.run([sys.executable, "-m", "fusegraph", "verify", model, "--target", target, *opts],
                                   capture_output=True, text=True, cwd=ROOT)
                errs = [float(x) for x in re.findall(r"│ \S+\s+│ (?:ok|FAIL)\s+│\s+([0-9.e+-]+)", r.stdout)]
                verdict = {0: "pass", 1: "MISMATCH"}.get(r.returncode, "ERROR " + r.stderr.strip()[-120:])
                failed += r.returncode != 0
                rows.append((label, target, max(errs) if errs else float("nan"), verdict))
                print(f"{label:<16} {target:<4} max abs err {rows[-1][2]:<10.3g} {verdict}", flush=True)
    print(f"{len(rows) - failed} of {len(rows)} verified")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

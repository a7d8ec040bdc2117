"""How long the generic pass pipeline takes, per pass, on ResNet-50 and BERT-base (built-in zoo).

    python benchmarks/compile_time.py [--models resnet50,bert_base] [--repeat 3]

Prints parse time, pipeline time and the slowest passes; writes benchmarks/results/compile_time-<host>.json.
Goal (issue 4): pipeline <= 1 s for ResNet-50 and <= 2 s for BERT-base on the 2-core machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from fusegraph import models  # noqa: E402
from fusegraph.passes import PassManager, generic_pipeline  # noqa: E402


def measure(name: str, repeat: int) -> dict:
    proto = models.get_model(name)
    parse_s, pipe_s, per_pass = [], [], {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = fusegraph.parse_onnx(proto)
        t1 = time.perf_counter()
        pm = PassManager(verify="cheap")
        pm.run(p, generic_pipeline())
        pipe_s.append(time.perf_counter() - t1)
        parse_s.append(t1 - t0)
        this_run: dict[str, float] = {}
        for rec in pm.records:  # a pass inside a fixpoint runs several times: add its runs up
            this_run[rec.name] = this_run.get(rec.name, 0.0) + rec.seconds
        for pass_name, seconds in this_run.items():
            per_pass.setdefault(pass_name, []).append(seconds)
    passes = {k: statistics.median(v) for k, v in per_pass.items()}
    return {"model": name, "parse_s": statistics.median(parse_s), "pipeline_s": statistics.median(pipe_s),
            "instructions": len(p.main), "passes_s": dict(sorted(passes.items(), key=lambda kv: -kv[1]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rows = [measure(m, a.repeat) for m in a.models.split(",")]
    print(f"{'model':<12} {'parse s':>8} {'pipeline s':>11}  slowest passes")
    for r in rows:
        slow = ", ".join(f"{k} {v * 1e3:.0f}ms" for k, v in list(r["passes_s"].items())[:3])
        print(f"{r['model']:<12} {r['parse_s']:8.3f} {r['pipeline_s']:11.3f}  {slow}")
    print("wrote", write_results("compile_time", {"results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long the generic pass pipeline takes, per pass, on ResNet-50 and BERT-base (built-in zoo).

    python benchmarks/compile_time.py [--models resnet50,bert_base] [--repeat 3]
    python benchmarks/compile_time.py --gpu-fp16 --models swin_t_32.onnx,...   # the gpu target's host side

Prints parse time, pipeline time and the slowest passes; writes benchmarks/results/compile_time-<host>.json.
Goal (issue 4): pipeline <= 1 s for ResNet-50 and <= 2 s for BERT-base on the 2-core machine.
A model is a zoo name or an ONNX file. `--gpu-fp16` times what the gpu target does on the host before
any kernel exists (issue 23's cold compile): parse, the fp16 conversion, the gpu target's passes and its
plan (no GPU needed; torch is not imported).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fusegraph  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from fusegraph import models  # noqa: E402
from fusegraph.passes import PassManager, generic_pipeline  # noqa: E402


def measure(name: str, repeat: int, gpu_fp16: bool = False) -> dict:
    proto = Path(name).read_bytes() if name.endswith(".onnx") else models.get_model(name)
    parse_s, pipe_s, per_pass, fp16_s, plan_s = [], [], {}, [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = fusegraph.parse_onnx(proto)
        t1 = time.perf_counter()
        parse_s.append(t1 - t0)
        pipeline = generic_pipeline()
        if gpu_fp16:
            from fusegraph.targets.gpu import GpuTarget

            fusegraph.quantize_fp16(p)
            pipeline = GpuTarget(device="cpu").passes(fusegraph.CompileOptions(fp16=True))
            fp16_s.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
        pm = PassManager(verify="cheap")
        pm.run(p, pipeline)
        pipe_s.append(time.perf_counter() - t1)
        if gpu_fp16:
            from fusegraph.targets.gpu.lowering import storage_mode
            from fusegraph.targets.gpu.plan import make_plan

            t2 = time.perf_counter()
            make_plan(p.main, storage_mode, stage_inputs=True)
            plan_s.append(time.perf_counter() - t2)
        this_run: dict[str, float] = {}
        for rec in pm.records:  # a pass inside a fixpoint runs several times: add its runs up
            this_run[rec.name] = this_run.get(rec.name, 0.0) + rec.seconds
        for pass_name, seconds in this_run.items():
            per_pass.setdefault(pass_name, []).append(seconds)
    passes = {k: statistics.median(v) for k, v in per_pass.items()}
    row = {"model": Path(name).stem if name.endswith(".onnx") else name, "parse_s": statistics.median(parse_s),
           "pipeline_s": statistics.median(pipe_s), "instructions": len(p.main),
           "passes_s": dict(sorted(passes.items(), key=lambda kv: -kv[1]))}
    if gpu_fp16:
        row.update(fp16_s=statistics.median(fp16_s), plan_s=statistics.median(plan_s))
        row["host_s"] = row["parse_s"] + row["fp16_s"] + row["pipeline_s"] + row["plan_s"]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gpu-fp16", action="store_true", help="the gpu target's host side in fp16 (see above)")
    ap.add_argument("--tag", default="", help="appended to the results file's name")
    a = ap.parse_args()
    rows = [measure(m, a.repeat, a.gpu_fp16) for m in a.models.split(",")]
    print(f"{'model':<18} {'parse s':>8} {'fp16 s':>7} {'pipeline s':>11} {'plan s':>7}  slowest passes")
    for r in rows:
        slow = ", ".join(f"{k[:30]} {v * 1e3:.0f}ms" for k, v in list(r["passes_s"].items())[:3])
        fp16, plan = (f"{r[k]:7.3f}" if k in r else f"{'-':>7}" for k in ("fp16_s", "plan_s"))
        print(f"{r['model']:<18} {r['parse_s']:8.3f} {fp16} {r['pipeline_s']:11.3f} {plan}  {slow}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip()
    print("wrote", write_results("compile_time" + ("-gpu-fp16" if a.gpu_fp16 else "") + a.tag,
                                 {"commit": commit, "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

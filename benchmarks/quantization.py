"""int8 on the cpu: fusegraph int8 vs fusegraph fp32 vs ONNX Runtime int8, each engine in its own process.

    python benchmarks/quantization.py [--models resnet50,yolov8n,ppocr_det,bert_base] [--batches 1,8]
                                      [--runs 20] [--warmup 5] [--rounds R] [--threads N] [--calibration 8]
                                      [--reduce-range auto|on|off] [--ppocr-size 736] [--no-write] [--verbose]

Each model is quantized once with ONNX Runtime, as its docs prescribe: `quant_pre_process` (shape
inference, BatchNorm folded), then `quantize_static` (QDQ, per-channel, its defaults: int8 activations
and weights, MinMax) over `--calibration` inputs of the model's own generator (rendered text pages for PP-OCR det), or
`quantize_dynamic` for BERT-base (MatMulInteger). fusegraph fp32 runs the pre-processed fp32 model,
fusegraph int8 and ORT int8 run the same quantized file. Every (engine, model, batch) runs alone in a
fresh process (no second runtime's threads or caches around): median / p90 latency, throughput and
the process's peak RSS (compile included); with `--rounds R` each engine runs R processes in turns and
the least disturbed (lowest median) counts, for a loaded machine, and `cpu_ms` (the process's CPU time
per run, median: at --threads 1 the compute alone, without the time other processes held the core)
is reported beside the wall times; the outputs come back to compare: rel L2 of each int8
engine against fusegraph fp32 and between the two int8 engines, top-1 agreement for ResNet-50.

`--reduce-range auto` (default) quantizes weights to 7 bits where the CPU has no VNNI: there both
ORT (MLAS) and oneDNN add u8 x s8 products pairwise in saturating int16, so with 8-bit weights ORT's
own int8 answer is not its model's, and fusegraph keeps such layers in float (exact or not at all:
fusegraph/targets/cpu/onednn/quant.py). Writes benchmarks/results/quantization-<host>.json.
Models: the zoo's ResNet-50 (224²) and YOLOv8n (640²), PP-OCRv4 det from rapidocr-onnxruntime
(`--ppocr-size`²; skipped when not installed), the zoo's BERT-base (seq 128).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import ort_session, write_results  # noqa: E402
from benchmarks._common import run_child as child_json  # noqa: E402

MODELS = ("resnet50", "yolov8n", "ppocr_det", "bert_base")
ENGINES = ("fusegraph-fp32", "fusegraph-int8", "ort-int8")


# -- models and their quantized forms ---------------------------------------------------------------
def _inputs(name: str, batch: int, seed: int, ppocr_size: int) -> dict[str, np.ndarray]:
    if name == "ppocr_det":  # text pages: on noise the fp32 map is ~0 and calibration kills it (no text)
        from fusegraph.quantize.calibration_data import page_samples

        return page_samples("x", (batch, 3, ppocr_size, ppocr_size), 1, seed=seed)[0]
    from fusegraph.models import sample_inputs

    return sample_inputs(name, batch=batch, seed=seed)


def _fp32_model(name: str, path: Path) -> bool:
    """Write the fp32 model to `path`; False when it is not installed."""
    import onnx

    if name == "ppocr_det":
        from tests.helpers.real_models import REAL_MODELS

        src = REAL_MODELS["ppocr_det"].path()
        if src is None:
            return False
        model = onnx.load(str(src))
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        if opset < 13:  # per-channel DequantizeLinear (its axis) is opset 13: quantize_static needs it
            from onnx import version_converter

            model = version_converter.convert_version(model, 13)
        onnx.save(model, str(path))
        return True
    from fusegraph.models import get_model

    onnx.save(get_model(name), str(path))
    return True


def reduce_range(mode: str) -> bool:
    if mode != "auto":
        return mode == "on"
    from fusegraph.targets.cpu.onednn.quant import has_vnni

    return not has_vnni()


def quantize(name: str, workdir: Path, n_calibration: int, reduce: bool, ppocr_size: int) -> dict | None:
    """{fp32, int8: model paths, mode} for `name`, made once in `workdir`."""
    from onnxruntime import quantization as q
    from onnxruntime.quantization.shape_inference import quant_pre_process

    raw, pre, int8 = workdir / f"{name}.onnx", workdir / f"{name}.pre.onnx", workdir / f"{name}.int8.onnx"
    if not _fp32_model(name, raw):
        return None
    try:
        quant_pre_process(str(raw), str(pre))
    except Exception:  # ORT's symbolic shape inference gives up on some graphs (YOLOv8n's): ONNX's alone
        quant_pre_process(str(raw), str(pre), skip_symbolic_shape=True)
    if name == "bert_base":
        q.quantize_dynamic(str(pre), str(int8), reduce_range=reduce)
        mode = "quantize_dynamic"
    else:
        batches = iter([_inputs(name, 1, 100 + i, ppocr_size) for i in range(n_calibration)])

        class Reader(q.CalibrationDataReader):
            def get_next(self):
                return next(batches, None)

        q.quantize_static(str(pre), str(int8), Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                          reduce_range=reduce)
        mode = "quantize_static QDQ per-channel"
    return {"fp32": pre, "int8": int8, "mode": mode}


# -- one engine in its own process --------------------------------------------------------------------
def _peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM, which (unlike getrusage's ru_maxrss, which keeps
    the parent's peak across fork + exec) counts only this program's memory."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(a: argparse.Namespace) -> int:
    feeds = dict(np.load(a.feeds))
    t0 = time.perf_counter()
    if a.engine.startswith("fusegraph"):
        import fusegraph

        p = fusegraph.parse_onnx(a.model_file, map_input_dims={k: list(v.shape) for k, v in feeds.items()})
        p.compile(fusegraph.get_target("cpu"), fusegraph.CompileOptions(threads=a.threads))
        kernels = sorted({i.op.name for i in p.main if i.op.name.startswith("int8_")})
        n_int8 = sum(i.op.name.startswith("int8_") for i in p.main)

        def run():
            return p.run(feeds)
    else:
        sess = ort_session(a.model_file, a.threads)
        kernels, n_int8 = [], None

        def run():
            return sess.run(None, feeds)
    compile_s = time.perf_counter() - t0
    from fusegraph.driver.timing import measure, summary

    out = run()
    times = measure({"run": run}, a.runs, a.warmup)["run"]
    np.save(a.out_npy, np.asarray(out[0]))
    cpu = []  # CPU seconds of this process per run: unlike wall time, not counting time spent descheduled
    for _ in range(a.runs):
        c0 = time.process_time()
        run()
        cpu.append(time.process_time() - c0)
    row = {**summary(times, a.batch), "cpu_ms": float(np.median(cpu)) * 1e3, "compile_s": compile_s,
           "peak_rss_mb": _peak_rss_mb(),
           "int8_ops": n_int8, "int8_kernels": kernels}
    print(json.dumps(row))
    return 0


def run_child(engine: str, model_file: Path, feeds: Path, batch: int, a: argparse.Namespace, out: Path) -> dict:
    return child_json(__file__, ["--child", engine, "--model-file", str(model_file), "--feeds", str(feeds),
                                 "--batch", str(batch), "--runs", str(a.runs), "--warmup", str(a.warmup),
                                 "--threads", str(a.threads), "--out-npy", str(out)])


def _best_round(rounds: list[dict]) -> dict:
    """The round with the lowest median (the least disturbed by other load), with every round's median."""
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return rounds[-1]
    best = min(ok, key=lambda r: r["median_ms"])
    return {**best, "cpu_ms": min(r["cpu_ms"] for r in ok), "round_medians_ms": [r["median_ms"] for r in ok],
            "round_cpu_ms": [r["cpu_ms"] for r in ok]}


def _rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def accuracy(name: str, outs: dict[str, np.ndarray], unoptimized: np.ndarray | None = None) -> dict:
    fp32 = outs.get("fusegraph-fp32")
    acc = {}
    for e in ("fusegraph-int8", "ort-int8"):
        if e in outs and fp32 is not None:
            acc[f"{e}_vs_fp32_rel_l2"] = _rel_l2(outs[e], fp32)
            if name == "resnet50":
                acc[f"{e}_top1_agreement"] = float(np.mean(outs[e].argmax(-1) == fp32.argmax(-1)))
            if name == "ppocr_det":  # the DB map's text regions (probability > 0.3) against fp32's
                from fusegraph.quantize.accuracy import compare

                m = compare(["maps"], [[outs[e]]], [[fp32]], task="map")[0].metrics
                acc[f"{e}_region_iou"], acc[f"{e}_max_prob"] = m["region_iou"], m["max_prob"]
    if "fusegraph-int8" in outs and "ort-int8" in outs:
        acc["fusegraph-int8_vs_ort-int8_rel_l2"] = _rel_l2(outs["fusegraph-int8"], outs["ort-int8"])
        if unoptimized is not None:  # ORT against itself: the spread any two int8 evaluations may have
            acc["ort-int8_vs_ort-int8-unoptimized_rel_l2"] = _rel_l2(outs["ort-int8"], unoptimized)
            acc["fusegraph-int8_vs_ort-int8-unoptimized_rel_l2"] = _rel_l2(outs["fusegraph-int8"], unoptimized)
    return acc


def ort_unoptimized(model_file: Path, feeds: Path) -> np.ndarray:
    """ORT's answer with its graph optimizations off: the QDQ model's float definition (DequantizeLinear,
    float Conv/MatMul, QuantizeLinear) rather than its fused integer kernels. A value within float
    rounding of a quantization edge can land one step away on either path, and the step travels
    down the network, so ORT's two answers differ as much as two engines' may (not timed)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_file), so, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, dict(np.load(feeds)))[0])


def main() -> int:
    from fusegraph.driver.common import usable_cores

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="processes per engine, in turns; the best round is kept")
    ap.add_argument("--threads", type=int, default=usable_cores())
    ap.add_argument("--calibration", type=int, default=8, help="calibration inputs (random, the model's generator)")
    ap.add_argument("--reduce-range", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--ppocr-size", type=int, default=736)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--tag", default="", help="written as quantization-TAG-<host>.json (e.g. loaded)")
    ap.add_argument("--verbose", action="store_true", help="print each row's JSON as it is measured")
    # one engine's process (internal)
    ap.add_argument("--child", choices=ENGINES, dest="engine")
    ap.add_argument("--model-file")
    ap.add_argument("--feeds")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out-npy")
    a = ap.parse_args()
    if a.engine:
        return child(a)
    wanted, engines = a.models.split(","), a.engines.split(",")
    if bad := (set(wanted) - set(MODELS)) | (set(engines) - set(ENGINES)):
        ap.error(f"unknown {sorted(bad)}; models: {MODELS}, engines: {ENGINES}")
    reduce = reduce_range(a.reduce_range)
    from fusegraph.targets.cpu.onednn.quant import has_vnni

    rows = []
    print(f"{'model':<11}{'batch':>6}  " + "".join(f"{e + ' ms':>20}" for e in engines) + "  int8/fp32  int8/ORT")
    with tempfile.TemporaryDirectory(prefix="fg-quant-") as tmp:
        work = Path(tmp)
        for name in wanted:
            made = quantize(name, work, a.calibration, reduce, a.ppocr_size)
            if made is None:
                rows.append({"model": name, "skipped": "model file not installed"})
                print(f"{name:<11} skipped: not installed")
                continue
            for batch in (int(b) for b in a.batches.split(",")):
                feeds = work / f"{name}-{batch}.npz"
                np.savez(feeds, **_inputs(name, batch, 0, a.ppocr_size))
                row, outs = {"model": name, "batch": batch, "quantization": made["mode"]}, {}
                rounds: dict[str, list[dict]] = {e: [] for e in engines}
                for _ in range(a.rounds):  # engines in turns: a load change hits every engine alike
                    for e in engines:
                        out = work / f"{name}-{batch}-{e}.npy"
                        rounds[e].append(run_child(e, made["int8" if e.endswith("int8") else "fp32"], feeds,
                                                   batch, a, out))
                        if "error" not in rounds[e][-1]:
                            outs[e] = np.load(out)
                for e in engines:
                    row[e] = _best_round(rounds[e])
                unopt = ort_unoptimized(made["int8"], feeds) if "ort-int8" in outs else None
                row["accuracy"] = accuracy(name, outs, unopt)
                ms = {e: row[e].get("median_ms") for e in engines}
                fg8, fg32, ort8 = ms.get("fusegraph-int8"), ms.get("fusegraph-fp32"), ms.get("ort-int8")
                row["speedup_vs_fp32"] = fg32 / fg8 if fg8 and fg32 else None
                row["ratio_vs_ort_int8"] = fg8 / ort8 if fg8 and ort8 else None
                cpu = {e: row[e].get("cpu_ms") for e in engines}
                c8, c32, o8 = cpu.get("fusegraph-int8"), cpu.get("fusegraph-fp32"), cpu.get("ort-int8")
                row["cpu_speedup_vs_fp32"] = c32 / c8 if c8 and c32 else None
                row["cpu_ratio_vs_ort_int8"] = c8 / o8 if c8 and o8 else None
                rows.append(row)
                if a.verbose:
                    print(json.dumps(row, default=str))
                cells = "".join(f"{(f'{ms[e]:.1f}' if ms[e] else row[e].get('error', '?')[:18]):>20}" for e in engines)
                sp, ro = row["speedup_vs_fp32"], row["ratio_vs_ort_int8"]
                cs, co = row["cpu_speedup_vs_fp32"], row["cpu_ratio_vs_ort_int8"]
                print(f"{name:<11}{batch:>6}  {cells}  {sp and f'{sp:.2f}x'!s:>9}  {ro and f'{ro:.2f}'!s:>8}"
                      f"   cpu time: {cs and f'{cs:.2f}x'!s} vs fp32, {co and f'{co:.2f}'!s} of ORT")
    if not a.no_write:
        path = write_results("quantization" + (f"-{a.tag}" if a.tag else ""), {
            "threads": a.threads, "runs": a.runs, "rounds": a.rounds,
            "loadavg_after": Path("/proc/loadavg").read_text().split()[:3], "warmup": a.warmup, "calibration_inputs": a.calibration,
            "reduce_range": reduce, "vnni": has_vnni(), "ppocr_size": a.ppocr_size, "rows": rows})
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

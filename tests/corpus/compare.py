"""Running a corpus entry on a fusegraph target and on ONNX Runtime, and judging the difference.

Criteria (the project's own, from `fusegraph verify`):
- float32 models on float32 targets: every element within atol 1e-4 + rtol 1e-3 * |expected|, the
  tolerance tests/test_models_verify.py holds the real models to.
- float16 models, int8 (QDQ / dynamic-quantized) models and the gpu-fp16 target: element-wise
  tolerances do not fit (one float16 ulp, or one quantization step flipped by a rounding tie, is far
  above 1e-3 relative), so an output matches when its relative L2 error ||a - r|| / ||r|| is at most
  the precision's tolerance. Yardstick: ORT at its defaults against ORT with graph optimizations off
  (`ort_spread`, a column of benchmarks/corpus_table.py), measured 2026-12-01 on the CI-like VM:
  fp16 models up to 5.6e-4 (bert_fp16), int8 models up to 1.6e-7 (bert_dynamic; their weights are
  7-bit, see quant.py). fp16: 1e-2, `fusegraph verify --fp16`'s default, 18x that spread; int8:
  1e-3, room for a few flipped quantization steps, 6000x the spread. Neither is fitted to a failure:
  fusegraph measures at most 6.8e-4 (fp16) and 1.4e-7 (int8) on them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx

from .registry import Feeds

ATOL, RTOL = 1e-4, 1e-3
# rel L2 tolerance per precision (see the module docstring; corpus_table.py's ort_spread column)
REL_L2_TOL = {"fp16": 1e-2, "int8": 1e-3}
# "-fp16": computing in float16; "-fp16-io": with float16 inputs and outputs too (CompileOptions.fp16_io:
# fed the float32 inputs rounded to float16, its float16 outputs judged as float32)
TARGETS = ("ref", "cpu", "cpu-fp16-io", "gpu", "gpu-fp16", "gpu-fp16-io")


@dataclasses.dataclass
class Verdict:
    ok: bool
    max_abs: float
    rel_l2: float
    detail: str  # the first failing output and why, or ""


def run_ort(model: onnx.ModelProto, feeds: Feeds, optimize: bool = True, threads: int = 2) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_target(model: onnx.ModelProto, feeds: Feeds, target: str) -> list[np.ndarray]:
    """`target` is a fusegraph target name, with "-fp16" (computing in float16) or "-fp16-io" (float16
    inputs and outputs too) after it, as TARGETS names them."""
    import fusegraph

    name, _, precision = target.partition("-")
    options = fusegraph.CompileOptions(fp16=bool(precision), fp16_io=precision == "fp16-io")
    # from its bytes, as a user's file is read (onnx/wire.py's split of the weights)
    p = fusegraph.parse_onnx(model.SerializeToString(), map_input_dims={k: list(v.shape) for k, v in feeds.items()})
    p.compile(fusegraph.get_target(name), options)
    if not options.fp16_io:
        return p.run(feeds)
    half = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
    declared = [o.type.tensor_type.elem_type for o in model.graph.output]
    return [v.astype(np.float32) if t == onnx.TensorProto.FLOAT else v
            for v, t in zip(map(np.asarray, p.run(half)), declared)]


def criterion(precision: str, target: str) -> float | None:
    """The rel L2 tolerance that judges this pair, or None for the element-wise float32 criterion."""
    if "-fp16" in target:
        return REL_L2_TOL["fp16"]
    return REL_L2_TOL.get(precision)


def judge(names: list[str], actual: list[np.ndarray], expected: list[np.ndarray],
          rel_l2_tol: float | None) -> Verdict:
    from fusegraph.driver.commands.verify import compare_outputs

    diffs = compare_outputs(names, actual, expected, ATOL, RTOL, rel_l2_tol)
    bad = [d for d in diffs if not d.ok]
    max_abs = max((d.max_abs or 0.0 for d in diffs), default=0.0)
    rel_l2 = max((d.rel_l2 or 0.0 for d in diffs), default=0.0)
    detail = ""
    if bad:
        d = bad[0]
        if d.max_abs is None:  # shapes or dtypes differ: no numbers to give
            detail = f"output {d.name}: {d.note}"
        else:
            tol = f"rel L2 tolerance {rel_l2_tol:g}" if rel_l2_tol else f"atol {ATOL:g}, rtol {RTOL:g}"
            detail = (f"output {d.name}: {d.note or f'{d.mismatched} elements outside'} ({tol}); "
                      f"max abs {d.max_abs:.3g}, rel L2 {d.rel_l2:.3g}")
    return Verdict(not bad, max_abs, rel_l2, detail)


@dataclasses.dataclass
class Reference:
    model: onnx.ModelProto
    feeds: Feeds
    expected: list[np.ndarray]  # ONNX Runtime at its defaults


def reference(entry) -> Reference:
    """Build (or load from the cache) the entry's model and run it on ONNX Runtime."""
    from .build import model_path

    model = onnx.load(str(model_path(entry)))
    feeds = entry.feeds()
    # int8: ORT without graph optimizations runs the Q/DQ nodes as written; its optimized integer kernels
    # depend on the CPU (rel L2 2.5e-2 from the unoptimized result on an AMX/VNNI host, 0 here)
    optimize = entry.precision != "int8"
    return Reference(model, feeds, run_ort(model, feeds, optimize=optimize, threads=entry.ort_threads))


def check(entry, ref: Reference, target: str) -> Verdict:
    """The target's outputs against ONNX Runtime's, judged by the entry's criterion."""
    actual = run_target(ref.model, ref.feeds, target)
    return judge(output_names(ref.model), actual, ref.expected, criterion(entry.precision, target))


def ort_spread(entry, ref: Reference) -> Verdict:
    """ONNX Runtime with graph optimizations against ORT without (the other one of the two for the
    reference): ORT's own numeric spread."""
    other = run_ort(ref.model, ref.feeds, optimize=entry.precision == "int8", threads=entry.ort_threads)
    return judge(output_names(ref.model), other, ref.expected,
                 REL_L2_TOL.get(entry.precision))


def degenerate(expected: list[np.ndarray]) -> bool:
    """True when no output varies: a model whose outputs are constant checks nothing."""
    return not any(e.size > 1 and np.ptp(e.astype(np.float64)) > 0 for e in expected)


def output_names(model: onnx.ModelProto) -> list[str]:
    return [o.name for o in model.graph.output]

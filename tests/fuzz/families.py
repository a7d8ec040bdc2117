"""Fuzz case families: each makes one hostile input from a seed, runs it and names the outcome.
This module holds the registry and the judging; the families are in families_node.py (one node of
a real or built-in model, mutated at the protobuf level), families_io.py (damaged small models, bad
run-time inputs, damaged .fgx files) and families_hostile.py (resource limits).

A case that fusegraph runs is also given to ONNX Runtime: where ORT refuses the model or the inputs,
fusegraph accepted something invalid; where both run, the outputs must agree.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import onnx

import fusegraph
from fusegraph.errors import FusegraphError, InternalError

Outcome = tuple[str, str]
FAMILIES: dict[str, Callable[[random.Random], Outcome]] = {}


def family(name: str):
    def deco(fn):
        FAMILIES[name] = fn
        return fn
    return deco


def run_case(name: str, seed: int) -> Outcome:
    import warnings

    from tests.fuzz import families_hostile, families_io, families_node  # noqa: F401  (register their families)

    warnings.simplefilter("ignore")
    try:
        return FAMILIES[name](random.Random(f"{name}/{seed}"))
    except Skip as e:
        return "skipped", str(e)


class Skip(Exception):
    """The case generator could not make a case from this seed (it counts as nothing found)."""


# -- running and judging -----------------------------------------------------------------------------
def _typed(e: BaseException) -> Outcome:
    if isinstance(e, InternalError) or not isinstance(e, FusegraphError):
        cause = e.__cause__ if isinstance(e, InternalError) and e.__cause__ is not None else e
        return "untyped-error", f"{type(cause).__name__}: {cause}"
    return "typed-error", type(e).__name__


def _ort_session(model_bytes: bytes):
    import onnxruntime as ort

    oracle_phase()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def note(text: str) -> None:
    """Tell the harness what the case is, for its report should the worker crash or hang."""
    print(f"note {' '.join(text.split())}", flush=True)


def oracle_phase() -> None:
    """Tell the harness that ONNX Runtime runs from here on: a crash now is the oracle's (a worker
    writes its case's outcome on stdout; this line comes before it)."""

    print("phase oracle", flush=True)


def ort_message(e: Exception) -> str:
    """The end of an ORT error: the reason (its start is a long C++ signature)."""
    return "ONNX Runtime: " + " ".join(str(e).split())[-260:]


def _ort_refuses(e: Exception) -> bool:
    """ORT's NOT_IMPLEMENTED is a missing kernel (a valid model ORT lacks), not an invalid model."""
    return "NOT_IMPLEMENTED" not in str(e)


def judge_model(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray], target: str = "ref",
                rtol: float = 1e-3, atol: float = 1e-4) -> Outcome:
    """Parse, compile and run `model` on fusegraph; compare what ran with ONNX Runtime."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    try:
        got = fusegraph.parse_onnx(data).compile(target).run(feeds)
    except Exception as e:  # noqa: BLE001  (classifying every exception is the point)
        return _typed(e)
    try:
        sess = _ort_session(data)
        names = {i.name for i in sess.get_inputs()}
        # 0-d arrays, not numpy scalars: ORT's Python API refuses the latter ("Unable to handle object")
        want = sess.run(None, {k: np.asarray(v) for k, v in feeds.items() if k in names})
    except Exception as e:  # noqa: BLE001
        if _ort_refuses(e):
            return "accepted-invalid", ort_message(e)
        return "ok-correct", "unchecked: ORT has no kernel"
    return compare(got, want, rtol, atol)


def compare(got, want, rtol: float, atol: float) -> Outcome:
    if len(got) != len(want):
        return "wrong-result", f"{len(got)} outputs, ORT gives {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return "wrong-result", f"output {k}: {a.dtype}{list(a.shape)}, ORT gives {b.dtype}{list(b.shape)}"
        if a.dtype.kind in "fc":
            bad = ~np.isclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
            # float32 rounding of huge intermediate values may flip to inf on one side only
            if bad.any() and not (np.abs(b[bad]) > 1e30).all():
                return "wrong-result", f"output {k}: {int(bad.sum())} of {a.size} values differ"
        elif not np.array_equal(a, b):
            return "wrong-result", f"output {k}: values differ"
    return "ok-correct", ""


def random_feed(rng: random.Random, dtype: np.dtype, shape) -> np.ndarray:
    g = np.random.default_rng(rng.randrange(2**32))
    if dtype.kind == "f":
        return g.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return g.integers(0, 3, shape).astype(dtype)
    if dtype.kind == "b":
        return g.random(shape) > 0.5
    raise Skip(f"no sample values of {dtype}")



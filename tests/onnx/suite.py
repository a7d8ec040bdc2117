"""The ONNX backend test suite, loaded in memory: node, simple, pytorch-converted, pytorch-operator
and real (light) cases, each as (kind, name, runnable) with the ONNX runner's comparison rules."""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator", "real")
EXCLUSIONS_FILE = Path(__file__).with_name("exclusions.txt")


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str
    name: str
    rtol: float
    atol: float
    load: Callable[[], tuple[onnx.ModelProto, list[tuple[list, list]]]]  # model and (inputs, outputs) sets


@dataclasses.dataclass(frozen=True)
class Exclusion:
    pattern: re.Pattern
    xfail: bool   # True: runs and is expected to fail (known wrong result); False: not run
    reason: str


def load_exclusions(path: Path = EXCLUSIONS_FILE) -> list[Exclusion]:
    """Lines `skip PATTERN  # reason` or `xfail PATTERN  # reason`; patterns are re.search on
    TARGET/KIND/NAME (e.g. `ref/node/test_foo`, or `/node/test_foo$` for every target)."""
    out = []
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        body, _, reason = line.partition("#")
        parts = body.split()
        if len(parts) != 2 or parts[0] not in ("skip", "xfail") or not reason.strip():
            raise ValueError(f"{path.name}:{lineno}: expected 'skip|xfail PATTERN  # reason', got {raw!r}")
        out.append(Exclusion(re.compile(parts[1]), parts[0] == "xfail", reason.strip()))
    return out


def exclusion_for(case: Case, exclusions: list[Exclusion], target: str = "ref") -> Exclusion | None:
    key = f"{target}/{case.kind}/{case.name}"
    return next((e for e in exclusions if e.pattern.search(key)), None)


def _tensor(x):
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x


def _read_pb(path: str, type_proto: onnx.TypeProto):
    """A serialized value, read as the proto its declared type says (tensor, sequence, optional)."""
    data = Path(path).read_bytes()
    which = type_proto.WhichOneof("value")
    cls, conv = {"sequence_type": (onnx.SequenceProto, numpy_helper.to_list),
                 "optional_type": (onnx.OptionalProto, numpy_helper.to_optional)}.get(
                     which, (onnx.TensorProto, numpy_helper.to_array))
    proto = cls()
    proto.ParseFromString(data)
    return conv(proto)


def _load_dir(model_dir: str):
    model = onnx.load(os.path.join(model_dir, "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    in_types = [vi.type for vi in model.graph.input if vi.name not in inits]
    out_types = [vi.type for vi in model.graph.output]
    sets = []
    for d in sorted(glob.glob(os.path.join(model_dir, "test_data_set*"))):
        ins = [_read_pb(p, t) for p, t in zip(sorted(glob.glob(os.path.join(d, "input_*.pb")), key=_index), in_types)]
        outs = [_read_pb(p, t) for p, t in zip(sorted(glob.glob(os.path.join(d, "output_*.pb")), key=_index), out_types)]
        sets.append((ins, outs))
    return model, sets


def _index(path: str) -> int:
    return int(re.search(r"_(\d+)\.pb$", path).group(1))


def _load_light(url: str, name: str):
    from onnx.backend.test.runner import Runner

    base = Path(onnx.__file__).parent.parent / url
    model = onnx.load(str(base))
    inits = {i.name for i in model.graph.initializer}
    ins = [Runner.generate_dummy_data(x, seed=0, name=name, random=False)
           for x in model.graph.input if x.name not in inits]
    prefix = str(base)[: -len(".onnx")]
    outs = [numpy_helper.to_array(onnx.load_tensor(f"{prefix}_output_{k}.pb")) for k in range(len(model.graph.output))]
    return model, [(ins, outs)]


@functools.cache
def cases(kind: str) -> tuple[Case, ...]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = load_model_tests(kind=kind)
    out = []
    for t in tests:
        if t.model is not None:  # node cases are built in memory
            sets = [([_tensor(i) for i in ins], [_tensor(o) for o in outs]) for ins, outs in t.data_sets]
            load = functools.partial(lambda m, s: (m, s), t.model, sets)
        elif t.url is not None and t.url.startswith("onnx/backend/test/data/light/"):
            load = functools.partial(_load_light, t.url, t.model_name)
        else:
            load = functools.partial(_load_dir, t.model_dir)
        out.append(Case(kind, t.name, t.rtol, t.atol, load))
    return tuple(out)


def compare(ref, out, rtol: float, atol: float) -> None:
    """The ONNX runner's rule: same count, dtype and shape, then allclose (exact for non-floats)."""
    if isinstance(ref, list):
        assert isinstance(out, list), f"expected a sequence, got {type(out).__name__}"
        assert len(ref) == len(out), f"sequence length {len(out)}, expected {len(ref)}"
        for r, o in zip(ref, out):
            compare(r, o, rtol, atol)
        return
    if ref is None:
        assert out is None, f"expected None, got {type(out).__name__}"
        return
    ref, out = np.asarray(ref), np.asarray(out)
    assert ref.dtype == out.dtype, f"dtype {out.dtype}, expected {ref.dtype}"
    assert ref.shape == out.shape, f"shape {out.shape}, expected {ref.shape}"
    if ref.dtype == object:
        assert ref.tolist() == out.tolist(), "string values differ"
        return
    try:
        a, b = out.astype(np.float64), ref.astype(np.float64)
    except (TypeError, ValueError):
        np.testing.assert_array_equal(out, ref)
        return
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def run_case(case: Case, target: str | None = None) -> None:
    from fusegraph.backend import FusegraphBackend

    model, sets = case.load()
    backend = type("Backend", (FusegraphBackend,), {"target": target}) if target else FusegraphBackend
    rep = backend.prepare(model, "CPU")
    for inputs, refs in sets:
        outs = rep.run(list(inputs))
        assert len(outs) == len(refs), f"{len(outs)} outputs, expected {len(refs)}"
        for k, (r, o) in enumerate(zip(refs, outs)):
            try:
                compare(r, o, case.rtol, case.atol)
            except AssertionError as e:
                raise AssertionError(f"output {k}: {e}") from None

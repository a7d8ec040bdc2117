"""One loaded version of a model: its completed config, and its programs compiled per batch bucket.

Programs are compiled at fixed shapes, so a batching model (max_batch_size > 0) gets one program per
bucket (`config.batch_buckets`), all compiled at load (a compile inside a request's wait stalls every
request queued behind it for seconds). On a GPU a batch is zero-padded to its bucket and the outputs cut
back; on a CPU it is cut into buckets it fills (`ServedModel.pieces`). A `.fgx` file holds one compiled
shape: its batch is its only bucket.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import config as cfg
from .errors import ModelConfigError
from .tensors import Datatype, from_config, from_numpy


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: Datatype
    dims: tuple[int, ...]  # without the batch dim when the model batches


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _onnx_dims(path: Path) -> tuple[dict[str, list[int | None]], dict[str, list[int | None]]]:
    """The declared dims of the graph's inputs and outputs (None: symbolic or unknown)."""
    import onnx
    from google.protobuf.message import DecodeError

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except DecodeError as e:
        raise ModelConfigError(f"{path}: not an ONNX model ({e})") from None
    inits = {t.name for t in graph.initializer}

    def dims(v) -> list[int | None]:
        return [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]

    return ({v.name: dims(v) for v in graph.input if v.name not in inits}, {v.name: dims(v) for v in graph.output})


class ServedModel:
    def __init__(self, entry: cfg.ModelEntry, version: int, path: Path, default_target: str,
                 cores: int | None = None):
        self.name, self.version, self.path = entry.name, version, path
        self.config = cfg.pb().ModelConfig()
        self.config.CopyFrom(entry.config)
        self._complete = not entry.explicit_config
        self.target = cfg.target_of(self.config, default_target)
        self.precision = cfg.precision_options(self.config)
        self.instances = cfg.instance_count(self.config)
        # threads per instance so that instances x threads <= cores
        self.threads = max(1, (cores or usable_cores()) // self.instances)
        # a second set of programs for batches that run alone (a GPU's threads do not matter; a .fgx file
        # holds one compiled program)
        solo = cfg.solo_threads(self.config)
        self.solo_threads = solo if solo > self.threads and self.target != "gpu" and path.suffix != ".fgx" else 0
        self._programs: dict[tuple[int, bool], object] = {}
        self._compile_lock = threading.Lock()
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.buckets: list[int] = []
        self._load()

    @property
    def max_batch_size(self) -> int:
        return self.config.max_batch_size

    # -- loading ----------------------------------------------------------------------------------
    def _load(self) -> None:
        if self.path.suffix == ".fgx":
            import fusegraph

            program = fusegraph.load(self.path)
            shapes = list(program.get_parameter_shapes().values())
            fixed = {s.lens[0] for s in shapes if s.ndim}
            if self.max_batch_size > 0:
                if len(fixed) != 1 or fixed.pop() < self.max_batch_size:
                    raise ModelConfigError(f"model {self.name!r}: {self.path} is compiled for fixed shapes "
                                           f"{[s.lens for s in shapes]}; max_batch_size {self.max_batch_size} "
                                           f"needs a common first dim of at least that")
                self.buckets = [shapes[0].lens[0]]
            self._programs[self.buckets[0] if self.buckets else 0, False] = program
        else:
            self._onnx_inputs, onnx_outputs = _onnx_dims(self.path)
            if self._complete and self.max_batch_size == 0 and self._batchable(onnx_outputs):
                self.config.max_batch_size = cfg.DEFAULT_MAX_BATCH_SIZE
            if self.max_batch_size > 0:
                preferred = list(self.config.dynamic_batching.preferred_batch_size)
                self.buckets = cfg.batch_buckets(self.max_batch_size, preferred)
            program = self.program(self.buckets[0] if self.buckets else 0)
            self._check_io(program)  # a mismatch with the config fails before the other compiles
            for b in self.buckets[1:]:
                self.program(b)
            if self.solo_threads:
                for b in self.buckets or [0]:
                    self.program(b, solo=True)
            return
        self._check_io(program)

    def _batchable(self, onnx_outputs) -> bool:
        dims = [*self._onnx_inputs.values(), *onnx_outputs.values()]
        return bool(dims) and all(d and d[0] is None for d in dims)

    def _input_dims(self) -> dict[str, list[int]]:
        """Each ONNX input's dims without the batch dim: from the config where it gives them."""
        given = {i.name: list(i.dims) for i in self.config.input}
        unknown = set(given) - set(self._onnx_inputs)
        if unknown:
            raise ModelConfigError(f"model {self.name!r}: config inputs {sorted(unknown)} are not inputs of "
                                   f"{self.path.name}; its inputs are {sorted(self._onnx_inputs)}")
        out = {}
        for name, dims in self._onnx_inputs.items():
            rest = dims[1:] if self.max_batch_size > 0 else dims
            d = given.get(name, rest)
            if any(x is None or x < 0 for x in d):
                raise ModelConfigError(f"model {self.name!r}: input {name!r} has dims {d} (None/-1: symbolic); "
                                       f"programs are compiled at fixed shapes, so give its dims in config.pbtxt")
            out[name] = d
        return out

    def program(self, bucket: int, solo: bool = False):
        """The compiled program of batch bucket `bucket` (0: a model that does not batch), at the instance's
        threads or, `solo`, at solo_threads."""
        key = (bucket, solo and bool(self.solo_threads))
        prog = self._programs.get(key)
        if prog is not None:
            return prog
        with self._compile_lock:  # one compile per bucket, even when several instances need it at once
            if key not in self._programs:
                import fusegraph

                dims = {n: ([bucket, *d] if bucket else d) for n, d in self._input_dims().items()}
                prog = fusegraph.parse_onnx(self.path, map_input_dims=dims)
                threads = self.solo_threads if key[1] else self.threads
                prog.compile(self.target, fusegraph.CompileOptions(threads=threads, **self.precision))
                self._programs[key] = prog
            return self._programs[key]

    def _check_io(self, program) -> None:
        """Complete the config's inputs and outputs from the program, or check the given ones against it."""
        batched = self.max_batch_size > 0
        found_in = list(program.get_parameter_shapes().items())
        found_out = list(zip(program.output_names, program.get_output_shapes(), strict=True))
        self.inputs = self._specs("input", self.config.input, found_in, batched, required_all=True)
        self.outputs = self._specs("output", self.config.output, found_out, batched, required_all=False)

    def _specs(self, kind: str, declared, found, batched: bool, required_all: bool) -> list[TensorSpec]:
        actual: dict[str, TensorSpec] = {}
        for name, shape in found:
            dt = from_numpy(_numpy_dtype(shape.dtype))
            if dt is None:
                raise ModelConfigError(f"model {self.name!r}: {kind} {name!r} has dtype {shape.dtype.value}, "
                                       f"which the protocol does not carry")
            lens = tuple(shape.lens)
            if batched:
                if not lens or lens[0] not in (self.buckets or [lens[0]]):
                    raise ModelConfigError(f"model {self.name!r}: {kind} {name!r} of shape {list(lens)} has no "
                                           f"batch dim, but max_batch_size is {self.max_batch_size}")
                lens = lens[1:]
            actual[name] = TensorSpec(name, dt, lens)
        if not declared:
            for spec in actual.values():
                declared.add(name=spec.name, data_type=spec.datatype.config_name, dims=spec.dims)
            return list(actual.values())
        specs = []
        for d in declared:
            spec = actual.get(d.name)
            if spec is None:
                raise ModelConfigError(f"model {self.name!r}: config {kind} {d.name!r} is not one of the model's "
                                       f"{kind}s {sorted(actual)}")
            dt = from_config(cfg.pb().DataType.Name(d.data_type))
            if dt is not spec.datatype:
                raise ModelConfigError(f"model {self.name!r}: config {kind} {d.name!r} has data_type "
                                       f"{cfg.pb().DataType.Name(d.data_type)}, the model's is "
                                       f"{spec.datatype.config_name}")
            if tuple(d.dims) != spec.dims:
                raise ModelConfigError(f"model {self.name!r}: config {kind} {d.name!r} has dims {list(d.dims)}, "
                                       f"the model's are {list(spec.dims)}")
            specs.append(spec)
        missing = set(actual) - {s.name for s in specs}
        if required_all and missing:
            raise ModelConfigError(f"model {self.name!r}: config leaves out {kind}s {sorted(missing)}")
        return specs

    # -- running ----------------------------------------------------------------------------------
    def bucket_for(self, n: int) -> int:
        for b in self.buckets:
            if b >= n:
                return b
        raise ModelConfigError(f"model {self.name!r}: batch {n} exceeds max_batch_size {self.max_batch_size}")

    def pieces(self, n: int) -> list[int]:
        """The buckets a batch of `n` runs on. On a GPU one bucket, the smallest that holds it, zero-padded
        (a larger batch costs it little more time). On a CPU time grows with the batch, so padding is work
        thrown away (a batch of 5 on bucket 8: 60 % more): the batch is cut into buckets that it fills,
        the largest first."""
        if self.target == "gpu":
            return [self.bucket_for(n)]
        out = []
        while n:
            b = max((b for b in self.buckets if b <= n), default=None)
            if b is None:  # the smallest bucket is larger than what is left: pad that one
                b = self.bucket_for(n)
            out.append(b)
            n -= min(b, n)
        return out

    def execute(self, inputs: dict[str, np.ndarray], n: int, solo: bool = False) -> dict[str, np.ndarray]:
        """Run one batch of `n` (0: a model that does not batch); outputs by name, cut back to `n`. `solo`:
        no other instance runs, so the batch may take solo_threads."""
        names = self._programs[self.buckets[0] if self.buckets else 0, False].output_names
        if not n:
            by_name = dict(zip(names, self.program(0, solo).run(inputs), strict=True))
            return {s.name: np.asarray(by_name[s.name]) for s in self.outputs}
        parts, start = [], 0
        for b in self.pieces(n):
            k = min(b, n - start)
            part = {name: v[start:start + k] for name, v in inputs.items()}
            if k != b:
                part = {name: np.concatenate([v, np.zeros((b - k, *v.shape[1:]), v.dtype)]) for name, v in part.items()}
            parts.append((k, dict(zip(names, self.program(b, solo).run(part), strict=True))))
            start += k
        if len(parts) == 1:
            k, by_name = parts[0]
            return {s.name: np.asarray(by_name[s.name])[:k] for s in self.outputs}
        return {s.name: np.concatenate([np.asarray(o[s.name])[:k] for k, o in parts]) for s in self.outputs}


def _numpy_dtype(dtype) -> np.dtype | None:
    """The numpy dtype of a fusegraph DType (whose names are numpy's, bfloat16 being ml_dtypes'); None for
    those numpy lacks (int4, fp8), which the protocol does not carry either."""
    import ml_dtypes

    try:
        return np.dtype(ml_dtypes.bfloat16 if dtype.value == "bfloat16" else dtype.value)
    except TypeError:
        return None

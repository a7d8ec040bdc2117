"""Compile-time autotuning of the gpu target's GEMM templates, with a persistent on-disk cache.

For each distinct problem (shape, dtypes, epilogue, layout) the candidates are the library path
(cuBLAS, then the epilogue's pointwise kernel) and Triton template configs. The choice is, in
order of precedence:

1. the tuner's mode: "library" takes the library path; "triton" leaves it out of the candidates;
2. a choice recorded with the program (a loaded .fgx's autotune.json): reused, nothing is timed;
3. the on-disk cache, CACHE_ROOT/autotune/<device+versions>.json: reused, nothing is timed;
4. timing on the device: the candidates' kernels compiled in parallel, then each run timed by CUDA
   events behind a GPU-side sleep that covers the host's work (measure.py: the kernels are timed, not
   their launch or a library's host-side setup); the fastest wins and is written to the cache. A
   candidate that fails to compile or run is dropped.

A static program's warm-up first runs its steps inside kernels.compile_all(): there `choose` decides
nothing and submits the compiles of the candidates it will time, so the candidates of every tuned step
compile at once, beside the program's other kernels; the steps then choose right after that walk
(kernels.after_walk), each candidate timed as its compile ends, while the others compile. The GEMM templates are timed in a generic form
(gemm_runner.py: K an argument, so the problems of one epilogue share each config's kernel; ResNet-50
b32 fp16 on the H200 built 60 Triton binaries on a fresh machine instead of 137, and compiled in
12.3 s instead of 19.1); the chosen config runs its K-constant kernel. A new choice times only the
configs that can win its problem (`worth_timing`: each config of each epilogue is one more kernel to
compile); a recorded or cached choice may name any default config. A latency-bound problem has one
config to consider (`small_tile`), so its K-constant kernel is what a static program's warm-up times
(against the library, where the library is a candidate) and keeps: no generic kernel for it.

A float32 GEMM (`choose(library_first=True)`) is the library's in "auto" mode unless the library
cannot run it: the templates multiply exact float32 on the FMA units (never TF32), as cuBLAS's SGEMM
does, and compile slowly (about 8 s each on the H200 machine, against 1 s for a float16 tensor-core
one); on that machine cuBLAS won all 18 of ResNet-50's problems at batch 1 and all 3 of BERT-base's
linear layers, while their compiles were most of ResNet-50 b1's 18.8 s cold compile (2.5-2.9 s
without them). A large float16 product is the library's in the same way (`library_alone`: a dot,
not a convolution, of more than LIBRARY_MACS multiply-adds): there cuBLAS won every problem the H200
tuner recorded, and waiting for its templates' compiles was the longest part of transformer rows'
choices at batch 32. The "triton" mode and `exhaustive_tune` still time the templates of both.

On a CPU device (Triton's interpreter) nothing meaningful can be timed: the choice is deterministic
(the library path, or the first Triton config when the mode is "triton"), and nothing is cached.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import itertools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...errors import CompiledFileError, CompileError
from ...ir.dtypes import DType
from ...profile import phases
from . import kernels
from .compile_queue import urgent
from .measure import cuda_measure
from .triton_gemm import GemmConfig

LIBRARY = "library"
MODES = ("auto", "triton", "library")


def checked_mode(mode: str) -> str:
    """`mode` if it is one of MODES, else a CompileError naming them."""
    if mode not in MODES:
        raise CompileError(f"target 'gpu': gemm={mode!r}, expected one of {MODES}")
    return mode

# A problem of at most this many multiply-adds is latency-bound on an H100/H200 (about 5 us whatever
# its tiles): on the H200, 70 of DenseNet-121's and ConvNeXt-T's 71 batch-1 GEMMs (up to 1.2e8) were
# won by one of these two small tiles or by the library (the other by a 64x128 tile, where the
# 64x64's timing was a 16x outlier: measure.py now times such a one again).
SMALL_MACS = 2**27
# A problem of more than this many multiply-adds times its configs' generic kernels even where no other
# problem would share them (gemm_runner.EpilogueGemm.shares_kernels): on the H200 Segformer-B0 b1's
# 16384x256x1024 convolution waited 4.4 s for its seven configs' K-constant kernels, 0.3 s for the
# generic ones (the library won)
GENERIC_MACS = 2**30
SMALL_CONFIGS = (GemmConfig(64, 64, 32, 8, 4, 4), GemmConfig(64, 32, 64, 8, 4, 4))
# Hopper-friendly tiles (Inductor's mm configs and the matmul tutorial's), smallest last
DEFAULT_CONFIGS = (
    GemmConfig(128, 128, 32, 8, 4, 4), GemmConfig(128, 128, 64, 8, 8, 3), GemmConfig(128, 256, 64, 8, 8, 3),
    GemmConfig(64, 128, 32, 8, 4, 4), GemmConfig(128, 64, 32, 8, 4, 4), GemmConfig(64, 128, 64, 8, 4, 3),
    *SMALL_CONFIGS, GemmConfig(32, 64, 64, 8, 4, 4),
)
# Tiles larger than 128x128 (128x256x64, 8 warps, 3 stages) are timed only for problems past this
# many multiply-adds: in the H200 tuner's timings recorded in benchmarks/results, 39 smaller problems
# of 9 rows (ResNet-50's convolutions, Llama-small, MobileNetV3-L and RegNetY-400MF at b32; GPT-2,
# DenseNet-121, LR-ASPP, MobileNetV3-L and Segformer-B0 at b1; 16 of them latency-bound, timed before
# SMALL_MACS) timed it, and it won none, at 1.04-23x the fastest template's time; in the one larger
# (BERT-base b32's 4096x3072x768 with its GELU) it tied the fastest template (the library won). It is
# the slowest config to compile: 1.7-1.8 s for sm_90 on the 2-core VM, the others 0.4-1.6 s.
# (`benchmarks/gpu_config_wins.py` lists every config's wins past SMALL_MACS.)
BIG_TILE_MACS = 2**33
# Tiles of fewer rows than this (32x64x64) are timed only for problems of fewer rows or columns: in
# the recorded timings of 39 problems past SMALL_MACS of 128 rows or more and 64 columns or more, it
# won none, at 1.05-2.85x the fastest template's time (`benchmarks/gpu_config_wins.py`)
MIN_TILE_ROWS = 64
# A float16 matrix product (a dot, not a convolution) of more than this many multiply-adds is the
# library's (`library_alone`): in the H200 tuner's timings recorded in benchmarks/results, cuBLAS won all
# 7 such problems (BERT-base, GPT-2 and ViT-B/16 at b32: QKV, FC1 with its GELU, FC2; 2^32.8-2^33.8) by
# 11-28 % over the fastest template, while templates won 3 of the 4 dots between 2^31 and 2^32
# (GPT-2 b32's attention output, Llama-small b32's MLP) and most convolutions (ResNet-50 b32's, by up
# to 2.3x). Waiting for those problems' template compiles held DistilBERT, RoBERTa and ViT-B/16 b32's
# choices 0.9-1.4 s on the H200.
LIBRARY_MACS = 2**32
# Configs a new choice does not time (a recorded or cached choice may still name them): 128x64x32 (4
# warps, 4 stages) won 3 of the 56 recorded problems past SMALL_MACS that timed it, two of them 48 or 64
# columns wide, where 128x128x32 fitted to the problem is the same tile, and the third (MobileNetV3-L
# b32's 6272x112x480) by 0.9 % over 64x128x64 (`benchmarks/gpu_config_wins.py`)
UNTIMED = (GemmConfig(128, 64, 32, 8, 4, 4),)
SMALL_TILE = 64 * 32  # elements of the smallest default tiles (64x32, 32x64)
H100_SMS = 132  # multiprocessors of an H100/H200 SXM: the tile counts' scale where none is measured
# how candidates are timed, part of the cache's identity: choices timed another way are timed again
# (version 1 timed kernel launches from the host, and its choices were mostly wrong; version 2 slept a
# fixed 100 us, which did not hide cuSPARSELt's per-call host work; version 3 kept timings whose sleep
# ended before the runs were queued, 8-24x a candidate's time while compile threads held the GIL:
# measure.py)
TIMING = "events-after-covering-gpu-sleep-4"
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one H100/H200 block may use


def exhaustive_configs(item_bytes: int) -> list[GemmConfig]:
    """The wide grid of `exhaustive_tune`, without tiles whose pipelined buffers overflow shared memory."""
    out = []
    for bm, bn, bk, (stages, warps) in itertools.product(
            (32, 64, 128, 256), (32, 64, 128, 256), (32, 64, 128), ((2, 4), (3, 4), (3, 8), (4, 4), (4, 8), (5, 8))):
        if warps == 8 and bm * bn < 128 * 64:
            continue  # eight warps on a small tile leave most of them idle
        if (bm + bn) * bk * item_bytes * stages <= SMEM_LIMIT:
            out.append(GemmConfig(bm, bn, bk, 8, warps, stages))
    return out


def fit_configs(configs: list[GemmConfig] | tuple[GemmConfig, ...], m: int, n: int, k: int) -> list[GemmConfig]:
    """Configs with tiles no larger than the problem needs (at least 16 each: tl.dot's minimum),
    duplicates removed, order kept."""
    def cap(block: int, size: int) -> int:
        return min(block, max(16, 1 << max(0, size - 1).bit_length()))

    seen: dict[GemmConfig, None] = {}
    for c in configs:
        seen.setdefault(dataclasses.replace(c, block_m=cap(c.block_m, m), block_n=cap(c.block_n, n),
                                            block_k=cap(c.block_k, k)), None)
    return list(seen)


def library_alone(m: int, n: int, k: int, conv: bool, in_type: DType) -> bool:
    """Whether this problem is the library's without timing templates: a float16 (bfloat16) dot past
    LIBRARY_MACS; never a convolution, nor quantized operands (their library is another)."""
    return not conv and in_type in (DType.float16, DType.bfloat16) and m * n * k > LIBRARY_MACS


def worth_timing(m: int, n: int, k: int, sms: int) -> list[GemmConfig]:
    """The default configs (fitted to the problem) that tuning times on a device of `sms`
    multiprocessors: a latency-bound problem (SMALL_MACS) the one small tile `small_tile` picks; a
    larger one without the tiles too large to fill half the device (when others do), without the
    smallest tiles when a larger one still fills four waves, without tiles past 128x128 below
    BIG_TILE_MACS, without 32-row tiles where both sides reach MIN_TILE_ROWS, and never the UNTIMED
    ones. Each config left out is a kernel a fresh machine does not compile (every config of every
    epilogue is one; MobileNet-V3 b1 compiled 205). In the H200 tuner's timings of DenseNet-121 b1,
    ConvNeXt-T b1 and DeiT-S b32 a config left out won 1 of 75 problems (see SMALL_MACS) and was
    1.03-2.3x the winner in the others; none of ResNet-50 b32's 16 template picks is left out."""
    if m * n * k <= SMALL_MACS:
        return [small_tile(m, n, k)]
    fitted = fit_configs([c for c in DEFAULT_CONFIGS if c not in UNTIMED], m, n, k)

    def tiles(c: GemmConfig) -> int:
        return -(-m // c.block_m) * -(-n // c.block_n)

    most = max(tiles(c) for c in fitted)
    kept = [c for c in fitted if tiles(c) >= min(sms // 2, most // 2)
            and (c.block_m * c.block_n <= 128 * 128 or m * n * k > BIG_TILE_MACS)
            and (c.block_m >= MIN_TILE_ROWS or min(m, n) < MIN_TILE_ROWS)]
    if any(c.block_m * c.block_n > SMALL_TILE and tiles(c) >= 4 * sms for c in kept):
        kept = [c for c in kept if c.block_m * c.block_n > SMALL_TILE]
    return kept


def small_tile(m: int, n: int, k: int) -> GemmConfig:
    """The small tile of a latency-bound problem, fitted to it, without timing: 64x64x32 for many rows
    and a short K, else 64x32x64 (more blocks, a longer K step). Of the 129 latency-bound problems
    of LR-ASPP, DenseNet-121, MobileNet-V3-L and GPT-2 at batch 1 whose two tiles the H200 timed
    (gpu_cold_compile-corpus-h200.json), this pick's times summed to 0.0-0.3 % more than the faster
    tile's per model, and no pick was more than 5 % slower than the other tile."""
    wide, deep = SMALL_CONFIGS
    return fit_configs([wide if k <= 256 and m >= 1024 else deep], m, n, k)[0]


@dataclasses.dataclass
class Candidate:
    name: str                                 # LIBRARY or a GemmConfig's name
    make: Callable[[], Callable[..., None]]   # builds the candidate's run (a function of the tensors)


class TuningCache:
    """Choices of one device and software stack, persisted as one JSON file."""

    def __init__(self, identity: Mapping[str, str]):
        self.identity = dict(identity)
        digest = hashlib.sha256(json.dumps(self.identity, sort_keys=True).encode()).hexdigest()[:16]
        self.path: Path = kernels.CACHE_ROOT / "autotune" / f"{digest}.json"
        self._seen: dict[str, dict] | None = None  # the file as read once by this compile, plus its own stores

    def load(self) -> dict[str, dict]:
        """The choices on disk (read once; a compile's lookups share that read)."""
        if self._seen is None:
            self._seen = self._read()
        return self._seen

    def _read(self) -> dict[str, dict]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # no cache yet, or a damaged one: timing rebuilds it
        return data.get("choices", {}) if data.get("identity") == self.identity else {}

    def store(self, key: str, choice: dict) -> None:
        self.load()[key] = choice
        choices = self._read()  # the file again: other compiles may have stored choices since
        choices[key] = choice
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"identity": self.identity, "choices": choices}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)  # atomic: a concurrent compile reads the old or the new file


def read_recorded(data: Any) -> dict[str, dict]:
    """The choices a compiled file records (its autotune.json), each a table with a string "name";
    CompiledFileError if the part is not that. A choice can only pick among the candidates generated
    for its problem (`Tuner._choose`), so a file's record decides speed, never what memory is touched."""
    if data is None:
        return {}
    try:
        recorded = json.loads(bytes(data))
    except (ValueError, RecursionError) as e:
        raise CompiledFileError(f"gpu artifact autotune.json is not JSON: {e}") from None
    if not isinstance(recorded, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("name"), str) for k, v in recorded.items()):
        raise CompiledFileError("gpu artifact autotune.json is not a table of recorded choices")
    return recorded


def device_identity(device: Any) -> dict[str, str]:
    from .device import torch, triton

    t = torch()
    name = t.cuda.get_device_name(device) if device.type == "cuda" else device.type
    return {"device": name, "torch": t.__version__, "triton": triton().__version__, "timing": TIMING}


class Tuner:
    """Chooses among a problem's candidates (see the module docstring). `measure(run)` times one
    candidate in seconds; None means this device cannot be timed (the deterministic choice)."""

    def __init__(self, identity: Mapping[str, str], mode: str = "auto", exhaustive: bool = False,
                 recorded: Mapping[str, dict] | None = None, measure: Callable[[Callable[[], None]], float] | None = None,
                 sms: int = H100_SMS):
        self.mode, self.exhaustive, self.measure, self.sms = checked_mode(mode), exhaustive, measure, sms
        self.recorded = dict(recorded or {})
        self.cache = TuningCache(identity)
        self.timings: dict[str, dict[str, float]] = {}  # problem -> candidate -> seconds, as timed here

    @property
    def timed(self) -> int:
        """Problems timed by this tuner (0 when every choice came from a record or the cache)."""
        return len(self.timings)

    @classmethod
    def for_device(cls, device: Any, mode: str = "auto", exhaustive: bool = False,
                   recorded: Mapping[str, dict] | None = None) -> Tuner:
        if device.type != "cuda":
            return cls(device_identity(device), mode, exhaustive, recorded)
        from .device import torch

        sms = torch().cuda.get_device_properties(device).multi_processor_count
        return cls(device_identity(device), mode, exhaustive, recorded, cuda_measure, sms)

    def templates_only(self) -> Tuner:
        """This tuner (its cache, records and timings) choosing among the Triton templates alone."""
        other = copy.copy(self)
        other.mode = "triton"
        return other

    def configs(self, m: int, n: int, k: int, item_bytes: int) -> list[GemmConfig]:
        """Every config a choice for this problem may name (a recorded or cached one included)."""
        base = exhaustive_configs(item_bytes) if self.exhaustive else DEFAULT_CONFIGS
        return fit_configs(base, m, n, k)

    def to_time(self, m: int, n: int, k: int, item_bytes: int) -> list[GemmConfig]:
        """The configs a new choice for this problem times: all of them when tuning exhaustively."""
        if self.exhaustive:
            return self.configs(m, n, k, item_bytes)
        return worth_timing(m, n, k, self.sms)

    def choose(self, key: str, candidates: list[Candidate], args: tuple = (),
               library_first: bool = False) -> tuple[str | None, Callable[..., None]]:
        """(name, run) of the chosen candidate, timed (when it is) on `args`. The library candidate,
        when present, comes first. Inside kernels.compile_all() nothing is chosen: the kernels of the
        candidates a choice would time are submitted for compiling, and the answer is (None, a run
        for this one call). `library_first` (a float32 GEMM, a large float16 product): in "auto" mode
        without exhaustive tuning, the library alone unless it cannot run the problem (module docstring)."""
        library = [c for c in candidates if c.name == LIBRARY]
        templates = [c for c in candidates if c.name != LIBRARY]
        if library and self.takes_library(library_first):
            return self._preferring(key, library, templates, args)
        if self.mode == "triton" and templates:  # the library only for rows no template can address
            return self._preferring(key, templates, library, args)
        return self._choose_among(key, self._allowed(candidates), args)

    def choose_first(self, key: str, first: list[Candidate], rest: list[Candidate],
                     args: tuple = ()) -> tuple[str | None, Callable[..., None]]:
        """`choose` among `first` alone, `rest` only where none of them builds and runs, in "auto" mode
        without exhaustive tuning; elsewhere `choose` among all of them."""
        if self.prefers_first():
            return self._preferring(key, first, rest, args)
        return self.choose(key, first + rest, args)

    def prefers_first(self) -> bool:
        """Whether a choice with a preferred side (`choose_first`, `library_first`) takes it alone here:
        in "auto" mode without exhaustive tuning."""
        return self.mode == "auto" and not self.exhaustive

    def takes_library(self, library_first: bool) -> bool:
        """Whether a `library_first` choice is the library's alone here (times no template)."""
        return library_first and self.prefers_first()

    def _preferring(self, key: str, first: list[Candidate], rest: list[Candidate],
                    args: tuple) -> tuple[str | None, Callable[..., None]]:
        """The choice among `first`; among `rest` only when none of `first` builds and runs."""
        try:
            return self._choose_among(key, first, args)
        except CompileError:
            if not rest:
                raise
            return self._choose_among(key, rest, args)

    def _choose_among(self, key: str, candidates: list[Candidate],
                      args: tuple) -> tuple[str | None, Callable[..., None]]:
        if kernels.compiling_all():
            return None, self._prefetch(key, candidates, args)
        return self._choose(key, candidates, args)

    def _allowed(self, candidates: list[Candidate]) -> list[Candidate]:
        """The candidates this mode lets `choose` time first: the library alone in "library" mode, the
        templates alone in "triton" mode (all of them where the mode's side has none: attention)."""
        if self.mode == "auto":
            return candidates
        return [c for c in candidates if (c.name == LIBRARY) == (self.mode == LIBRARY)] or candidates

    def decided(self, key: str) -> str | None:
        """The choice for `key` that takes no timing: the library in "library" mode, else a choice
        recorded with the program or cached on disk; None when timing decides."""
        if self.mode == LIBRARY:
            return LIBRARY
        known = self._known(key)
        return known.get("name") if known is not None else None

    def _known(self, key: str) -> dict | None:
        """The choice recorded with the program or cached on disk for `key`, if any."""
        return self.recorded.get(key) or (self.cache.load().get(key) if self.measure is not None else None)

    def _prefetch(self, key: str, candidates: list[Candidate], args: tuple) -> Callable[..., None]:
        """compile_all's pass over a tuned step: the compiles of the candidates `choose` would build
        submitted (only the known choice's, when there is one), and the first of them to run now."""
        known = self._known(key)
        considered = [c for c in candidates if known is not None and c.name == known.get("name")] or candidates
        runs = []
        for c in considered:
            try:
                run = c.make()
                hook = getattr(run, "compile", None)
                if hook is not None:
                    with urgent():  # the choice after the walk waits for it
                        hook(*args)
            except candidate_errors():
                continue
            runs.append(run)
        if not runs:
            raise CompileError(f"target 'gpu': every candidate of {key} failed")
        return runs[0]

    def _choose(self, key: str, candidates: list[Candidate], args: tuple) -> tuple[str, Callable[..., None]]:
        if not candidates:
            raise CompileError(f"target 'gpu': no candidate for {key}")
        names = {c.name: c for c in candidates}
        known = self._known(key)
        if known is not None and known.get("name") in names:
            try:
                return known["name"], names[known["name"]].make()
            except candidate_errors():
                pass  # a record from another software stack that no longer builds: choose again
        if self.measure is None or len(candidates) == 1:  # nothing to time: the first that builds and runs
            for c in candidates:
                try:
                    run = c.make()
                    run(*args)
                except candidate_errors():
                    continue
                return c.name, run
            raise CompileError(f"target 'gpu': every candidate of {key} failed")
        built = []
        for c in candidates:
            try:
                built.append((c.name, c.make()))
            except candidate_errors():
                continue
        precompile([run for _, run in built], args)
        best: tuple[float, str, Callable[..., None]] | None = None
        with phases.span(f"tune {key}"):
            for name, run in built:
                try:
                    seconds = self.measure(lambda: run(*args))  # noqa: B023  (timed before `run` changes)
                except candidate_errors():
                    continue  # this config does not compile or run here (shared memory, ...): dropped
                self.timings.setdefault(key, {})[name] = seconds
                if best is None or seconds < best[0]:
                    best = (seconds, name, run)
        if best is None:
            raise CompileError(f"target 'gpu': every candidate of {key} failed")
        self.cache.store(key, {"name": best[1], "seconds": best[0]})
        return best[1], best[2]


@functools.cache
def candidate_errors() -> tuple[type[BaseException], ...]:
    """What a candidate that cannot compile or run here raises."""
    errors: list[type[BaseException]] = [RuntimeError, ValueError, CompileError]
    try:
        from triton.errors import TritonError  # compile failures, out of resources
    except ImportError:
        pass
    else:
        errors.append(TritonError)
    return tuple(errors)


def precompile(runs: list[Callable[..., None]], args: tuple) -> None:
    """Compile the Triton kernels of several candidates at once, in threads (Triton releases the GIL
    while LLVM and ptxas work): a candidate's run may have a `compile(*args)` that submits its kernel
    without launching it. ResNet-50's 13 problems have 103 Triton candidates: compiled one by one they
    made its first compile (fp16, H200) 51.7 s, compiled together 15.7 s. A kernel that fails here
    fails again, and is dropped, when timed."""
    hooks = [h for h in (getattr(r, "compile", None) for r in runs) if h is not None]
    open_scope = kernels.async_compiling()  # the warm-up's: its pool takes them
    if len(hooks) < 2 and not open_scope:
        return
    with contextlib.nullcontext() if open_scope else kernels.compile_async(), urgent():
        for hook in hooks:
            try:
                hook(*args)
            except candidate_errors():
                continue

"""Compiled Triton kernels saved with a program, so a load compiles nothing, even on a machine whose
Triton cache is empty (a fresh container: compiling BERT-base's kernels there takes seconds).

A saved gpu program holds, for every kernel it ran, Triton's own cache entry: the cubin and its
metadata, under `triton_bin/<hash>/`, with `triton_bin.json` naming the Triton version and the GPU
architecture they were built for. Loading on the same Triton version and architecture points
Triton's cache at a folder of those entries while the program is built and warmed up, so the
kernels' first launches load the cubins instead of compiling. Elsewhere the entries are left alone
and the kernels compile from their saved sources, as before. The hash is Triton's key over the
source, the options and the software stack, so an entry can only serve the kernel it was built from;
the folder belongs to the file (named by its entries' digest), so a file cannot plant a binary in
the on-disk cache other programs compile with. (Within this process Triton keeps the kernels it
loaded, and a later program generating the same source reuses them.) Nothing ties a cubin to its
source but the writer's word, so only a file whose signature was verified gets here (`GpuTarget.load`
passes an unsigned file's artifacts as none: its kernels compile from source). Kernels the dynamic mode compiles at run time
(shapes met after the load) are not served: they compile from source, into Triton's usual cache.

Each kernel also needs a host-side launcher, a C extension Triton builds with the system compiler at
the kernel's first launch, one per distinct argument signature (on the H200 machine, 7 such builds
were 1.65 s of a 3.05 s ResNet-50 load in a fresh process). The file records the signatures
(`triton_launchers.json`: type names only, checked against Triton's type grammar), and a load builds
their launchers from Triton's own template all at once, in threads, into the file's folder. The file
carries no host code: a launcher is generated and compiled here, as it would be at the first launch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from . import kernels

PREFIX = "triton_bin/"
IDENTITY = "triton_bin.json"
LAUNCHERS = "triton_launchers.json"
_TYPE = re.compile(r"\*?k?(fp|bf|i|u)\d{1,2}|constexpr")  # a Triton argument type: *fp16, i32, u1, constexpr
_HASH = re.compile(r"[0-9a-f]{64}")
_FILE = re.compile(r"[A-Za-z0-9_.\-]{1,200}")
KEEP = (".json", ".cubin")  # what a launch needs: the metadata and the binary (not the IRs)


def export_binaries(sources: Mapping[str, str], chosen: Iterable[Any] = ()) -> dict[str, bytes]:
    """The cache entries of the compiled kernels behind `sources` (kernel name -> source), as
    artifacts; none when nothing was compiled for a GPU (Triton's interpreter). Of a GEMM template's
    kernels only those in `chosen` are kept: autotuning compiled one per candidate config from the
    same source (ResNet-50 fp32 on the H200: a file written after a cold compile was 121.1 MB, one
    written after a warm compile, whose choices came from the cache untimed, 102.9 MB; with this
    filter, 102.8 MB after a cold compile)."""
    from .device import triton

    out: dict[str, bytes] = {}
    archs, signatures = set(), set()
    chosen = list(chosen)
    chosen_ids, templates = {id(k) for k in chosen}, {getattr(k, "name", None) for k in chosen}
    for compiled in _compiled_kernels(sources):
        if getattr(compiled, "name", None) in templates and id(compiled) not in chosen_ids:
            continue  # a candidate timed and not chosen
        signature = getattr(getattr(compiled, "src", None), "signature", None)
        if isinstance(signature, dict) and _is_signature(list(signature.values())):
            signatures.add(tuple(signature.values()))
        arch = getattr(getattr(compiled.metadata, "target", None), "arch", None)
        files = {name: path for name, path in compiled.metadata_group.items() if name.endswith(KEEP)}
        if arch is None or not _HASH.fullmatch(compiled.hash) or len(files) != len(KEEP):
            continue
        try:
            entry = {f"{PREFIX}{compiled.hash}/{name}": Path(path).read_bytes() for name, path in files.items()}
        except OSError:
            continue  # Triton's cache was cleaned since: this kernel compiles from its source at load
        archs.add(arch)
        out.update(entry)
    if out:
        if len(archs) != 1:
            return {}
        out[IDENTITY] = json.dumps({"triton": triton().__version__, "arch": archs.pop()}).encode()
        if signatures:
            out[LAUNCHERS] = json.dumps(sorted(list(s) for s in signatures)).encode()
    return out


def _compiled_kernels(sources: Mapping[str, str]) -> Iterable[Any]:
    for name, source in sorted(sources.items()):
        module = kernels.loaded_module(source)
        fn = getattr(module, name, None) if module is not None else None
        for caches in getattr(fn, "device_caches", {}).values():
            yield from list(caches[0].values())  # the JIT function's compiled kernels on that device


@contextlib.contextmanager
def saved_kernels(artifacts: Mapping[str, memoryview], device: Any) -> Iterator[int]:
    """A context in which Triton's cache is a folder holding the saved kernels (its value: how many
    there are). Nothing changes when the program was built by another Triton or for another GPU
    architecture. The folder is named by the entries' digest and serves only this file's kernels:
    a file cannot plant a binary where another program's compile would find it."""
    entries = usable_entries(artifacts, cuda_arch(device))
    try:
        from triton import knobs  # Triton >= 3.4
        from triton.runtime.cache import get_cache_manager
    except ImportError:
        entries = {}  # an older Triton: the kernels compile from their sources
    if not entries:
        yield 0
        return

    digest = hashlib.sha256()
    for key in sorted(entries):
        for file in sorted(entries[key]):
            digest.update(f"{key}/{file}\0".encode())
            digest.update(entries[key][file])
    with knobs.cache.scope():
        knobs.cache.dir = str(kernels.CACHE_ROOT / "triton_bin" / digest.hexdigest()[:32])
        for key, files in entries.items():
            meta = next(f for f in files if f.endswith(".json"))
            manager = get_cache_manager(key)
            if manager.get_group(meta) is None:  # written by an earlier load of the same file otherwise
                manager.put_group(meta, {f: manager.put(bytes(data), f) for f, data in files.items()})
        build_launchers(launcher_signatures(artifacts))
        yield len(entries)


def launcher_signatures(artifacts: Mapping[str, memoryview]) -> list[tuple[str, ...]]:
    """The kernels' argument signatures a file records; none if the record is malformed."""
    recorded = artifacts.get(LAUNCHERS)
    try:
        signatures = json.loads(bytes(recorded)) if recorded is not None else []
    except ValueError:
        return []
    if not (isinstance(signatures, list) and all(_is_signature(sig) for sig in signatures)):
        return []
    return [tuple(sig) for sig in signatures]


def _is_signature(types: Any) -> bool:
    """Whether `types` is a list of Triton argument type names (what a launcher is generated from)."""
    return isinstance(types, list) and all(isinstance(t, str) and _TYPE.fullmatch(t) for t in types)


def build_launchers(signatures: list[tuple[str, ...]]) -> None:
    """Build the launchers of these signatures into Triton's cache, in threads (the compiler runs
    outside the GIL). Alongside: Triton's hash of its own installation, which its cache lookups need
    (0.37 s of the same load), and, before Triton's CUDA driver is set up in this process, the
    driver's utility extension (the set-up that builds it took 0.28 s of that load). Whatever fails
    to build here is built where Triton builds it without this: at the driver's set-up, at a
    kernel's first launch."""
    nvidia = _launcher_template()
    if nvidia is None or not signatures:
        return
    from concurrent.futures import ThreadPoolExecutor

    from .triton_key import fusegraph_key

    jobs = [(build_launcher, sig) for sig in signatures]
    if not _driver_started():  # its utility extension is built the same way, once per machine
        jobs.append((_build_once, nvidia, "cuda_utils", lambda: (Path(nvidia.dirname) / "driver.c").read_text()))
    with ThreadPoolExecutor(min(len(jobs) + 1, os.cpu_count() or 1)) as pool:
        futures = [pool.submit(fusegraph_key)] + [pool.submit(*job) for job in jobs]
        for future in futures:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - any failure only defers the build to the first launch
                continue


# (Triton cache folder, signature or module name) -> set once this process built it
_built: dict[tuple[str, Any], threading.Event] = {}
_built_lock = threading.Lock()


def build_launcher(signature: tuple[str, ...]) -> None:
    """Build one signature's launcher now, in this thread (kernels.py: a compile thread, as soon as
    its kernel is compiled), unless this process built it into the current Triton cache already (a
    loaded file's folder is a cache of its own: saved_kernels)."""
    nvidia = _launcher_template()
    if nvidia is not None:
        _build_once(nvidia, signature, lambda: nvidia.make_launcher({}, dict(enumerate(signature)), None))


def _build_once(nvidia: Any, what: tuple[str, ...] | str, source: Callable[[], str]) -> None:
    """Build a launcher (`what` its signature) or the named utility module into the current Triton
    cache, unless this process did already; a thread asking while another builds it waits for that
    build (compile_pool.early_launcher starts them before the kernel is compiled)."""
    key = (_cache_dir(), what)
    with _built_lock:
        done = _built.get(key)
        if done is None:
            _built[key] = done = threading.Event()
            building = True
        else:
            building = False
    if not building:
        done.wait()
        return
    try:
        _build(nvidia, source(), what if isinstance(what, str) else "__triton_launcher")
    except Exception:
        with _built_lock:
            _built.pop(key, None)
        raise
    finally:
        done.set()


def _cache_dir() -> str:
    try:
        from triton import knobs  # Triton >= 3.4
    except ImportError:
        return ""
    return str(knobs.cache.dir)


def _launcher_template() -> Any:
    """Triton's CUDA driver module, where it generates launchers from a template (Triton 3.4 to 3.7,
    private API, used exactly as its CUDA launcher uses it); None elsewhere (3.8 builds them otherwise)."""
    try:
        from triton.backends.nvidia import driver as nvidia
        from triton.runtime.build import compile_module_from_src  # noqa: F401
    except ImportError:
        return None
    return nvidia if callable(getattr(nvidia, "make_launcher", None)) else None


def _build(nvidia: Any, source: str, name: str) -> None:
    from triton.runtime.build import compile_module_from_src

    compile_module_from_src(src=source, name=name, library_dirs=nvidia.library_dirs(),
                            include_dirs=nvidia.include_dirs, libraries=nvidia.libraries)


def _driver_started() -> bool:
    from triton.runtime.driver import driver

    return getattr(driver, "_default", None) is not None


def cuda_arch(device: Any) -> int | None:
    """The compute capability of a CUDA device as Triton writes it (90 for an H200); None elsewhere."""
    if getattr(device, "type", None) != "cuda":
        return None
    from .device import torch

    major, minor = torch().cuda.get_device_capability(device)
    return major * 10 + minor


def usable_entries(artifacts: Mapping[str, memoryview], arch: int | None) -> dict[str, dict[str, memoryview]]:
    """Saved cache entries (Triton hash -> file name -> bytes) built by this Triton for `arch`."""
    recorded = artifacts.get(IDENTITY)
    if recorded is None or arch is None:
        return {}
    from .device import triton

    try:
        identity = json.loads(bytes(recorded))
    except ValueError:
        return {}
    if identity != {"triton": triton().__version__, "arch": arch}:
        return {}
    entries: dict[str, dict[str, memoryview]] = {}
    for name, data in artifacts.items():
        if name.startswith(PREFIX):
            key, _, file = name[len(PREFIX):].partition("/")
            if _HASH.fullmatch(key) and _FILE.fullmatch(file) and ".." not in file:
                entries.setdefault(key, {})[file] = data
    return {k: files for k, files in entries.items()
            if len(files) == len(KEEP) and sum(f.endswith(".json") for f in files) == 1}

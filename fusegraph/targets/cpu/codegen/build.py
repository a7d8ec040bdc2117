"""Compile generated kernels into one shared library, cache it on disk, load it with ctypes.

All kernels of a program go into ONE translation unit: one compiler run, one dlopen. The library is
cached under $FUSEGRAPH_CACHE_DIR (else ~/.cache/fusegraph/kernels), named by a hash of the source,
the flags and the compiler's identity (its version and what -march=native enables here), so a cache
shared between machines never serves code built for another CPU. The directory must be private
(owned by this user, not group- or world-writable): a library found there is loaded and run.
Files are written to a temporary name and renamed, so a reader never sees half a library.

Flags: no -ffast-math. -ffp-contract=off keeps a*b+c two roundings as numpy computes it;
-fno-math-errno and -fno-trapping-math only drop errno/FP-flag side effects (values are unchanged)
so sqrt, floor, rint and selects vectorize; -fwrapv makes signed overflow wrap as numpy's does;
-mprefer-vector-width=512 uses AVX-512 where -march=native has it (gcc picks 256 otherwise): the
float32 exp/erf kernels run about 1.3x faster with it (ignored on CPUs without AVX-512).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .... import debug
from ....errors import CompileError, InputError
from .cmath import PRELUDE
from .kernels import KernelSource, coalesce

FLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-fPIC", "-shared", "-fvisibility=hidden",
         "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-fwrapv")
COMPILER = "cc"


def find_compiler(name: str = COMPILER) -> str:
    path = shutil.which(name)
    if path is None:
        raise CompileError(f"no C compiler: `{name}` is not on PATH; the cpu target compiles its fused "
                           "kernels with gcc (install it, e.g. `apt install gcc`, or use another target)")
    return path


@functools.cache
def compiler_identity(cc: str) -> str:
    """The compiler's version and the target macros -march=native turns on (the CPU it builds for)."""
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout
        macros = subprocess.run([cc, "-march=native", "-fopenmp", "-dM", "-E", "-x", "c", os.devnull],
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"C compiler {cc} does not run: {e}") from None
    return version + "".join(sorted(macros.splitlines(keepends=True)))


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    """The kernel cache directory, created private; refuses one that others could write into."""
    d = Path(path or debug.kernel_cache_dir() or Path.home() / ".cache" / "fusegraph" / "kernels")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = d.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise CompileError(f"kernel cache {d} is not private (owner uid {st.st_uid}, mode {st.st_mode & 0o777:o});"
                           " libraries found there would be loaded and run: use a directory only you can write")
    return d


def translation_unit(sources: Sequence[KernelSource]) -> str:
    """The prelude, every helper once, every distinct kernel once."""
    helpers: dict[str, str] = {}
    kernels: dict[str, str] = {}
    for s in sources:
        for name, code in s.helpers:
            if helpers.setdefault(name, code) != code:
                raise CompileError(f"two different definitions of C helper {name}")
        if kernels.setdefault(s.name, s.code) != s.code:
            raise CompileError(f"two different kernels named {s.name}")
    return "\n".join([PRELUDE.strip(), *helpers.values(), *kernels.values()])


def _compile(source: str, out: Path, cc: str, flags: Sequence[str]) -> None:
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".build-") as tmp:
        c_file, so_file = Path(tmp) / "kernels.c", Path(tmp) / "kernels.so"
        c_file.write_text(source)
        res = subprocess.run([cc, *flags, "-o", str(so_file), str(c_file), "-lm"], capture_output=True, text=True)
        if res.returncode != 0:
            kept = out.with_suffix(".failed.c")
            kept.write_text(source)
            raise CompileError(f"{cc} failed on generated kernels (source kept in {kept}):\n{res.stderr[-4000:]}")
        os.replace(c_file, out.with_suffix(".c"))  # for reading; the .so is what is loaded
        os.replace(so_file, out)


def build_library(sources: Sequence[KernelSource], *, threads: int | None = None,
                  cache: str | os.PathLike | None = None, compiler: str = COMPILER,
                  flags: Sequence[str] = FLAGS) -> Library:
    """Compile `sources` (deduplicated) into one library, or load it from the cache."""
    source = translation_unit(sources)
    path = library_path(source, cache=cache, compiler=compiler, flags=flags)
    if not path.exists():
        _compile(source, path, find_compiler(compiler), flags)
    return Library(path, source, sources, threads)


def library_path(source: str, *, cache: str | os.PathLike | None = None, compiler: str = COMPILER,
                 flags: Sequence[str] = FLAGS) -> Path:
    """Where the cache keeps (or would keep) the library built from translation unit `source`."""
    cc = find_compiler(compiler)
    key = hashlib.sha256("\0".join([source, " ".join(flags), compiler_identity(cc)]).encode()).hexdigest()
    return cache_dir(cache) / f"fg_{key[:40]}.so"


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Library:
    """A loaded kernel library: `lib[name]` or `lib.name` is a Kernel; `source` is its C text."""

    def __init__(self, path: Path, source: str, sources: Sequence[KernelSource], threads: int | None):
        self.path, self.source = path, source
        self.threads = int(threads) if threads else default_threads()
        if self.threads < 1:
            raise CompileError(f"threads must be >= 1, got {threads}")
        self._dll = ctypes.CDLL(str(path))
        self.kernels = {s.name: Kernel(s, self._dll[s.name], self.threads) for s in sources}

    def __getitem__(self, name: str) -> Kernel:
        return self.kernels[name]

    def __getattr__(self, name: str) -> Kernel:
        try:
            return self.__dict__["kernels"][name]
        except KeyError:
            raise AttributeError(name) from None


_PTRS = ctypes.c_void_p
_DIMS = ctypes.c_int64


class Kernel:
    """A compiled kernel. `kernel(out, *inputs)` runs it on numpy arrays; `bind(...)` and
    `bind_addresses(...)` return a zero-argument callable with every argument prepared, for the
    runtime's steps (no allocation or conversion per call)."""

    def __init__(self, source: KernelSource, fn, threads: int):
        self.source, self.name, self.threads = source, source.name, threads
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        fn.restype = None
        self._fn = fn

    def __call__(self, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        self.bind(out, *self._relayout(inputs))()
        return out

    def bind_addresses(self, out: int, inputs: Sequence[int], dims: Sequence[int] = (),
                       threads: int | None = None) -> Callable[[], None]:
        """A call on raw buffer addresses: for a pointwise kernel, `dims` are the output lens then
        each input's strides in elements (Layout.dims()); a fixed-shape kernel ignores them."""
        if len(inputs) != len(self.source.in_dtypes):
            raise InputError(f"kernel {self.name}: {len(self.source.in_dtypes)} inputs, given {len(inputs)}")
        ptrs = (_PTRS * (1 + len(inputs)))(out, *inputs)
        d = (_DIMS * max(len(dims), 1))(*dims)
        call = functools.partial(self._fn, ptrs, d, int(threads or self.threads))
        call.args_keepalive = (ptrs, d)  # type: ignore[attr-defined]
        return call

    def bind(self, out: np.ndarray, *inputs: np.ndarray, threads: int | None = None) -> Callable[[], None]:
        """A call on these arrays (kept alive by the callable); they must stay where they are."""
        src = self.source
        if out.dtype != src.out_dtype.np or not out.flags.c_contiguous or not out.flags.writeable:
            raise InputError(f"kernel {self.name}: output must be a writeable contiguous {src.out_dtype} array")
        if len(inputs) != len(src.in_dtypes):
            raise InputError(f"kernel {self.name}: {len(src.in_dtypes)} inputs, given {len(inputs)}")
        for k, (a, dt) in enumerate(zip(inputs, src.in_dtypes)):
            if a.dtype != dt.np:
                raise InputError(f"kernel {self.name}: input {k} is {a.dtype}, expected {dt}")
        if src.ndim is not None:
            try:
                views = [np.broadcast_to(a, out.shape) for a in inputs]
            except ValueError:
                raise InputError(f"kernel {self.name}: inputs {[a.shape for a in inputs]} do not broadcast "
                                 f"to the output {out.shape}") from None
            layout = coalesce(out.shape, [_elem_strides(v, self.name) for v in views]).padded(src.ndim)
            dims = layout.dims()
        else:
            views, dims = list(inputs), []
            if out.shape != src.out_lens:
                raise InputError(f"kernel {self.name}: output shape {out.shape}, expected {src.out_lens}")
            for k, (a, shape) in enumerate(zip(inputs, src.in_shapes)):
                if not _same_layout(a, shape.lens, shape.strides, self.name):
                    raise InputError(f"kernel {self.name}: input {k} is {a.shape} with strides "
                                     f"{_elem_strides(a, self.name)}, expected {shape}")
        call = self.bind_addresses(out.ctypes.data, [v.ctypes.data for v in views], dims, threads)
        call.arrays_keepalive = (out, views)  # type: ignore[attr-defined]
        return call

    def _relayout(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """For a fixed-shape kernel, copies of inputs into the layouts it was generated for."""
        src = self.source
        if src.in_shapes is None:
            return [np.asarray(a) for a in inputs]
        out = []
        for a, shape in zip(inputs, src.in_shapes):
            a = np.asarray(a)
            if a.shape == shape.lens and not _same_layout(a, shape.lens, shape.strides, self.name):
                span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape.lens, shape.strides) if n > 0)
                buf = np.empty(span, a.dtype)
                view = np.lib.stride_tricks.as_strided(
                    buf, shape.lens, [s * a.itemsize for s in shape.strides], writeable=True)
                view[...] = a
                a = view
            out.append(a)
        return out


def _elem_strides(a: np.ndarray, name: str) -> tuple[int, ...]:
    if any(s % a.itemsize for s in a.strides):
        raise InputError(f"kernel {name}: array strides {a.strides} are not whole elements")
    return tuple(s // a.itemsize for s in a.strides)


def _same_layout(a: np.ndarray, lens, strides, name: str) -> bool:
    return tuple(a.shape) == tuple(lens) and all(
        n == 1 or s == e for n, s, e in zip(lens, _elem_strides(a, name), strides))

"""Finding and loading libdnnl (oneDNN v3, GNU OpenMP build) and declaring the C API we call.

Loaded on first use, never at `import fusegraph`. Only the functions and enum values the binding uses
are declared; their values were checked against the v3.2 headers (onednn-devel-cpu-gomp 2023.2.0).
The library is found in the environment's lib folder, next to the installed wheel's files, or on the
loader's path, in that order.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import sys
import threading
from ctypes import POINTER, c_float, c_int, c_int32, c_int64, c_size_t, c_uint, c_void_p
from pathlib import Path

from ....errors import CompileError, FusegraphError, TargetError

SONAME = "libdnnl.so.3"
PIP_PACKAGE = "onednn-cpu-gomp==2023.2.0"
INSTALL_HINT = (f"the cpu target needs oneDNN 3.x built with GNU OpenMP: `pip install {PIP_PACKAGE}` "
                "(PyPI's `onednn` 2026 builds need SYCL/TBB and do not load alone)")

MAX_NDIMS = 12
Dims = c_int64 * MAX_NDIMS

# -- enums (dnnl_types.h / dnnl_common_types.h, v3.2) -----------------------------------------------
STATUS = {0: "success", 1: "out_of_memory", 2: "invalid_arguments", 3: "unimplemented",
          4: "last_impl_reached", 5: "runtime_error", 6: "not_required"}
DT = {"f16": 1, "bf16": 2, "f32": 3, "s32": 4, "s8": 5, "u8": 6}
FORMAT_TAG_ANY = 1
FORMAT_KIND_ANY, FORMAT_KIND_BLOCKED = 1, 2
CPU_ENGINE = 1
STREAM_IN_ORDER = 1
FORWARD_INFERENCE = 96
CONVOLUTION_DIRECT, DECONVOLUTION_DIRECT = 0x1, 0xA
POOLING = {"max": 0x1FF, "avg_include_padding": 0x2FF, "avg_exclude_padding": 0x3FF}
ELTWISE = {"relu": 0x20, "tanh": 0x21, "elu": 0x22, "square": 0x23, "abs": 0x24, "sqrt": 0x25,
           "linear": 0x26, "soft_relu": 0x27, "hardsigmoid": 0x28, "logistic": 0x29, "exp": 0x2A,
           "gelu_tanh": 0x2B, "swish": 0x2C, "log": 0x2D, "clip": 0x2E, "pow": 0x30, "gelu_erf": 0x31,
           "round": 0x32, "mish": 0x33, "hardswish": 0x34}
BINARY = {"add": 0x1FFF0, "mul": 0x1FFF1, "max": 0x1FFF2, "min": 0x1FFF3, "div": 0x1FFF4, "sub": 0x1FFF5}
SCRATCHPAD_USER = 1
FPMATH = {"strict": 0, "bf16": 1, "f16": 2, "any": 3, "tf32": 4}
# queries
Q_IMPL_INFO_STR = 8
Q_SRC_MD, Q_WEIGHTS_MD, Q_DST_MD, Q_SCRATCHPAD_MD, Q_EXEC_ARG_MD = 129, 131, 133, 136, 255
Q_NDIMS, Q_DIMS, Q_DATA_TYPE, Q_FORMAT_KIND = 256, 257, 258, 262
Q_STRIDES, Q_INNER_NBLKS = 14, 263
Q_SUBMEMORY_OFFSET, Q_PADDED_DIMS, Q_PADDED_OFFSETS, Q_INNER_BLKS, Q_INNER_IDXS = 259, 260, 261, 264, 265
# execution argument ids
ARG_SRC, ARG_SRC_1, ARG_DST, ARG_WEIGHTS, ARG_BIAS, ARG_SCRATCHPAD = 1, 2, 17, 33, 41, 80
# int8 arithmetic: runtime scales / zero points are arguments ARG_ATTR_SCALES | ARG_SRC etc.
ARG_ATTR_SCALES, ARG_ATTR_ZERO_POINTS = 4096, 8192
# dnnl_cpu_isa_t bits: avx2_vnni is avx2 | 0x8, avx512_core_vnni is avx512_core | 0x40 (amx builds on both)
ISA_VNNI_BITS = 0x8 | 0x40


def arg_post_op_src1(index: int) -> int:
    """DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1: the second input of binary post-op `index`."""
    return 32768 * (index + 1) | ARG_SRC_1


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", c_int), ("memory", c_void_p)]


class Version(ctypes.Structure):
    _fields_ = [("major", c_int), ("minor", c_int), ("patch", c_int), ("hash", ctypes.c_char_p),
                ("cpu_runtime", c_uint), ("gpu_runtime", c_uint)]


_P = c_void_p
_PP = POINTER(c_void_p)
# name -> (restype, argtypes); dnnl_status_t is an int
_API = {
    "dnnl_version": (POINTER(Version), []),
    "dnnl_engine_create": (c_int, [_PP, c_int, c_size_t]),
    "dnnl_stream_create": (c_int, [_PP, _P, c_uint]),
    "dnnl_stream_wait": (c_int, [_P]),
    "dnnl_stream_destroy": (c_int, [_P]),
    "dnnl_memory_desc_create_with_strides": (c_int, [_PP, c_int, Dims, c_int, Dims]),
    "dnnl_memory_desc_create_with_tag": (c_int, [_PP, c_int, Dims, c_int, c_int]),
    "dnnl_memory_desc_clone": (c_int, [_PP, _P]),
    "dnnl_memory_desc_destroy": (c_int, [_P]),
    "dnnl_memory_desc_query": (c_int, [_P, c_int, c_void_p]),
    "dnnl_memory_desc_equal": (c_int, [_P, _P]),
    "dnnl_memory_desc_get_size": (c_size_t, [_P]),
    "dnnl_memory_create": (c_int, [_PP, _P, _P, _P]),
    "dnnl_memory_set_data_handle": (c_int, [_P, _P]),
    "dnnl_memory_destroy": (c_int, [_P]),
    "dnnl_primitive_attr_create": (c_int, [_PP]),
    "dnnl_primitive_attr_destroy": (c_int, [_P]),
    "dnnl_primitive_attr_set_scratchpad_mode": (c_int, [_P, c_int]),
    "dnnl_primitive_attr_set_fpmath_mode": (c_int, [_P, c_int]),
    "dnnl_primitive_attr_set_post_ops": (c_int, [_P, _P]),
    "dnnl_primitive_attr_set_scales_mask": (c_int, [_P, c_int, c_int]),
    "dnnl_primitive_attr_set_zero_points_mask": (c_int, [_P, c_int, c_int]),
    "dnnl_get_effective_cpu_isa": (c_int, []),
    "dnnl_post_ops_create": (c_int, [_PP]),
    "dnnl_post_ops_destroy": (c_int, [_P]),
    "dnnl_post_ops_append_eltwise": (c_int, [_P, c_int, c_float, c_float]),
    "dnnl_post_ops_append_sum": (c_int, [_P, c_float, c_int32, c_int]),
    "dnnl_post_ops_append_binary": (c_int, [_P, c_int, _P]),
    "dnnl_primitive_desc_query": (c_int, [_P, c_int, c_int, c_void_p]),
    "dnnl_primitive_desc_query_md": (_P, [_P, c_int, c_int]),
    "dnnl_primitive_desc_destroy": (c_int, [_P]),
    "dnnl_primitive_create": (c_int, [_PP, _P]),
    "dnnl_primitive_execute": (c_int, [_P, _P, c_int, POINTER(ExecArg)]),
    "dnnl_primitive_destroy": (c_int, [_P]),
    "dnnl_reorder_primitive_desc_create": (c_int, [_PP, _P, _P, _P, _P, _P]),
    "dnnl_convolution_forward_primitive_desc_create":
        (c_int, [_PP, _P, c_int, c_int, _P, _P, _P, _P, Dims, Dims, Dims, Dims, _P]),
    "dnnl_deconvolution_forward_primitive_desc_create":
        (c_int, [_PP, _P, c_int, c_int, _P, _P, _P, _P, Dims, Dims, Dims, Dims, _P]),
    "dnnl_matmul_primitive_desc_create": (c_int, [_PP, _P, _P, _P, _P, _P, _P]),
    "dnnl_pooling_forward_primitive_desc_create":
        (c_int, [_PP, _P, c_int, c_int, _P, _P, Dims, Dims, Dims, Dims, Dims, _P]),
}


def candidate_paths() -> list[Path]:
    """Where libdnnl may be, best first: the environment's lib folders, then the installed wheel's own
    file list (covers --user and --prefix installs)."""
    found: list[Path] = []
    for prefix in dict.fromkeys((sys.prefix, sys.exec_prefix, sys.base_prefix)):
        found.append(Path(prefix) / "lib" / SONAME)
    try:
        dist = importlib.metadata.distribution(PIP_PACKAGE.split("==")[0])
        found += [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name == SONAME]
    except importlib.metadata.PackageNotFoundError:
        pass
    return list(dict.fromkeys(p.resolve() for p in found))


class Library:
    """The loaded libdnnl: its declared functions as attributes, one CPU engine, libgomp's thread knob."""

    def __init__(self, dll: ctypes.CDLL, path: str):
        self.dll, self.path = dll, path
        for name, (restype, argtypes) in _API.items():
            fn = getattr(dll, name)
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name, fn)
        v = self.dnnl_version().contents
        self.version = (v.major, v.minor, v.patch)
        if v.major != 3:
            raise TargetError(f"{path} is oneDNN {v.major}.{v.minor}; the binding needs 3.x ({INSTALL_HINT})")
        if v.cpu_runtime != 2:  # DNNL_RUNTIME_OMP: the threads setting goes through OpenMP
            raise TargetError(f"{path} is not an OpenMP build of oneDNN ({INSTALL_HINT})")
        engine = c_void_p()
        check(self.dnnl_engine_create(ctypes.byref(engine), CPU_ENGINE, 0), "creating the CPU engine")
        self.engine = engine
        # libdnnl links libgomp by soname, so this finds the very copy it uses
        gomp = ctypes.CDLL("libgomp.so.1")
        self.omp_set_num_threads = gomp.omp_set_num_threads
        self.omp_set_num_threads.argtypes, self.omp_set_num_threads.restype = [c_int], None
        self._local = threading.local()

    def stream(self) -> c_void_p:
        """The calling thread's stream (a stream is not shared between threads)."""
        s = getattr(self._local, "stream", None)
        if s is None:
            s = c_void_p()
            check(self.dnnl_stream_create(ctypes.byref(s), self.engine, STREAM_IN_ORDER), "creating a stream")
            self._local.stream = s
        return s


def open_library(paths: list[Path], soname: str = SONAME) -> Library:
    """The first of `paths` (then `soname` on the loader's path) that loads as oneDNN 3.x."""
    errors = []
    for path in [str(p) for p in paths if p.exists()] + [soname]:
        try:
            return Library(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL), path)
        except OSError as e:  # not there, or a dependency (libgomp) missing: try the next place
            errors.append(f"{path}: {e}")
    raise TargetError(f"oneDNN ({SONAME}) could not be loaded; {INSTALL_HINT}. Tried: " + "; ".join(errors))


@functools.cache
def load() -> Library:
    """The process-wide libdnnl; TargetError with an install hint when it cannot be loaded."""
    return open_library(candidate_paths())


def available() -> tuple[bool, str]:
    """(True, path) when libdnnl loads here, else (False, why): for skipping tests and choosing kernels."""
    try:
        return True, load().path
    except TargetError as e:
        return False, str(e)


def check(status: int, what: str, error: type[FusegraphError] = CompileError) -> None:
    if status:
        raise error(f"oneDNN: {what} failed ({STATUS.get(status, status)})")


def dims(values) -> Dims:
    d = Dims()
    for i, v in enumerate(values):
        d[i] = int(v)
    return d


def default_threads() -> int:
    """All cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

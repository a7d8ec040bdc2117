"""The one place environment variables are read. They are for debugging only, never configuration.

FUSEGRAPH_TRACE_PASSES=1       print each pass with its time and whether it changed the program
FUSEGRAPH_DISABLE_PASSES=a,b   skip these passes by name
FUSEGRAPH_DUMP_DIR=DIR         write the IR text after every pass that changed something
FUSEGRAPH_VERIFY=full|cheap|off  how thoroughly to verify the IR after a change (default cheap;
                               the test suite sets full)
FUSEGRAPH_CACHE_DIR=DIR        where the cpu target keeps compiled kernels (default ~/.cache/fusegraph/kernels)
FUSEGRAPH_SIGN_KEY=KEY         the HMAC key compiled files are signed and checked with when none is given
FUSEGRAPH_GPU_GEMM=MODE        the gpu target's GEMM epilogue choice when GpuTarget(gemm=...) is not given:
                               auto (timed), triton (the Triton template only) or library (cuBLAS only)
FUSEGRAPH_COMPILE_WORKERS=N    the gpu target's Triton compile worker processes (0: compiles in threads
                               alone; default: one a core on 4 cores or more, none under Triton's interpreter)
"""

from __future__ import annotations

import os


def trace_passes() -> bool:
    return os.environ.get("FUSEGRAPH_TRACE_PASSES", "") not in ("", "0")


def disabled_passes() -> frozenset[str]:
    return frozenset(p.strip() for p in os.environ.get("FUSEGRAPH_DISABLE_PASSES", "").split(",") if p.strip())


def dump_dir() -> str | None:
    return os.environ.get("FUSEGRAPH_DUMP_DIR") or None


def verify_level() -> str:
    level = os.environ.get("FUSEGRAPH_VERIFY", "cheap")
    return level if level in ("full", "cheap", "off") else "cheap"


def kernel_cache_dir() -> str | None:
    return os.environ.get("FUSEGRAPH_CACHE_DIR") or None


def sign_key() -> str | None:
    return os.environ.get("FUSEGRAPH_SIGN_KEY") or None


def gpu_gemm() -> str | None:
    return os.environ.get("FUSEGRAPH_GPU_GEMM") or None


def compile_workers() -> int | None:
    """FUSEGRAPH_COMPILE_WORKERS as a count (a value that is no number: 0); None when unset."""
    setting = os.environ.get("FUSEGRAPH_COMPILE_WORKERS", "").strip()
    if not setting:
        return None
    try:
        return max(0, int(setting))
    except ValueError:
        return 0


def triton_interpreter() -> bool:
    """Whether Triton's interpreter runs the kernels (TRITON_INTERPRET, Triton's own variable)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def native_programs() -> bool:
    """cpu target: run straight-line native steps as one C call (targets/cpu/native_program.py);
    FUSEGRAPH_NATIVE_PROGRAMS=0 turns it off, to compare or to bisect."""
    return os.environ.get("FUSEGRAPH_NATIVE_PROGRAMS", "1") != "0"

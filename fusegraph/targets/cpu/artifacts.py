"""What a compiled file keeps for the cpu target besides the IR, so that loading it rebuilds nothing:
oneDNN's packed weights and the generated kernels.

Lowering packs every conv/matmul weight into the layout its oneDNN kernel chose (a reorder of every
weight byte: ~85% of a load's time when redone) and generates C for fused reductions. `building`
records both while the target lowers; `export` turns them into the file's artifacts:

    weights/onednn/N     packed weight N, raw, in its kernel's layout (checked with the weights, lazily)
    onednn_packing.json  what each was packed from (an IR literal and the view of it) and for which layout
    kernels.c            the generated library's source, as compiled
    kernels.json         the generated kernels, by what they were generated for (KernelSource fields)

`providing` hands them to the next lowering of the same program (`Target.load`): a weight whose
literal view and layout match a saved packing is mapped from the file without a copy, any other is
packed again (another CPU's kernels want other layouts). Saved kernels are used only when this
fusegraph version wrote them and the private kernel cache holds the library built from exactly
kernels.c — code this user's fusegraph generated and compiled, of which each saved kernel must be a
verbatim part; otherwise they are generated again from the IR. So the C a file carries is never
compiled as it stands: what runs is code generated here.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...errors import CompiledFileError, CompileError, FusegraphError
from ...ir.program import Program
from .context import bound

PACKED, PACKING_INDEX = "weights/onednn/", "onednn_packing.json"
LIBRARY, KERNELS = "kernels.c", "kernels.json"
# how a weight view is named: (literal position in the IR text, byte offset, shape, byte strides, dtype)
ViewName = tuple[int, int, tuple[int, ...], tuple[int, ...], str]


def _extent(a: np.ndarray) -> tuple[int, int]:
    """The first and one-past-last byte addresses `a` reads."""
    lo = hi = a.ctypes.data
    for n, s in zip(a.shape, a.strides):
        lo, hi = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
    return lo, hi + a.itemsize


class LiteralIndex:
    """Names the IR literal a weight view reads from, by address: the same name for the same view of
    the same literal when the program is compiled and when it is read back from its file."""

    def __init__(self, program: Program):
        spans: dict[int, list[tuple[int, int]]] = {}
        pos = 0
        for m in program.modules_in_order():  # numbered as the IR text numbers them (%N)
            for ins in m.instructions:
                value = ins.literal if ins.is_literal else None
                if isinstance(value, np.ndarray) and value.size and value.dtype.kind in "biuf":
                    lo, hi = _extent(value)
                    spans.setdefault(lo, []).append((hi, pos))
                pos += 1
        self._spans = spans
        self._starts = sorted(spans)

    def __call__(self, a: np.ndarray) -> list[ViewName]:
        if not a.size:
            return []
        lo, hi = _extent(a)
        i = bisect.bisect_right(self._starts, lo) - 1
        if i < 0:
            return []
        start = self._starts[i]  # literals sharing bytes (equal blobs of a file) share a start
        return [(pos, a.ctypes.data - start, tuple(a.shape), tuple(a.strides), a.dtype.str)
                for end, pos in self._spans[start] if hi <= end]


@dataclasses.dataclass
class Built:
    """What one lowering packed and generated; `library` is set once the kernels are built."""

    packing: Any  # onednn.PackingCache
    kernels: Any  # codegen.KernelCache
    library: Any = None

    @property
    def packed_from_file(self) -> int:
        """How many weights were taken from a compiled file instead of packed."""
        return self.packing.hits


@dataclasses.dataclass
class _Provided:
    program: Program
    packed: dict[tuple[ViewName, str], memoryview]
    kernels: dict[str, Any]


_PROVIDED: contextvars.ContextVar[_Provided | None] = contextvars.ContextVar("cpu_artifacts", default=None)


@contextlib.contextmanager
def building(program: Program) -> Iterator[Built]:
    """Record what lowering `program` packs and generates; take what `providing` gives for it."""
    from . import onednn
    from .codegen import KernelCache, kernel_cache
    from .shared import active

    given = _PROVIDED.get()
    given = given if given is not None and given.program is program else None
    shared = active()  # a dynamic program's other specializations: their packings serve this one too
    built = Built(onednn.PackingCache(LiteralIndex(program), given.packed if given else None,
                                      shared.packing if shared is not None else None),
                  KernelCache(program.modules, given.kernels if given else None))
    with onednn.packing_cache(built.packing), kernel_cache(built.kernels):
        yield built


def providing(program: Program, artifacts: Mapping[str, memoryview]) -> contextlib.AbstractContextManager:
    """Make the artifacts of `program`'s file available to the `building` of `program` in this block."""
    return bound(_PROVIDED, _Provided(program, _read_packed(artifacts), _read_kernels(artifacts)))


# -- writing ----------------------------------------------------------------------------------------
def export(built: Built | None) -> dict[str, bytes | memoryview]:
    """The artifacts of one lowering (the packed weights still in use, the generated kernels)."""
    from .codegen import source_to_json
    from .onednn import _lib

    if built is None:
        return {}
    out: dict[str, bytes | memoryview] = {}
    parts: dict[int, str] = {}  # id of a packed array -> its part (one array may serve several names)
    entries = []
    for (view, layout), array in sorted(built.packing.packed().items(), key=lambda kv: repr(kv[0])):
        if id(array) not in parts:
            parts[id(array)] = PACKED + str(len(parts))
            out[parts[id(array)]] = array.ravel(order="K").view(np.uint8).data  # its bytes as they lie
        pos, offset, shape, strides, dtype = view
        entries.append({"literal": pos, "offset": offset, "shape": list(shape), "strides": list(strides),
                        "dtype": dtype, "layout": layout, "part": parts[id(array)]})
    if entries:
        version = ".".join(map(str, _lib.load().version))  # for readers: the layouts say all
        out[PACKING_INDEX] = _json({"onednn": version, "packed": entries})
    if built.kernels.kernels and built.library is not None:
        from ... import __version__

        out[LIBRARY] = built.library.source.encode()
        out[KERNELS] = _json({"fusegraph": __version__,
                              "kernels": {k: source_to_json(s) for k, s in sorted(built.kernels.kernels.items())}})
    return out


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


# -- reading ----------------------------------------------------------------------------------------
def _load_json(artifacts: Mapping[str, memoryview], name: str) -> Any:
    try:
        return json.loads(bytes(artifacts[name]))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise CompiledFileError(f"cpu artifact {name} is not JSON: {e}") from None


def _read_packed(artifacts: Mapping[str, memoryview]) -> dict[tuple[ViewName, str], memoryview]:
    if PACKING_INDEX not in artifacts:
        return {}
    index = _load_json(artifacts, PACKING_INDEX)
    entries = index.get("packed") if isinstance(index, dict) else None
    if not isinstance(entries, list):
        raise CompiledFileError(f"cpu artifact {PACKING_INDEX} lists no packed weights")
    out = {}
    for e in entries:
        try:
            view = (_int(e["literal"]), _int(e["offset"]), _ints(e["shape"]), _ints(e["strides"]), _str(e["dtype"]))
            layout, part = _str(e["layout"]), _str(e["part"])
        except (TypeError, KeyError, ValueError) as err:
            raise CompiledFileError(f"cpu artifact {PACKING_INDEX} has a malformed entry: {err}") from None
        if not part.startswith(PACKED) or part not in artifacts:
            raise CompiledFileError(f"cpu artifact {PACKING_INDEX} names {part!r}, which the file does not hold")
        out[(view, layout)] = artifacts[part]  # its size is checked against the layout where it is used
    return out


def _read_kernels(artifacts: Mapping[str, memoryview]) -> dict[str, Any]:
    from ... import __version__
    from .codegen import library_path, source_from_json

    if KERNELS not in artifacts or LIBRARY not in artifacts:
        return {}
    saved = _load_json(artifacts, KERNELS)
    if not isinstance(saved, dict) or saved.get("fusegraph") != __version__ or not isinstance(saved.get("kernels"), dict):
        return {}  # another fusegraph's generators: generate again
    try:
        library = str(artifacts[LIBRARY], "utf-8")
        if not library_path(library).exists():
            return {}  # not built here: generate from the IR (a file's C is not compiled as it stands)
    except UnicodeDecodeError:
        raise CompiledFileError(f"cpu artifact {LIBRARY} is not UTF-8") from None
    except CompileError:
        return {}  # no compiler: the build will say so if the program needs one
    try:
        kernels = {_str(k): source_from_json(v) for k, v in saved["kernels"].items()}
    except (TypeError, KeyError, ValueError, AttributeError, RecursionError, FusegraphError) as e:
        raise CompiledFileError(f"cpu artifact {KERNELS} has a malformed kernel: {e}") from None
    for key, src in kernels.items():
        exported = f"FG_EXPORT void {src.name}(" in src.code  # the symbol the library is asked for
        if not exported or src.code not in library or any(code not in library for _, code in src.helpers):
            raise CompiledFileError(f"cpu artifact {KERNELS}: kernel {key!r} is not part of {LIBRARY}")
    return kernels


def _int(x: Any) -> int:
    if type(x) is not int:
        raise ValueError(f"{x!r:.40} is not an integer")
    return x


def _ints(x: Any) -> tuple[int, ...]:
    if not isinstance(x, list):
        raise ValueError(f"{x!r:.40} is not a list")
    return tuple(_int(v) for v in x)


def _str(x: Any) -> str:
    if not isinstance(x, str):
        raise ValueError(f"{x!r:.40} is not a string")
    return x

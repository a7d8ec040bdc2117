"""Generated kernels kept beyond one process: a compiled file stores what its lowering generated, so
that loading it generates no C again (BERT-base's 37 fused reductions take ~20 ms of Python).

Within `kernel_cache(cache)`, a generator decorated with `@cached(describe)` looks its kernel up in the
cache under a key naming what it was asked for, and records the kernel it returns. A key names either
plain values (a softmax's dtype, lens, axis: the kernel is a function of them) or a module of the
program being lowered by its name (a fused reduction's body: unique within a program, and the same
body when the program is read back from its file); kernels of modules outside that program are not
cached. `KernelSource`s travel as JSON (`source_to_json` / `source_from_json`).

A provided kernel is bound to its key only if it is the kernel generated for it would be in form: its
fields (the dtypes, shapes and lens it reads and writes) equal those the generator's arguments give,
and its name is the hash of its code and fields. A file whose entries were swapped or relabelled
(checksums recomputed) would otherwise run a kernel over buffers of other sizes.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Mapping
from typing import Any

from ....errors import CompiledFileError
from ....ir.dtypes import DType
from ....ir.module import Module
from ....ir.shape import Shape
from ..context import bound
from .kernels import KernelSource


class KernelCache:
    """Kernels by key: `provided` ones are returned instead of generating; `kernels` holds every kernel
    the generators returned in the block, provided or generated."""

    def __init__(self, modules: Mapping[str, Module], provided: Mapping[str, KernelSource] | None = None):
        self.modules = modules
        self.provided = dict(provided or {})
        self.kernels: dict[str, KernelSource] = {}

    def key(self, module: Module | None, what: str) -> str | None:
        if module is None:
            return what
        return f"{module.name}: {what}" if self.modules.get(module.name) is module else None


_ACTIVE: contextvars.ContextVar[KernelCache | None] = contextvars.ContextVar("kernel_cache", default=None)


def kernel_cache(cache: KernelCache) -> contextlib.AbstractContextManager[KernelCache]:
    """Make the cached generators consult and fill `cache` in this block (this thread or task only)."""
    return bound(_ACTIVE, cache)


def cached(describe: Callable[..., tuple[Module | None, str]], expect: Callable[..., dict[str, Any]]):
    """Decorate a generator: `describe(*args, **kwargs)` gives the module the kernel is generated from
    (or None) and the rest of the arguments as text; together they are its key in the active cache.
    `expect(*args, **kwargs)` gives the KernelSource fields the generated kernel has (its buffers)."""

    def deco(generate: Callable[..., KernelSource]) -> Callable[..., KernelSource]:
        @functools.wraps(generate)
        def generator(*args: Any, **kwargs: Any) -> KernelSource:
            cache = _ACTIVE.get()
            key = cache.key(*describe(*args, **kwargs)) if cache is not None else None
            if key is None:
                return generate(*args, **kwargs)
            src = cache.provided.get(key)
            if src is None:
                src = generate(*args, **kwargs)
            else:
                check_provided(key, src, expect(*args, **kwargs))
            cache.kernels[key] = src
            return src

        return generator

    return deco


def check_provided(key: str, src: KernelSource, want: Mapping[str, Any]) -> None:
    """Raise CompiledFileError unless the provided `src` has the fields `want` and its own name."""
    from .kernels import named_by_content

    wrong = [k for k, v in want.items() if repr(getattr(src, k)) != repr(v)]
    if wrong or not named_by_content(src):
        why = f"its {', '.join(wrong)} disagree with the IR" if wrong else "its name is not the hash of its code"
        raise CompiledFileError(f"cpu artifact kernels.json: the kernel saved for {key!r} ({src.name}) is not "
                                f"one generated for it: {why}")


def source_to_json(src: KernelSource) -> dict[str, Any]:
    return {
        "name": src.name, "code": src.code, "helpers": [list(h) for h in src.helpers],
        "in_dtypes": [d.value for d in src.in_dtypes], "out_dtype": src.out_dtype.value, "ndim": src.ndim,
        "in_shapes": None if src.in_shapes is None else [str(s) for s in src.in_shapes],
        "out_lens": None if src.out_lens is None else list(src.out_lens),
    }


def source_from_json(d: Mapping[str, Any]) -> KernelSource:
    """The inverse of `source_to_json`; ValueError (or TypeError, KeyError) on anything malformed."""
    from ....ir.text import parse_shape

    def strings(xs: Any) -> tuple[str, ...]:
        if not isinstance(xs, list) or not all(isinstance(x, str) for x in xs):
            raise ValueError(f"expected a list of strings, got {xs!r:.80}")
        return tuple(xs)

    def shape(text: str) -> Shape:
        s = parse_shape(text)
        if not isinstance(s, Shape):
            raise ValueError(f"{text!r} is not a tensor shape")
        return s

    helpers = d["helpers"]
    if not isinstance(helpers, list) or not all(isinstance(h, list) and len(h) == 2 for h in helpers):
        raise ValueError("helpers must be [name, code] pairs")
    ndim, shapes, out_lens = d["ndim"], d["in_shapes"], d["out_lens"]
    if not (ndim is None or type(ndim) is int) or not (out_lens is None or isinstance(out_lens, list)
                                                      and all(type(n) is int for n in out_lens)):
        raise ValueError("ndim and out_lens must be integers")
    name, code, out_dtype = d["name"], d["code"], d["out_dtype"]
    if not all(isinstance(x, str) for x in (name, code, out_dtype)):
        raise ValueError("name, code and out_dtype must be strings")
    return KernelSource(
        name=name, code=code, helpers=tuple(strings(h) for h in helpers),  # type: ignore[misc]
        in_dtypes=tuple(DType(x) for x in strings(d["in_dtypes"])), out_dtype=DType(out_dtype), ndim=ndim,
        in_shapes=None if shapes is None else tuple(shape(s) for s in strings(shapes)),
        out_lens=None if out_lens is None else tuple(out_lens),
    )

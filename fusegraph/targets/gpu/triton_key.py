"""Triton's hash of its own installation, without reading its 500 MB library.

Every Triton compile and cache lookup keys on `triton.runtime.cache.triton_key()`: a sha256 over
Triton's Python sources and the whole of `libtriton.so` (500 MB in Triton 3.6-3.9). On the H200
machine that took 0.92 s in a new process (the library read from disk), and a cold compile waits
for it before its first kernel compiles; every new process (a server's replica, a CLI run) pays it
again. The linker already wrote a content hash of that library into it: its GNU build ID, the note
`ld --build-id` computes over the linked output. `quick_key` hashes what Triton hashes, with the
library's build ID (and size) in place of its bytes: the same on every machine with the same
installation, as Triton's is (a saved program's kernels, keyed by it, load elsewhere: binaries.py),
and different wherever Triton's would be, save for a library whose build ID was forged (a library
without one keeps Triton's own hash).

`use_quick_key` makes Triton's key function answer the quick key in fusegraph's compile threads
(`ours()`: the compile scopes of kernels.py and their pool's threads; compile workers take their
parent's key, compile_pool.py) and Triton's own everywhere else, so that another user of Triton in
the process (torch.compile's inductor, whose compile workers compute Triton's key in processes of
their own) keeps the key its workers share. A kernel fusegraph compiles elsewhere (a dynamic
program's run-time compiles) keys on Triton's hash, computed where it is first needed, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_HASHED_FOLDERS = ("compiler", "backends", "language")  # Triton's Python sources in its key
_PT_NOTE, _NT_GNU_BUILD_ID = 4, 3
_lock = threading.Lock()


def elf_build_id(path: Path) -> bytes | None:
    """The GNU build ID note of a 64-bit little-endian ELF file, from its program headers; None for
    any other file, or one without the note."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":  # 64-bit, little-endian
                return None
            phoff, = struct.unpack_from("<Q", head, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
            if phentsize < 56 or phnum > 4096:
                return None
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(min(phnum, len(table) // phentsize)):
                kind, _, offset, _, _, size = struct.unpack_from("<IIQQQQ", table, i * phentsize)
                if kind == _PT_NOTE and 0 < size <= 1 << 16:
                    f.seek(offset)
                    found = _build_id_note(f.read(size))
                    if found is not None:
                        return found
    except OSError:
        return None
    return None


def _build_id_note(notes: bytes) -> bytes | None:
    at = 0
    while at + 12 <= len(notes):
        namesz, descsz, kind = struct.unpack_from("<III", notes, at)
        name_at = at + 12
        desc_at = name_at + (-(-namesz // 4) * 4)
        end = desc_at + (-(-descsz // 4) * 4)
        if end > len(notes):
            return None
        if kind == _NT_GNU_BUILD_ID and notes[name_at:name_at + namesz] == b"GNU\0" and descsz >= 8:
            return notes[desc_at:desc_at + descsz]
        at = end
    return None


def quick_key(root: Path, version: str) -> str | None:
    """The key of the Triton installed at `root` (its package folder), or None where its library has
    no build ID."""
    library = root / "_C" / f"libtriton.{sysconfig.get_config_var('EXT_SUFFIX').split('.')[-1]}"  # (as Triton names it)
    build_id = elf_build_id(library)
    if build_id is None:
        return None
    digest = hashlib.sha256(f"triton {version}\0".encode())
    sources = [root / "runtime" / "cache.py"]
    for folder in _HASHED_FOLDERS:
        for parent, dirs, files in os.walk(root / folder):
            dirs.sort()
            sources += [Path(parent) / name for name in sorted(files) if name.endswith(".py")]
    for path in sources:
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    digest.update(f"libtriton {library.stat().st_size}\0".encode() + build_id)
    return digest.hexdigest()


_here = threading.local()
_installed = False  # (use_quick_key's, under _lock)


@contextlib.contextmanager
def ours() -> Iterator[None]:
    """A scope in which this thread's Triton compiles and cache lookups key on the quick key."""
    before = getattr(_here, "ours", False)
    _here.ours = True
    try:
        yield
    finally:
        _here.ours = before


def mark_thread() -> None:
    """This thread's compiles key on the quick key from now on (the initializer of the compile scopes'
    threads, compile_queue.PriorityThreads)."""
    _here.ours = True


def fusegraph_key() -> str:
    """The key fusegraph's compiles use: the quick key, or Triton's own where there is none."""
    from triton.runtime.cache import triton_key

    with ours():
        return triton_key()


def use_quick_key(triton: Any) -> None:
    """Install the quick key for fusegraph's compiles (see the module's doc), once per process;
    nothing changes where the library has no build ID."""
    global _installed
    try:
        import triton.runtime.cache as cache
    except ImportError:
        return
    with _lock:
        if _installed:
            return
        try:
            key = quick_key(Path(triton.__file__).parent, triton.__version__)
        except OSError:
            key = None
        if key is None:
            return
        own = cache.triton_key

        def triton_key() -> str:
            return key if getattr(_here, "ours", False) else own()
        cache.triton_key = triton_key
        _installed = True

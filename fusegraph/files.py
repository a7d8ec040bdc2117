"""Opening files named by a caller without hanging on them: a FIFO, a socket or a device given as a
model or a compiled program is refused by stat, before anything opens it (opening a FIFO for reading
blocks until a writer comes, forever in a service)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ModelLoadError


def regular_file(path: str | os.PathLike, what: str = "model file") -> Path:
    """`path`, checked by stat (nothing is opened) to be a regular file; ModelLoadError otherwise
    (FileNotFoundError and other OSErrors pass, for the caller to word)."""
    path = Path(path)
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"
        raise ModelLoadError(f"{what} {path} is {kind}")
    return path


def open_regular(path: str | os.PathLike, what: str = "model file") -> int:
    """A read-only descriptor of the regular file `path`. Opened without blocking, and checked again
    once open, so a FIFO swapped in after the stat is refused too, not waited on."""
    regular_file(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ModelLoadError(f"{what} {path} is not a regular file (a FIFO, socket or device)")
    return fd

"""`save` / `load` of compiled programs, MIGraphX-style, as fusegraph .fgx files.

MIGraphX writes msgpack or json (`format=`); fusegraph writes one format, .fgx (versioned, checked
on load, never pickle). Both format names are accepted and the file written at the path given is an
.fgx file whatever its name (a script's "model.mxr" is an .fgx file, readable by fusegraph.load and
by this load, not by MIGraphX). Only compiled programs are saved, with their executable, so a load
runs without compiling again.
"""

from __future__ import annotations

import os

from ..errors import ArgumentError, api_boundary
from .program import program

FORMATS = ("msgpack", "json")


def _check(format: str, fn: str) -> None:  # noqa: A002
    if format not in FORMATS:
        raise ArgumentError(f"migraphx.{fn}: format {format!r} is not one of {list(FORMATS)} (either is stored as .fgx)")


@api_boundary
def save(p: program, filename: str | os.PathLike, format: str = "msgpack") -> None:  # noqa: A002
    _check(format, "save")
    if not isinstance(p, program):
        raise ArgumentError(f"migraphx.save: expected a migraphx.program, got {type(p).__name__}")
    from .. import save as fg_save

    fg_save(p.fusegraph_program, filename)


@api_boundary
def load(filename: str | os.PathLike, format: str = "msgpack") -> program:  # noqa: A002
    _check(format, "load")
    from .. import load as fg_load

    return program(fg_load(filename))

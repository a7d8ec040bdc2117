"""Printing for the CLI: results as rich tables on stdout, progress on stderr.

rich is imported only when something is printed, so `fusegraph --help` stays fast. Progress is
drawn only on a terminal: piped or captured stderr carries nothing but errors.
"""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


@functools.cache
def console(stderr: bool = False) -> Console:
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal:
        # rich assumes 80 columns when piped; wide tables would wrap or be cut in logs and files
        con = Console(stderr=stderr, highlight=False, width=max(160, shutil.get_terminal_size().columns))
    return con


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner on stderr while a long step runs."""
    con = console(stderr=True)
    if not con.is_terminal:
        yield
        return
    with con.status(message):
        yield


class _NoProgress:
    def advance(self) -> None:
        pass


class _Progress:
    def __init__(self, progress: Any, task: Any):
        self._progress, self._task = progress, task

    def advance(self) -> None:
        self._progress.advance(self._task)


@contextlib.contextmanager
def progress(description: str, total: int) -> Iterator[_Progress | _NoProgress]:
    """A progress bar on stderr; call `.advance()` once per step."""
    con = console(stderr=True)
    if not con.is_terminal:
        yield _NoProgress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=con, transient=True) as bar:
        yield _Progress(bar, bar.add_task(description, total=total))


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          right: Sequence[str] = (), caption: str | None = None) -> Table:
    """A table; columns named in `right` are right-aligned (numbers)."""
    from rich.table import Table
    from rich.text import Text

    # Text, not str: rich would read "[batch,3,224,224]" as a markup tag and drop it
    t = Table(title=None if title is None else Text(title), caption=None if caption is None else Text(caption),
              title_justify="left", caption_justify="left")
    for c in columns:
        t.add_column(Text(c), justify="right" if c in right else "left", overflow="fold")
    for r in rows:
        t.add_row(*(Text(str(v)) for v in r))
    return t


def show(*renderables: Any) -> None:
    for r in renderables:
        console().print(r, markup=False)


def note(message: str) -> None:
    """A remark for the user (on stderr, so stdout stays results only)."""
    console(stderr=True).print(message, markup=False, soft_wrap=True)  # one line, however long


def fmt(x: float | None, digits: int = 6) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}g}"


def num(x: float | None) -> str:
    """A measurement for people: about 4 significant digits, no exponent above 1e-3."""
    if x is None or math.isnan(x):
        return "-"
    ax = abs(x)
    if ax >= 1000 or math.isinf(x):
        return f"{x:,.0f}"
    if ax >= 1e-3:
        return f"{x:.{max(0, 3 - int(math.floor(math.log10(ax))))}f}"
    return f"{x:.3g}"


def dims_str(lens: Sequence[Any]) -> str:
    return "[" + ",".join(str(d) for d in lens) + "]"


def summary(arr: np.ndarray) -> dict[str, Any]:
    """min/max/mean/std over the values that are not NaN (infinities count), and the NaN count."""
    values = np.asarray(arr)
    if values.dtype.kind == "c":
        values = np.abs(values)  # summarize complex outputs by magnitude
    values = values.astype(np.float64).ravel()  # also reads bf16/fp8 (ml_dtypes) and bool
    isnan = np.isnan(values)
    valid = values[~isnan]
    if valid.size == 0:
        return {"min": None, "max": None, "mean": None, "std": None, "nan": int(isnan.sum())}
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in std is NaN, and says so
        return {"min": float(valid.min()), "max": float(valid.max()), "mean": float(valid.mean()),
                "std": float(valid.std()), "nan": int(isnan.sum())}

"""Helpers for pass tests: IR text in, IR text out, numerics checked on the ref interpreter."""

from __future__ import annotations

import textwrap

import numpy as np

import fusegraph  # noqa: F401  (registers ops)
from fusegraph.ir import Program, Shape
from fusegraph.passes import PassManager
from fusegraph.targets.ref.interpreter import run_module


def program(text: str) -> Program:
    return Program.from_text(textwrap.dedent(text).strip() + "\n")


def random_inputs(p: Program, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, s in p.get_parameter_shapes().items():
        assert isinstance(s, Shape)
        if s.dtype.is_float:
            feeds[name] = rng.standard_normal(s.lens).astype(s.dtype.np)
        elif s.dtype.name == "bool":
            feeds[name] = rng.random(s.lens) > 0.5
        else:
            feeds[name] = rng.integers(-5, 5, s.lens).astype(s.dtype.np)
    return feeds


def apply(text: str, *passes, check: bool = True) -> tuple[Program, str]:
    """Run `passes` on the program in `text`; check numerics before vs after; return the new text."""
    before = program(text)
    after = program(text)
    PassManager(verify="full").run(after, list(passes))
    if check:
        feeds = random_inputs(before)
        for a, e in zip(run_module(after.main, feeds), run_module(before.main, feeds)):
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(e, np.float64), rtol=1e-5, atol=1e-6)
    return after, after.to_text()


def body(text: str) -> list[str]:
    """The instruction lines of a program text without numbering, for order-insensitive checks."""
    return [line.split(" = ", 1)[-1].strip() for line in text.splitlines() if line.startswith("  ")]

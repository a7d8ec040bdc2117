"""Symbolic dims: integer polynomials over named input dims (`batch`, `seq`, `2*seq`, `batch*seq`).

A dynamic `Dim` may carry a `Sym`: the dim's size as a function of the run's named dims, which lets
shape arithmetic on dynamic dims (Shape -> Gather -> Concat -> Reshape) fold at compile time. Names
come from the model (ONNX dim_params: one name is one size, as the ONNX spec says) or the user
(`Dim(1, 32, sym="batch")`); shape rules carry them (`probe`): an op's static shape rule is evaluated
at three probe assignments of the names, and an output dim that is `c * m + k` at all three (m one
name or a product of two, c and k integers) and at the corners of the ranges gets that polynomial.
Floors (a strided conv's H/2 at odd H) are not polynomials: such dims stay plain ranges.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations_with_replacement

Monomial = tuple[str, ...]  # sorted names, repeated for powers; () is the constant term


@dataclass(frozen=True)
class Sym:
    terms: tuple[tuple[Monomial, int], ...]  # sorted by monomial, no zero coefficients

    @staticmethod
    def name(n: str) -> Sym:
        if not _NAME.fullmatch(n):
            raise ValueError(f"bad symbol name {n!r}")
        return Sym((((n,), 1),))

    @staticmethod
    def const(c: int) -> Sym:
        return Sym((((), int(c)),) if c else ())

    @staticmethod
    def _of(terms: Mapping[Monomial, int]) -> Sym:
        return Sym(tuple(sorted((m, c) for m, c in terms.items() if c)))

    # -- arithmetic -------------------------------------------------------------------------------
    def __add__(self, other: Sym | int) -> Sym:
        acc = dict(self.terms)
        for m, c in _sym(other).terms:
            acc[m] = acc.get(m, 0) + c
        return Sym._of(acc)

    __radd__ = __add__

    def __neg__(self) -> Sym:
        return Sym(tuple((m, -c) for m, c in self.terms))

    def __sub__(self, other: Sym | int) -> Sym:
        return self + -_sym(other)

    def __rsub__(self, other: Sym | int) -> Sym:
        return _sym(other) - self

    def __mul__(self, other: Sym | int) -> Sym:
        acc: dict[Monomial, int] = {}
        for m, c in self.terms:
            for n, d in _sym(other).terms:
                key = tuple(sorted(m + n))
                acc[key] = acc.get(key, 0) + c * d
        return Sym._of(acc)

    __rmul__ = __mul__

    def exact_div(self, k: int) -> Sym | None:
        """self / k when every coefficient is a multiple of k (then exact for every value), else None."""
        if k == 0 or any(c % k for _, c in self.terms):
            return None
        return Sym(tuple((m, c // k) for m, c in self.terms))

    # -- queries ----------------------------------------------------------------------------------
    @property
    def constant(self) -> int | None:
        """The value when it has no names, else None."""
        if not self.terms:
            return 0
        return self.terms[0][1] if len(self.terms) == 1 and self.terms[0][0] == () else None

    @property
    def names(self) -> set[str]:
        return {n for m, _ in self.terms for n in m}

    @property
    def single_name(self) -> str | None:
        """`n` when this is exactly the name n."""
        return self.terms[0][0][0] if len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1 else None

    def evaluate(self, values: Mapping[str, int]) -> int:
        return sum(c * math.prod(values[n] for n in m) for m, c in self.terms)

    def __str__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in self.terms:
            body = "*".join(m)
            text = str(c) if not m else body if c == 1 else f"-{body}" if c == -1 else f"{c}*{body}"
            parts.append(text if not parts or text.startswith("-") else "+" + text)
        return "".join(parts)

    @staticmethod
    def parse(text: str) -> Sym:
        """The inverse of str(): `2*seq+1`, `batch*seq`, `-seq+3`."""
        if not _POLY.fullmatch(text):
            raise ValueError(f"bad symbolic dim {text!r}")
        total = Sym.const(0)
        for sign, body in re.findall(r"([+-]?)([^+-]+)", text):
            term = Sym.const(-1 if sign == "-" else 1)
            for f in body.split("*"):
                term = term * (Sym.const(int(f)) if f.isdigit() else Sym.name(f))
            total = total + term
        return total


_NAME = re.compile(r"[A-Za-z_]\w*")
_TERM = r"(?:\d+|[A-Za-z_]\w*)(?:\*(?:\d+|[A-Za-z_]\w*))*"
_POLY = re.compile(rf"-?{_TERM}(?:[+-]{_TERM})*")


def _sym(x: Sym | int) -> Sym:
    return x if isinstance(x, Sym) else Sym.const(int(x))


def symbol_name(text: str) -> str:
    """An ONNX dim_param as a symbol name (`p2o.DynamicDimension.0` -> `p2o_DynamicDimension_0`)."""
    name = re.sub(r"\W", "_", text)
    return name if _NAME.fullmatch(name) else f"_{name}"


# -- fitting a shape rule's output dims --------------------------------------------------------------
def fit(names: list[str], probes: list[dict[str, int]], values: list[int]) -> Sym | None:
    """The polynomial c * m + k (m one of `names` or a product of two, c != 0) that takes `values[j]`
    at `probes[j]` for every probe, or None. Two probes fix c and k, the others check them."""
    for degree in (1, 2):
        for m in combinations_with_replacement(names, degree):
            ms = [math.prod(p[n] for n in m) for p in probes]
            if ms[0] == ms[1]:
                continue
            c, rest = divmod(values[1] - values[0], ms[1] - ms[0])
            if rest or c == 0:
                continue
            k = values[0] - c * ms[0]
            if all(c * mj + k == vj for mj, vj in zip(ms, values, strict=True)):
                return Sym.name(m[0]) * c + k if degree == 1 else Sym.name(m[0]) * Sym.name(m[1]) * c + k
    return None


PRIMES = (1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049, 1051, 1061, 1063, 1069, 1087, 1091, 1093, 1097,
          1103, 1109, 1117, 1123, 1129, 1151, 1153, 1163)


def probe_values(names: list[str], round_: int) -> dict[str, int]:
    """Probe `round_` (0, 1, 2): a distinct prime per name and round, so no two names nor rounds
    coincide and no floor hides behind a round number."""
    n = len(names)
    return {name: PRIMES[(round_ * n + i) % len(PRIMES)] * (1 + (round_ * n + i) // len(PRIMES))
            for i, name in enumerate(names)}

"""String ops: concatenation, splitting, normalization and regular-expression matching.

String tensors are numpy object arrays of Python `str` (DType.string). Code generators have no
string type, so these ops are opaque: each is its numpy reference, run as one kernel. Conversions
between strings and numbers are the pointwise `convert` (see `scalar._convert`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape, TupleShape


class StringOp(Op):
    kind = OpKind.OPAQUE

    def _check_strings(self, inputs: Sequence[Shape]) -> None:
        for s in inputs:
            if s.dtype is not DType.string:
                raise ShapeError(f"{self.name}: inputs must be string tensors, got {', '.join(map(str, inputs))}")


def _strings(values, shape) -> np.ndarray:
    """An object array of `shape` holding `values` (np.array would split nested sequences)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


@register_op
class StringConcat(StringOp):
    """x + y elementwise; the inputs have equal lens (the frontend broadcasts)."""

    name = "string_concat"

    def compute_shape(self, inputs):
        self._check_strings(inputs)
        x, y = inputs
        if x.lens != y.lens:
            raise ShapeError(f"{self.name}: inputs must have equal lens, got {x} and {y}")
        return Shape(DType.string, x.dims)  # standard layout, whatever the inputs' strides

    def compute_dynamic_shape(self, inputs):
        self._check_strings(inputs)
        return Shape(DType.string, inputs[0].dims)

    def compute(self, args):
        x, y = args
        return _strings([a + b for a, b in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist())], x.shape)


@register_op
class StringSplit(StringOp):
    """(substrings, counts): each string split on `delimiter` at most `maxsplit` times (None: no limit),
    padded with "" to the largest count along a new last axis; counts are int64 of the input's shape.

    delimiter None splits on runs of whitespace and, as the spec says, drops leading and trailing
    whitespace, also after the last split (ONNX's reference keeps it there; ONNX Runtime does not).
    With a delimiter, "" is one empty substring, as in ONNX's reference (ONNX Runtime gives none)."""

    name = "string_split"
    delimiter: str | None = None
    maxsplit: int | None = None

    def compute_shape(self, inputs):
        self._check_strings(inputs)
        (x,) = inputs
        return TupleShape((Shape.dynamic(DType.string, x.dims + (Dim(0, None),)),
                           Shape.dynamic(DType.int64, x.dims)))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        limit = -1 if self.maxsplit is None else self.maxsplit
        flat = x.reshape(-1).tolist()
        if self.delimiter is None:
            parts = [s.strip().split(None, limit) for s in flat]
        else:
            parts = [s.split(self.delimiter, limit) for s in flat]
        width = max((len(p) for p in parts), default=0)
        padded = [p + [""] * (width - len(p)) for p in parts]
        subs = _strings([w for p in padded for w in p], x.shape + (width,))
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(x.shape)
        return subs, counts


@register_op
class StringNormalizer(StringOp):
    """Drops the elements of a [C] or [1, C] tensor that equal a stop word (compared case-insensitively
    unless `case_sensitive`), then changes case ("LOWER", "UPPER" or "NONE"). An empty result is [""]
    (shape [1] or [1, 1]). Case mapping is Unicode's (str.lower/upper), independent of any locale."""

    name = "string_normalizer"
    stopwords: tuple[str, ...] = ()
    case_sensitive: bool = False
    case_change: str = "NONE"

    def compute_shape(self, inputs):
        self._check_strings(inputs)
        (x,) = inputs
        if x.ndim not in (1, 2) or (x.ndim == 2 and x.dims[0] != Dim.fixed(1)):
            raise ShapeError(f"{self.name}: input must be [C] or [1, C], got {x}")
        if self.case_change not in ("LOWER", "UPPER", "NONE"):
            raise ShapeError(f"{self.name}: bad case_change {self.case_change!r}")
        c = x.dims[-1]
        if not self.stopwords and c.min >= 1:
            return Shape(DType.string, x.dims)
        kept = Dim(1, None if c.max is None else max(c.max, 1))  # an empty result is [""]
        return Shape.dynamic(DType.string, x.dims[:-1] + (kept,))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        if self.case_sensitive:
            stops = set(self.stopwords)
            kept = [s for s in x.reshape(-1).tolist() if s not in stops]
        else:
            stops = {w.casefold() for w in self.stopwords}
            kept = [s for s in x.reshape(-1).tolist() if s.casefold() not in stops]
        if self.case_change == "LOWER":
            kept = [s.lower() for s in kept]
        elif self.case_change == "UPPER":
            kept = [s.upper() for s in kept]
        if not kept:
            kept = [""]
        return _strings(kept, x.shape[:-1] + (len(kept),))


@register_op
class RegexFullMatch(StringOp):
    """Whether each string matches `pattern` as a whole, as bool.

    ONNX specifies RE2 syntax; this is Python's `re` with ASCII classes, which RE2 also uses (\\w, \\d,
    \\s, \\b). Python accepts more than RE2 (backreferences, lookaround) and its `$` also matches
    before a final newline; patterns within RE2's syntax otherwise agree."""

    name = "regex_full_match"
    pattern: str = ""

    def compute_shape(self, inputs):
        self._check_strings(inputs)
        return Shape(DType.bool, inputs[0].dims)

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        regex = compile_regex(self.pattern)
        return np.array([regex.fullmatch(s) is not None for s in x.reshape(-1).tolist()],
                        dtype=np.bool_).reshape(x.shape)


@functools.lru_cache(maxsize=64)
def compile_regex(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.ASCII)

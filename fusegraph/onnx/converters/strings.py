"""String ONNX ops: StringConcat, StringSplit, StringNormalizer, RegexFullMatch.

Normalized here: StringSplit's empty delimiter means "split on whitespace" (None), its absent maxsplit
"no limit" (None); a bad regular expression fails at parse time rather than at run time.
"""

from __future__ import annotations

import re

from ...ir.dtypes import DType
from ...ops.strings import compile_regex
from ..registry import converter


def _require_strings(ctx, *xs) -> None:
    for x in xs:
        if x.shape.dtype is not DType.string:
            raise ctx.error(f"expects string tensors, got {x.shape}")


@converter("StringConcat", since=20)
def string_concat(ctx, node, args):
    _require_strings(ctx, *args)
    return ctx.add("string_concat", *ctx.broadcast(*args))


@converter("StringSplit", since=20)
def string_split(ctx, node, args):
    _require_strings(ctx, args[0])
    delimiter = node.attr("delimiter", "") or None
    maxsplit = node.attr("maxsplit", None)
    if maxsplit is not None and maxsplit < 0:
        raise ctx.error(f"maxsplit must be non-negative, got {maxsplit}")
    ins = ctx.add("string_split", args[0], delimiter=delimiter, maxsplit=maxsplit)
    return ctx.tuple_elems(ins, 2)


@converter("StringNormalizer", since=10)
def string_normalizer(ctx, node, args):
    _require_strings(ctx, args[0])
    action = node.attr("case_change_action", "NONE")
    if action not in ("LOWER", "UPPER", "NONE"):
        raise ctx.error(f"case_change_action must be LOWER, UPPER or NONE, got {action!r}")
    # `locale` only picks the case mapping; Python's Unicode mapping needs no locale installed.
    return ctx.add("string_normalizer", args[0], stopwords=tuple(node.attr("stopwords", [])),
                   case_sensitive=bool(node.attr("is_case_sensitive", 0)), case_change=action)


@converter("RegexFullMatch", since=20)
def regex_full_match(ctx, node, args):
    _require_strings(ctx, args[0])
    pattern = node.attr("pattern")
    try:
        compile_regex(pattern)
    except re.error as e:
        raise ctx.error(f"bad regular expression {pattern!r}: {e}") from None
    return ctx.add("regex_full_match", args[0], pattern=pattern)

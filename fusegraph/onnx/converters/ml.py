"""ai.onnx.ml ops (ArrayFeatureExtractor, Binarizer, LabelEncoder, TreeEnsemble) and TfIdfVectorizer.

Their table attributes come in several spellings (per-type lists or tensors, NaN-separated member
sets, flat n-gram pools with counts); they are normalized here into the typed tuples the ops hold.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ops.ml import AGGREGATES, MEMBER, POST_TRANSFORMS
from ..registry import converter

ML = "ai.onnx.ml"


@converter("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(ctx, node, args):
    # Gathers along the last axis with the indices flattened; 1-D data gives one row, as ORT does.
    data, idx = args
    if idx.shape.is_dynamic:
        raise ctx.error(f"indices must have static dims, got {idx.shape}")
    flat = ctx.reshape(idx, (math.prod(idx.shape.lens),))
    out = ctx.add("gather", data, flat, axis=data.shape.ndim - 1)
    return ctx.reshape(out, (1, flat.shape.lens[0])) if data.shape.ndim == 1 else out


@converter("Binarizer", domain=ML)
def binarizer(ctx, node, args):
    x = args[0]
    above = ctx.pointwise("greater", x, ctx.scalar_like(node.attr("threshold", 0.0), x))
    return ctx.convert(above, x.shape.dtype)


# The typed list attributes: value type -> their suffix (keys_int64s, values_floats, ...).
_LABEL_LISTS = {DType.int64: "int64s", DType.float32: "floats", DType.string: "strings"}


@converter("LabelEncoder", domain=ML)
def label_encoder_v1(ctx, node, args):
    # Opset 1 maps strings to their index in `classes_strings` (int64), or int64 indices back.
    x = args[0]
    classes = node.attr("classes_strings", [])
    if x.shape.dtype is DType.string:
        return ctx.add("label_encoder", x, keys=tuple(classes), values=tuple(range(len(classes))),
                       default=node.attr("default_int64", -1), to=DType.int64)
    return ctx.add("label_encoder", x, keys=tuple(range(len(classes))), values=tuple(classes),
                   default=node.attr("default_string", "_Unused"), to=DType.string)


@converter("LabelEncoder", domain=ML, since=2)
def label_encoder(ctx, node, args):
    keys = _table(ctx, node, "keys")
    values = _table(ctx, node, "values")
    if keys is None or values is None:
        raise ctx.error("needs keys_* and values_* attributes")
    (keys, key_type), (values, to) = keys, values
    if len(keys) != len(values):
        raise ctx.error(f"{len(keys)} keys but {len(values)} values")
    x_type = args[0].shape.dtype
    if _kind(key_type) != _kind(x_type):
        raise ctx.error(f"{key_type} keys cannot match {x_type} input elements")
    if node.has("default_tensor"):
        default = _python(np.asarray(node.attr("default_tensor")).reshape(-1)[0])
    elif to is DType.string:
        default = node.attr("default_string", "_Unused")
    elif to.is_float:
        default = node.attr("default_float", -0.0)
    else:
        default = node.attr("default_int64", -1)
    return ctx.add("label_encoder", args[0], keys=keys, values=values, default=default, to=to)


def _table(ctx, node, prefix: str):
    """(entries as a tuple of Python scalars, their dtype) from `{prefix}_tensor` or a typed list."""
    if node.has(f"{prefix}_tensor"):
        arr = np.asarray(node.attr(f"{prefix}_tensor")).reshape(-1)
        return tuple(_python(v) for v in arr), DType.from_numpy(arr.dtype)
    for dtype, suffix in _LABEL_LISTS.items():
        if node.has(f"{prefix}_{suffix}"):
            return tuple(node.attr(f"{prefix}_{suffix}")), dtype
    return None


def _kind(dtype: DType) -> str:
    return "string" if dtype is DType.string else "float" if dtype.is_float else "int"


def _python(v):
    return str(v) if isinstance(v, (str, bytes, np.str_)) else v.item() if hasattr(v, "item") else v


@converter("TreeEnsemble", domain=ML, since=5)
def tree_ensemble(ctx, node, args):
    modes = [int(m) for m in np.asarray(node.attr("nodes_modes")).reshape(-1)]
    n_nodes = len(modes)
    splits = [float(v) for v in np.asarray(node.attr("nodes_splits")).reshape(-1)]
    lists = {k: node.attr(k) for k in ("nodes_featureids", "nodes_truenodeids", "nodes_falsenodeids",
                                       "nodes_trueleafs", "nodes_falseleafs")}
    missing = node.attr("nodes_missing_value_tracks_true", [0] * n_nodes)
    if any(len(v) != n_nodes for v in [splits, missing, *lists.values()]):
        raise ctx.error(f"node attributes must all have {n_nodes} entries")
    members = _member_sets(ctx, modes, node.attr("membership_values", None))
    aggregate, post = node.attr("aggregate_function", 1), node.attr("post_transform", 0)
    if not 0 <= aggregate < len(AGGREGATES) or not 0 <= post < len(POST_TRANSFORMS):
        raise ctx.error(f"bad aggregate_function {aggregate} or post_transform {post}")
    weights = [float(v) for v in np.asarray(node.attr("leaf_weights")).reshape(-1)]
    targets = node.attr("leaf_targetids")
    n_targets = node.attr("n_targets")
    if len(weights) != len(targets) or any(not 0 <= t < n_targets for t in targets):
        raise ctx.error(f"leaf_weights and leaf_targetids must pair up with targets in [0, {n_targets})")
    return ctx.add(
        "tree_ensemble", args[0], n_targets=n_targets, aggregate=AGGREGATES[aggregate],
        post_transform=POST_TRANSFORMS[post], tree_roots=tuple(node.attr("tree_roots")),
        node_features=tuple(lists["nodes_featureids"]), node_modes=tuple(modes), node_splits=tuple(splits),
        node_members=members, node_true=tuple(lists["nodes_truenodeids"]),
        node_true_leaf=tuple(bool(v) for v in lists["nodes_trueleafs"]),
        node_false=tuple(lists["nodes_falsenodeids"]),
        node_false_leaf=tuple(bool(v) for v in lists["nodes_falseleafs"]),
        node_missing_true=tuple(bool(v) for v in missing), leaf_targets=tuple(targets),
        leaf_weights=tuple(weights))


def _member_sets(ctx, modes, values) -> tuple[tuple[float, ...], ...]:
    """membership_values lists one NaN-terminated set per MEMBER node, in node order."""
    sets: list[list[float]] = [[]]
    for v in (np.asarray(values).reshape(-1).tolist() if values is not None else []):
        if math.isnan(v):
            sets.append([])
        else:
            sets[-1].append(float(v))
    sets = sets[:-1] if not sets[-1] else sets
    it = iter(sets)
    n_member = sum(m == MEMBER for m in modes)
    if len(sets) != n_member:
        raise ctx.error(f"membership_values holds {len(sets)} sets for {n_member} MEMBER nodes")
    return tuple(tuple(next(it)) if m == MEMBER else () for m in modes)


@converter("TfIdfVectorizer", since=9)
def tfidf_vectorizer(ctx, node, args):
    pool = node.attr("pool_strings", None) or node.attr("pool_int64s", None) or []
    starts = node.attr("ngram_counts")
    indexes = node.attr("ngram_indexes")
    lo, hi = node.attr("min_gram_length"), node.attr("max_gram_length")
    if not 1 <= lo <= hi:
        raise ctx.error(f"need 1 <= min_gram_length <= max_gram_length, got {lo}, {hi}")
    # The pool lists all n-grams of size 1, then of size 2, ...; ngram_counts[n-1] is where size n starts.
    ngrams, columns, k = [], [], 0
    for n, start in enumerate(starts, 1):
        end = starts[n] if n < len(starts) else len(pool)
        for at in range(start, end - n + 1, n):
            if k >= len(indexes):
                raise ctx.error(f"ngram_indexes has {len(indexes)} entries, the pool more n-grams")
            if lo <= n <= hi:
                ngrams.append(tuple(pool[at: at + n]))
                columns.append(indexes[k])
            k += 1
    size = max(indexes) + 1 if indexes else 0
    weights = tuple(node.attr("weights", []))
    if weights and len(weights) < size:  # weights are per output column
        raise ctx.error(f"{len(weights)} weights for {size} output columns")
    return ctx.add("tfidf_vectorizer", args[0], ngrams=tuple(ngrams), columns=tuple(columns), output_size=size,
                   max_skip=node.attr("max_skip_count"), mode=node.attr("mode"), weights=weights[:size])

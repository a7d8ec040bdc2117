"""Classical machine-learning ops (ONNX's ai.onnx.ml domain, and TfIdfVectorizer): lookup tables,
decision-tree ensembles and n-gram counting.

Their attributes are tables (keys, tree nodes, n-grams) that the frontend normalizes into typed
tuples; each op is opaque, computed by its numpy reference. ArrayFeatureExtractor and Binarizer
need no op of their own: the frontend writes them as gather and greater + convert.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ShapeError
from ..ir.dtypes import DType
from ..ir.op import Op, OpKind, register_op
from ..ir.shape import Dim, Shape

Scalar = int | float | str


def _is_nan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


@register_op
class LabelEncoder(Op):
    """Maps each element through keys -> values (as dtype `to`); elements not among the keys become
    `default`. A nan key matches nan elements."""

    name = "label_encoder"
    kind = OpKind.OPAQUE
    keys: tuple[Scalar, ...] = ()
    values: tuple[Scalar, ...] = ()
    default: Scalar = -1
    to: DType = DType.int64

    def compute_shape(self, inputs):
        (x,) = inputs
        if len(self.keys) != len(self.values):
            raise ShapeError(f"{self.name}: {len(self.keys)} keys but {len(self.values)} values")
        return Shape(self.to, x.dims)

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        table = dict(zip(self.keys, self.values))
        on_nan = next((v for k, v in zip(self.keys, self.values) if _is_nan(k)), self.default)
        flat = [on_nan if _is_nan(v) else table.get(v, self.default) for v in x.reshape(-1).tolist()]
        out = np.empty(len(flat), dtype=self.to.np)
        out[:] = flat
        return out.reshape(x.shape)


# TreeEnsemble node modes (ONNX's codes): x <= split, x < split, x >= split, x > split, x == split,
# x != split, x in the node's member set.
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


@register_op
class TreeEnsemble(Op):
    """Decision-tree ensemble over X [N, F] -> [N, n_targets] in X's dtype.

    Node i compares feature `node_features[i]` with `node_splits[i]` by `node_modes[i]` (or, for
    MEMBER, tests membership in `node_members[i]`); nan goes to the true branch where
    `node_missing_true[i]`. A branch is a node index, or a leaf index where its `*_leaf` flag is set;
    leaf j adds `leaf_weights[j]` to target `leaf_targets[j]`. Per sample and target the trees'
    leaves aggregate by `aggregate`; targets no leaf reached are 0. Then `post_transform` applies.
    A root with both branches the same leaf is that leaf."""

    name = "tree_ensemble"
    kind = OpKind.OPAQUE
    n_targets: int = 1
    aggregate: str = "SUM"
    post_transform: str = "NONE"
    tree_roots: tuple[int, ...] = ()
    node_features: tuple[int, ...] = ()
    node_modes: tuple[int, ...] = ()
    node_splits: tuple[float, ...] = ()
    node_members: tuple[tuple[float, ...], ...] = ()
    node_true: tuple[int, ...] = ()
    node_true_leaf: tuple[bool, ...] = ()
    node_false: tuple[int, ...] = ()
    node_false_leaf: tuple[bool, ...] = ()
    node_missing_true: tuple[bool, ...] = ()
    leaf_targets: tuple[int, ...] = ()
    leaf_weights: tuple[float, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        if x.ndim != 2 or not x.dtype.is_float:
            raise ShapeError(f"{self.name}: X must be a 2-D float tensor, got {x}")
        if self.aggregate not in AGGREGATES or self.post_transform not in POST_TRANSFORMS:
            raise ShapeError(f"{self.name}: bad aggregate {self.aggregate!r} or post_transform {self.post_transform!r}")
        return Shape(x.dtype, (x.dims[0], Dim.fixed(self.n_targets)))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        n = x.shape[0]
        weights = np.asarray(self.leaf_weights, dtype=np.float64)
        targets = np.asarray(self.leaf_targets, dtype=np.int64)
        leaves = np.stack([self._walk(x, root) for root in self.tree_roots]) if self.tree_roots else \
            np.zeros((0, n), np.int64)
        rows = np.broadcast_to(np.arange(n), leaves.shape)
        cols, vals = targets[leaves], weights[leaves]
        out = np.zeros((n, self.n_targets), np.float64)
        if self.aggregate in ("SUM", "AVERAGE"):
            np.add.at(out, (rows, cols), vals)
            if self.aggregate == "AVERAGE" and self.tree_roots:
                out /= len(self.tree_roots)
        else:
            reduce = np.minimum if self.aggregate == "MIN" else np.maximum
            start = np.inf if self.aggregate == "MIN" else -np.inf
            out[:] = start
            reduce.at(out, (rows, cols), vals)
            out[out == start] = 0.0  # no leaf reached this target
        return _post_transform(out, self.post_transform).astype(x.dtype)

    def _walk(self, x: np.ndarray, root: int) -> np.ndarray:
        """The leaf index each sample reaches in the tree rooted at `root`."""
        n = x.shape[0]
        node = np.full(n, root, np.int64)
        if self.node_true_leaf[root] and self.node_false_leaf[root] and \
                self.node_true[root] == self.node_false[root]:
            return np.full(n, self.node_true[root], np.int64)
        at_leaf = np.zeros(n, bool)
        tables = self._tables()
        for _ in range(len(self.node_modes) + 1):  # a path visits each node at most once
            active = np.flatnonzero(~at_leaf)
            if active.size == 0:
                return node
            i = node[active]
            v = x[active, tables["feature"][i]].astype(np.float64)
            go_true = _compare(tables["mode"][i], v, tables["split"][i], tables["members"][i])
            go_true |= tables["missing"][i] & np.isnan(v)
            node[active] = np.where(go_true, tables["true"][i], tables["false"][i])
            at_leaf[active] = np.where(go_true, tables["true_leaf"][i], tables["false_leaf"][i])
        raise ValueError(f"{self.name}: the tree rooted at node {root} has a cycle")

    def _tables(self) -> dict[str, np.ndarray]:
        width = max((len(m) for m in self.node_members), default=0)
        members = np.full((len(self.node_modes), max(width, 1)), np.nan)
        for k, m in enumerate(self.node_members):
            members[k, :len(m)] = m
        return {
            "feature": np.asarray(self.node_features, np.int64), "mode": np.asarray(self.node_modes, np.int64),
            "split": np.asarray(self.node_splits, np.float64), "members": members,
            "true": np.asarray(self.node_true, np.int64), "false": np.asarray(self.node_false, np.int64),
            "true_leaf": np.asarray(self.node_true_leaf, bool), "false_leaf": np.asarray(self.node_false_leaf, bool),
            "missing": np.asarray(self.node_missing_true, bool),
        }


def _compare(mode: np.ndarray, v: np.ndarray, split: np.ndarray, members: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        by_mode = [v <= split, v < split, v >= split, v > split, v == split, v != split,
                   (members == v[:, None]).any(axis=1)]
    return np.choose(mode, by_mode)


def _post_transform(y: np.ndarray, how: str) -> np.ndarray:
    if how == "SOFTMAX":
        e = np.exp(y - y.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if how == "SOFTMAX_ZERO":  # softmax over the nonzero scores; zeros stay zero
        nz = y != 0
        e = np.where(nz, np.exp(y - np.where(nz, y, -np.inf).max(axis=1, keepdims=True)), 0.0)
        s = e.sum(axis=1, keepdims=True)
        return np.divide(e, s, out=np.zeros_like(e), where=s > 0)
    if how == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-y))
    if how == "PROBIT":
        return math.sqrt(2.0) * _erfinv(2.0 * y - 1.0)
    return y


def _erfinv(z: np.ndarray) -> np.ndarray:
    """erf^-1 to double precision: Winitzki's estimate (about 2e-3 off) refined by Newton steps."""
    z = np.clip(z, -1.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ln = np.log((1.0 - z) * (1.0 + z))
        t = 2.0 / (math.pi * 0.147) + 0.5 * ln
        x = np.sign(z) * np.sqrt(np.sqrt(t * t - ln / 0.147) - t)
        erf = np.vectorize(math.erf, otypes=[np.float64])
        for _ in range(4):
            x = x - (erf(x) - z) / (2.0 / math.sqrt(math.pi) * np.exp(-x * x))
    return np.where(np.abs(z) == 1.0, np.copysign(np.inf, z), x)


@register_op
class TfIdfVectorizer(Op):
    """Counts the n-grams of each row of X ([C] or [B, C]; int or string) into float32 columns
    ([output_size] or [B, output_size]), then weighs them by `mode`: "TF" the counts, "IDF" the
    column's weight (1 without weights) where the count is nonzero, "TFIDF" weight * count.

    `ngrams[k]` counts into column `columns[k]`. An n-gram of n >= 2 may skip up to `max_skip`
    items between its elements, each skip distance counting separately; unigrams count once."""

    name = "tfidf_vectorizer"
    kind = OpKind.OPAQUE
    ngrams: tuple[tuple[int | str, ...], ...] = ()
    columns: tuple[int, ...] = ()
    output_size: int = 0
    max_skip: int = 0
    mode: str = "TF"
    weights: tuple[float, ...] = ()

    def compute_shape(self, inputs):
        (x,) = inputs
        if x.ndim not in (1, 2):
            raise ShapeError(f"{self.name}: X must be [C] or [B, C], got {x}")
        if self.mode not in ("TF", "IDF", "TFIDF"):
            raise ShapeError(f"{self.name}: bad mode {self.mode!r}")
        return Shape(DType.float32, x.dims[:-1] + (Dim.fixed(self.output_size),))

    compute_dynamic_shape = compute_shape

    def compute(self, args):
        (x,) = args
        table = dict(zip(self.ngrams, self.columns))
        sizes = sorted({len(g) for g in self.ngrams})
        rows = x.reshape(-1, x.shape[-1]).tolist()
        counts = np.zeros((len(rows), self.output_size), np.float32)
        for r, row in enumerate(rows):
            for n in sizes:
                for skip in (range(1, 2) if n == 1 else range(1, self.max_skip + 2)):
                    span = skip * (n - 1)
                    for start in range(len(row) - span):
                        col = table.get(tuple(row[start: start + span + 1: skip]))
                        if col is not None:
                            counts[r, col] += 1
        w = np.asarray(self.weights, np.float32) if self.weights else np.ones(self.output_size, np.float32)
        if self.mode == "IDF":
            counts = np.where(counts > 0, w, np.float32(0))
        elif self.mode == "TFIDF":
            counts = counts * w
        return counts.reshape(x.shape[:-1] + (self.output_size,)).astype(np.float32)

"""Ops whose output shapes depend on input *values*: Unique and NonMaxSuppression (as
NonZero in :mod:`.indexing`). They run on concrete tensors only; plans have static shapes,
so an imported model feeds them values known while building (the ONNX backend compiles a
plan per distinct value of such an input). Not differentiable. TfIdfVectorizer and
TreeEnsemble, whose output shapes are fixed but which walk token sequences and trees, run
their loops on the host too.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from .indexing import _concrete

__all__ = ["Unique", "NonMaxSuppression", "TfIdfVectorizer", "TreeEnsemble", "unique", "non_max_suppression", "unique_values",
           "nms_indices"]


def unique_values(x: np.ndarray, axis, sorted_: bool):
    """``(y, first indices, inverse indices, counts)`` as ONNX's Unique defines them."""
    flat = x.reshape(-1) if axis is None else x
    y, idx, inv, counts = np.unique(flat, True, True, True, axis=axis)
    if not sorted_:  # in order of first occurrence
        order = np.argsort(idx, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        idx, counts, inv = idx[order], counts[order], rank[inv.reshape(-1)]
        y = np.take(flat, idx, axis=0 if axis is None else axis)
    return y, idx.astype(np.int64), inv.reshape(-1).astype(np.int64), counts.astype(np.int64)


def _iou_over(b1, b2, center, threshold) -> bool:
    if center:
        x1 = (b1[0] - b1[2] / 2, b1[0] + b1[2] / 2)
        x2 = (b2[0] - b2[2] / 2, b2[0] + b2[2] / 2)
        y1 = (b1[1] - b1[3] / 2, b1[1] + b1[3] / 2)
        y2 = (b2[1] - b2[3] / 2, b2[1] + b2[3] / 2)
    else:  # [y1, x1, y2, x2], corners in any order
        x1, x2 = sorted((b1[1], b1[3])), sorted((b2[1], b2[3]))
        y1, y2 = sorted((b1[0], b1[2])), sorted((b2[0], b2[2]))
    w = min(x1[1], x2[1]) - max(x1[0], x2[0])
    h = min(y1[1], y2[1]) - max(y1[0], y2[0])
    if w <= 0 or h <= 0:
        return False
    inter = w * h
    a1 = (x1[1] - x1[0]) * (y1[1] - y1[0])
    a2 = (x2[1] - x2[0]) * (y2[1] - y2[0])
    union = a1 + a2 - inter
    if a1 <= 0 or a2 <= 0 or union <= 0:
        return False
    return inter / union > threshold


def nms_indices(boxes, scores, max_per_class, iou, score_threshold, center) -> np.ndarray:
    """``(selected, 3)`` int64 rows ``[batch, class, box]``: greedy non-maximum suppression
    per batch and class, highest scores first (equal scores: lower box index first)."""
    out = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            cand = np.arange(len(s)) if score_threshold is None else \
                np.flatnonzero(s > score_threshold)
            cand = cand[np.argsort(-s[cand], kind="stable")]
            kept = []
            for i in cand:
                if len(kept) >= max_per_class:
                    break
                if not any(_iou_over(boxes[b, i], boxes[b, j], center, iou) for j in kept):
                    kept.append(i)
                    out.append((b, c, i))
    return np.asarray(out, np.int64).reshape(-1, 3)


class Unique(Operation):
    """``(y, indices, inverse_indices, counts)`` of ``x`` (flattened when ``axis`` is
    None), sorted or in order of first occurrence."""

    differentiable = False

    def __init__(self, axis=None, sorted=True):  # noqa: A002 (ONNX's name)
        self.axis = None if axis is None else int(axis)
        self.sorted = bool(sorted)

    def infer(self, x):
        y, idx, inv, counts = unique_values(_concrete(x, "unique"), self.axis, self.sorted)
        return [TensorSpec(y.shape, x.dtype), TensorSpec(idx.shape, np.int64),
                TensorSpec(inv.shape, np.int64), TensorSpec(counts.shape, np.int64)]


class NonMaxSuppression(Operation):
    """Selected boxes ``(n, 3)`` of ``boxes (B, N, 4)`` and ``scores (B, C, N)``."""

    differentiable = False

    def __init__(self, max_per_class=0, iou_threshold=0.0, score_threshold=None,
                 center_point_box=False):
        self.max_per_class, self.iou_threshold = int(max_per_class), float(iou_threshold)
        self.score_threshold = None if score_threshold is None else float(score_threshold)
        self.center_point_box = bool(center_point_box)

    def select(self, boxes, scores):
        return nms_indices(boxes, scores, self.max_per_class, self.iou_threshold,
                           self.score_threshold, self.center_point_box)

    def infer(self, boxes, scores):
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
                scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise ShapeError(f"NonMaxSuppression: boxes {boxes.shape} (B, N, 4) and scores "
                             f"{scores.shape} (B, C, N) do not fit")
        n = len(self.select(_concrete(boxes, "nms"), _concrete(scores, "nms")))
        return [TensorSpec((n, 3), np.int64)]


def unique(x, axis=None, sorted=True):  # noqa: A002
    return Unique(axis, sorted)(x)


def non_max_suppression(boxes, scores, max_per_class=0, iou_threshold=0.0,
                        score_threshold=None, center_point_box=False):
    return NonMaxSuppression(max_per_class, iou_threshold, score_threshold,
                             center_point_box)(boxes, scores)


class TfIdfVectorizer(Operation):
    """ONNX TfIdfVectorizer over integer token ids: counts of the pool's n-grams (lengths
    ``min_gram``..``max_gram``, tokens up to ``max_skip`` apart) per row, weighted as TF,
    IDF or TFIDF. Output ``(B, size)`` or ``(size,)`` float32. Not differentiable."""

    differentiable = False

    def __init__(self, grams, size, min_gram, max_gram, max_skip, mode="TF", weights=None):
        self.grams = dict(grams)  # n-gram tuple -> output index
        self.prefixes = {g[:i] for g in self.grams for i in range(1, len(g))}
        self.size, self.min_gram, self.max_gram = int(size), int(min_gram), int(max_gram)
        self.max_skip, self.mode = int(max_skip), mode
        self.weights = None if weights is None or len(weights) == 0 else \
            np.asarray(weights, np.float32)

    def infer(self, x):
        if x.dtype.kind not in "iu" or x.ndim not in (1, 2):
            raise ShapeError(f"TfIdfVectorizer takes integer token ids of shape (C,) or "
                             f"(B, C), got {x.dtype} {x.shape}")
        return [TensorSpec(x.shape[:-1] + (self.size,), np.float32)]

    def counts(self, x: np.ndarray) -> np.ndarray:
        rows = x.reshape(-1, x.shape[-1]) if x.size else x.reshape(1, -1)
        out = np.zeros((rows.shape[0], self.size), np.float32)
        for r, row in enumerate(rows):
            row = [int(v) for v in row]
            first = self.min_gram
            for skip in range(1, self.max_skip + 2):
                for s in range(len(row)):
                    if s + skip * (first - 1) >= len(row):
                        break
                    gram = ()
                    for k in range(1, self.max_gram + 1):
                        j = s + (k - 1) * skip
                        if j >= len(row):
                            break
                        gram += (row[j],)
                        hit = self.grams.get(gram)
                        if hit is not None and k >= first:
                            out[r, hit] += 1
                        if hit is None and gram not in self.prefixes:
                            break
                if first == 1:  # unigrams do not depend on the skip: count them once
                    first = 2
                    if first > self.max_gram:
                        break
        if self.mode == "IDF":
            out = (out > 0) * (self.weights if self.weights is not None else 1.0)
        elif self.mode == "TFIDF" and self.weights is not None:
            out = out * self.weights
        return out.astype(np.float32).reshape(x.shape[:-1] + (self.size,))


_COMPARE = (lambda v, s: v <= s, lambda v, s: v < s, lambda v, s: v >= s,
            lambda v, s: v > s, lambda v, s: v == s, lambda v, s: v != s)


class TreeEnsemble(Operation):
    """ai.onnx.ml TreeEnsemble (opset 5): every tree routes each row to one leaf
    (``modes`` 0..6 = <=, <, >=, >, ==, !=, set membership; NaN follows
    ``missing_true``); leaf weights are summed, averaged, or the least or largest taken
    per target. Output ``(N, n_targets)``. Runs on the host; not differentiable."""

    differentiable = False

    def __init__(self, nodes, roots, leaves, n_targets, aggregate=1):
        # i -> (mode, split or set, feature, missing_true, true id, false id, true is a
        # leaf, false is a leaf)
        self.nodes = nodes
        self.roots, self.leaves = list(roots), list(leaves)  # leaves: (weight, target)
        self.n_targets, self.aggregate = int(n_targets), int(aggregate)

    def infer(self, x):
        if x.ndim != 2 or x.dtype.kind != "f":
            raise ShapeError(f"TreeEnsemble takes a float (N, features) input, got "
                             f"{x.dtype} {x.shape}")
        return [TensorSpec((x.shape[0], self.n_targets), x.dtype)]

    def _leaf(self, row, i, is_leaf):
        while not is_leaf:
            mode, split, feat, missing, t, f, tl, fl = self.nodes[i]
            v = float(row[feat])
            go = (v in split if mode == 6 else
                  _COMPARE[mode](v, split)) or (missing and v != v)
            i, is_leaf = (t, tl) if go else (f, fl)
        return self.leaves[i]

    def predict(self, x: np.ndarray) -> np.ndarray:
        init = {2: np.finfo(x.dtype).max, 3: np.finfo(x.dtype).min}.get(self.aggregate, 0)
        out = np.full((x.shape[0], self.n_targets), init, x.dtype)
        for r, row in enumerate(x):
            for root in self.roots:
                _, _, _, _, t, f, tl, fl = self.nodes[root]
                w, target = self._leaf(row, root, bool(tl and fl and t == f))
                if self.aggregate == 1:
                    out[r, target] += w
                elif self.aggregate == 0:
                    out[r, target] += w / len(self.roots)
                elif self.aggregate == 2:
                    out[r, target] = min(out[r, target], w)
                else:
                    out[r, target] = max(out[r, target], w)
        return out

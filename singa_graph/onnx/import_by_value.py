"""ONNX -> singa_graph: ops whose output shapes depend on input values (NonZero, Unique,
NonMaxSuppression). Plans have static shapes, so their data inputs must be known while
building: a fed input then compiles a plan per distinct value (the backend marks it), and
the op runs its own kernel on it while tracing. A value computed inside the graph at run
time is refused with a GraphError that names it. TfIdfVectorizer (integer tokens) counts
its n-grams on the host as well."""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import NeedsValue
from .registry import importer


def _known(n, i):
    if not n.is_const(i):
        raise NeedsValue(n.proto.input[i], n.name)
    return n.t(i)


def _scalar(n, i, default, kind=float):
    v = n.const(i) if n.has(i) else None
    return default if v is None or np.size(v) == 0 else kind(np.asarray(v).ravel()[0])


@importer("NonZero")
def nonzero(n):
    return ops.nonzero(_known(n, 0)).data


@importer("Unique")
def unique(n):
    outs = ops.unique(_known(n, 0), n.attr("axis"), bool(n.attr("sorted", 1)))
    return [o.data for o in outs]


@importer("NonMaxSuppression")
def non_max_suppression(n):
    boxes, scores = _known(n, 0), _known(n, 1)
    y = ops.non_max_suppression(boxes, scores, _scalar(n, 2, 0, int), _scalar(n, 3, 0.0),
                                _scalar(n, 4, None), bool(n.attr("center_point_box", 0)))
    return y.data


@importer("TfIdfVectorizer")
def tfidf_vectorizer(n):
    pool = n.attr("pool_int64s")
    if pool is None:
        n.fail("string n-grams (pool_strings)")
    starts = list(n.attr("ngram_counts")) + [len(pool)]
    indexes = list(n.attr("ngram_indexes"))
    lo, hi = n.attr("min_gram_length"), n.attr("max_gram_length")
    grams, gid = {}, 0
    for size, (a, b) in enumerate(zip(starts[:-1], starts[1:]), start=1):
        for j in range(a, b, size):
            if lo <= size <= hi:
                grams[tuple(int(v) for v in pool[j:j + size])] = indexes[gid]
            gid += 1
    op = ops.TfIdfVectorizer(grams, max(indexes) + 1, lo, hi, n.attr("max_skip_count", 0),
                             n.attr("mode", "TF"), n.attr("weights"))
    return op(n.t(0))

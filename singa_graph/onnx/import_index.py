"""ONNX -> singa_graph: indexing ops (Gather, GatherElements, ScatterElements and the older
Scatter, OneHot) and Trilu.

Gather with constant indices is the library's Gather (its indices checked once, while
building); with indices computed at run time it is Take.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import constant
from .registry import importer


@importer("Gather")
def gather(n):
    x, axis = n.t(0), n.attr("axis", 0)
    if n.is_const(1):
        return ops.gather(x, axis, np.asarray(n.const(1), np.int64))
    return ops.take(x, n.t(1), axis)


@importer("GatherElements")
def gather_elements(n):
    return ops.gather_elements(n.t(0), n.t(1), n.attr("axis", 0))


def _scatter(n):
    return ops.scatter_elements(n.t(0), n.t(1), n.t(2), n.attr("axis", 0),
                                n.attr("reduction", "none"))


@importer("ScatterElements")
def scatter_elements(n):
    return _scatter(n)


@importer("Scatter")
def scatter(n):
    """The deprecated name (opsets 9 and 10) of ScatterElements."""
    return _scatter(n)


@importer("OneHot")
def one_hot(n):
    idx = n.t(0)
    depth = int(np.ravel(n.const(1))[0])
    off, on = np.ravel(n.const(2))[:2]
    axis = n.attr("axis", -1)
    axis = axis + idx.ndim + 1 if axis < 0 else axis
    hot = ops.onehot(axis, idx, depth, (0.0, 1.0))
    # the library's one-hot wraps any index modulo depth; ONNX leaves indices outside
    # [-depth, depth) all off, so those rows are masked out
    inside = ops.logical_and(ops.less(idx, constant(np.asarray(depth, idx.dtype))),
                             ops.logical_not(ops.less(idx, constant(np.asarray(-depth,
                                                                               idx.dtype)))))
    inside = ops.unsqueeze(ops.cast(inside, hot.dtype), [axis])
    return ops.where(ops.mul(hot, inside), constant(np.asarray(on)), constant(np.asarray(off)))


@importer("Trilu")
def trilu(n):
    x = n.t(0)
    k = int(np.ravel(n.const(1, np.zeros(1, np.int64)))[0])
    if x.size == 0:
        return ops.identity(x)
    ones = np.ones(x.shape[-2:], np.bool_)
    keep = np.triu(ones, k) if n.attr("upper", 1) else np.tril(ones, k)
    return ops.where(constant(keep), x, constant(np.zeros((), x.dtype)))

"""ONNX -> singa_graph: GatherND, ScatterND, TopK, CumProd, ReverseSequence, and two
compositions: Compress (a Gather of the positions its condition selects, which must be
known while building: its output size depends on them) and CenterCropPad (a Slice and a
Pad per axis, from the target shape)."""
from __future__ import annotations

import numpy as np

from .. import ops
from .registry import importer


@importer("GatherND")
def gather_nd(n):
    return ops.gather_nd(n.t(0), n.t(1), n.attr("batch_dims", 0))


@importer("ScatterND")
def scatter_nd(n):
    return ops.scatter_nd(n.t(0), n.t(1), n.t(2), n.attr("reduction", "none"))


@importer("TopK", since=1)
def topk_1(n):
    return list(ops.topk(n.t(0), n.attr("k"), n.attr("axis", -1)))


@importer("TopK", since=10)
def topk_10(n):
    k = int(np.asarray(n.const(1)).ravel()[0])
    return list(ops.topk(n.t(0), k, n.attr("axis", -1), bool(n.attr("largest", 1))))


@importer("CumProd")
def cumprod(n):
    axis = int(np.asarray(n.const(1)).ravel()[0])
    return ops.cumprod(n.t(0), axis, bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))


@importer("ReverseSequence")
def reverse_sequence(n):
    return ops.reverse_sequence(n.t(0), n.t(1), n.attr("batch_axis", 1),
                                n.attr("time_axis", 0))


@importer("Compress")
def compress(n):
    x = n.t(0)
    keep = np.flatnonzero(np.asarray(n.const(1)).astype(bool))
    axis = n.attr("axis")
    if axis is None:
        x, axis = ops.reshape(x, (x.size,)), 0
    keep = keep[keep < x.shape[axis]]
    return ops.gather(x, axis, keep)


@importer("CenterCropPad")
def center_crop_pad(n):
    x = n.t(0)
    target = [int(v) for v in np.asarray(n.const(1)).ravel()]
    axes = n.attr("axes") or list(range(x.ndim))
    axes = [a % x.ndim for a in axes]
    y = x
    for a, want in zip(axes, target):
        have = y.shape[a]
        if want < have:  # crop: the larger half of the excess goes at the end
            start = (have - want) // 2
            y = ops.slice(y, [start], [start + want], [a], [1])
        elif want > have:  # pad: the larger half of the extra goes at the end
            begin = (want - have) // 2
            pads = [0] * (2 * y.ndim)
            pads[a], pads[y.ndim + a] = begin, want - have - begin
            y = ops.pad(y, "constant", pads, 0)
    return y if y is not x else ops.identity(x)


@importer("Det")
def det(n):
    return ops.det(n.t(0))

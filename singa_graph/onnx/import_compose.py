"""ONNX -> singa_graph: newer ops that are exact compositions of library ops: SwiGLU
(``a * sigmoid(alpha * a) * b``) and TensorScatter (a ScatterND writing ``update`` into a
cache at per-batch positions, wrapping around in circular mode)."""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import constant, scalar_like
from .registry import importer


@importer("SwiGLU")
def swiglu(n):
    a, b = n.t(0), n.t(1)
    alpha = float(n.attr("alpha", 1.0))
    gate = ops.sigmoid(a if alpha == 1.0 else ops.mul(a, scalar_like(alpha, a)))
    return ops.mul(ops.mul(a, gate), b)


@importer("TensorScatter")
def tensor_scatter(n):
    cache, update = n.t(0), n.t(1)
    axis = n.attr("axis", -2) % cache.ndim
    seq, size = update.shape[axis], cache.shape[axis]
    prefix = update.shape[:axis]
    if n.has(2):
        start = ops.cast(n.t(2), np.int64)
    else:
        start = constant(np.zeros((cache.shape[0],), np.int64))
    # position along the axis of update entry (prefix..., s): start[batch] + s
    pos = ops.add(ops.reshape(start, (cache.shape[0],) + (1,) * axis),
                  constant(np.arange(seq, dtype=np.int64).reshape((1,) * axis + (seq,))))
    if n.attr("mode", "linear") == "circular":
        pos = ops.mod(pos, constant(np.asarray(size, np.int64)))
    shape = prefix + (seq,)
    if pos.shape != shape:
        pos = ops.broadcast_to(pos, shape)
    lead = np.stack(np.meshgrid(*[np.arange(s) for s in prefix], indexing="ij"), -1) \
        if prefix else np.zeros((0,), np.int64)
    lead = np.broadcast_to(lead[..., None, :], shape + (axis,)).astype(np.int64)
    index = ops.cat([constant(np.ascontiguousarray(lead)), ops.reshape(pos, shape + (1,))],
                    -1)
    return ops.scatter_nd(cache, index, update)

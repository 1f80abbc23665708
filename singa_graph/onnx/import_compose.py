"""ONNX -> singa_graph: newer ops that are exact compositions of library ops: SwiGLU
(``a * sigmoid(alpha * a) * b``), RotaryEmbedding (pairs of features rotated by cached
cos/sin) and TensorScatter (a ScatterND writing ``update`` into a cache at per-batch
positions, wrapping around in circular mode)."""
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


@importer("RotaryEmbedding")
def rotary_embedding(n):
    """Rotate pairs of features by the cached cos/sin of each position: Slice, Take,
    Mul/Add/Sub and Concat, halves or interleaved pairs as ONNX specifies."""
    x, cos, sin = n.t(0), n.t(1), n.t(2)
    shape = x.shape
    if x.ndim == 4:  # (B, heads, S, H) -> (B, S, heads, H)
        x = ops.transpose(x, (0, 2, 1, 3))
    else:
        heads = n.attr("num_heads", 0)
        x = ops.reshape(x, shape[:2] + (heads, shape[2] // heads))
    b, s, h, d = x.shape
    rot = n.attr("rotary_embedding_dim", 0) or d
    if n.has(3):  # per-position rows of the caches
        pos = n.t(3)
        cos, sin = ops.take(cos, pos, 0), ops.take(sin, pos, 0)
    cos = ops.reshape(cos, (cos.shape[0], s, 1, rot // 2))
    sin = ops.reshape(sin, (sin.shape[0], s, 1, rot // 2))
    part = ops.slice(x, [0], [rot], [3], [1]) if rot < d else x
    if n.attr("interleaved", 0):
        x1 = ops.slice(part, [0], [rot], [3], [2])
        x2 = ops.slice(part, [1], [rot], [3], [2])
    else:
        x1, x2 = ops.split(part, 3, [rot // 2, rot // 2])
    real = ops.sub(ops.mul(cos, x1), ops.mul(sin, x2))
    imag = ops.add(ops.mul(sin, x1), ops.mul(cos, x2))
    if n.attr("interleaved", 0):
        pairs = ops.cat([ops.reshape(real, real.shape + (1,)),
                         ops.reshape(imag, imag.shape + (1,))], 4)
        turned = ops.reshape(pairs, (b, s, h, rot))
    else:
        turned = ops.cat([real, imag], 3)
    if rot < d:
        turned = ops.cat([turned, ops.slice(x, [rot], [d], [3], [1])], 3)
    if len(shape) == 4:
        return ops.transpose(turned, (0, 2, 1, 3))
    return ops.reshape(turned, shape)

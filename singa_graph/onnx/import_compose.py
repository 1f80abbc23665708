"""ONNX -> singa_graph: newer ops that are exact compositions of library ops: SwiGLU
(``a * sigmoid(alpha * a) * b``), RotaryEmbedding (pairs of features rotated by cached
cos/sin), TensorScatter (a ScatterND writing ``update`` into a cache at per-batch
positions, wrapping around in circular mode) and LinearAttention (its recurrence unrolled
over the static sequence length)."""
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


def _heads(x, h):
    """(B, T, h*D) -> (B, h, T, D)."""
    b, t, hd = x.shape
    return ops.transpose(ops.reshape(x, (b, t, h, hd // h)), (0, 2, 1, 3))


@importer("LinearAttention")
def linear_attention(n):
    """The recurrence of ONNX's LinearAttention unrolled over the (static) sequence: per
    step an optional decay of the state, an optional delta correction, the outer-product
    write and the read by the queries (kv heads repeated for grouped queries), all as
    MatMul/Mul/Exp in float32."""
    f32 = np.dtype(np.float32)

    def t32(i):
        x = n.t(i)
        return x if x.dtype == f32 else ops.cast(x, f32)

    hq, hk = n.attr("q_num_heads"), n.attr("kv_num_heads")
    rule = n.attr("update_rule", "gated_delta")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    out_dtype = n.t(0).dtype
    q, k, v = _heads(t32(0), hq), _heads(t32(1), hk), _heads(t32(2), hk)
    b, _, t, dk = q.shape
    dv = v.shape[3]
    group = hq // hk
    if n.has(3):
        state = t32(3)
        state_dtype = n.t(3).dtype
    else:
        state = constant(np.zeros((b, hk, dk, dv), np.float32))
        state_dtype = out_dtype
    if gating:
        g = t32(4)
        g = (ops.transpose(ops.reshape(g, (b, t, hk, 1)), (0, 2, 1, 3)) if g.shape[2] == hk
             else _heads(g, hk))  # (B, H_kv, T, 1 or d_k)
    if delta:
        beta = t32(5)
        beta = ops.transpose(ops.reshape(beta, (b, t, beta.shape[2], 1)), (0, 2, 1, 3))
    scale = n.attr("scale", 0.0) or 1.0 / np.sqrt(dk)
    step = lambda x, i: ops.slice(x, [i], [i + 1], [2], [1])  # noqa: E731
    outs = []
    for i in range(t):
        q_t, k_t, v_t = step(q, i), step(k, i), step(v, i)  # (B, H, 1, D)
        if gating:  # state *= exp(g_t) along d_k
            state = ops.mul(state, ops.transpose(ops.exp(step(g, i)), (0, 1, 3, 2)))
        if delta:  # v_t = beta_t * (v_t - k_t @ state)
            v_t = ops.mul(step(beta, i), ops.sub(v_t, ops.matmul(k_t, state)))
        state = ops.add(state, ops.matmul(ops.transpose(k_t, (0, 1, 3, 2)), v_t))
        read = state
        if group > 1:
            read = ops.reshape(ops.broadcast_to(ops.reshape(state, (b, hk, 1, dk, dv)),
                                                (b, hk, group, dk, dv)), (b, hq, dk, dv))
        outs.append(ops.matmul(q_t, read))
    y = ops.cat(outs, 2) if len(outs) > 1 else outs[0]
    y = ops.mul(y, constant(np.asarray(scale, np.float32)))
    y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (b, t, hq * dv))
    if out_dtype != f32:
        y = ops.cast(y, out_dtype)
    if state_dtype != f32:
        state = ops.cast(state, state_dtype)
    return [y, state]

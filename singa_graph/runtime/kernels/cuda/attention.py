"""CUDA kernels of :mod:`..cpu.attention`: LayerNorm and scaled dot-product attention.

These are grid-stride loops with one thread per row: LayerNorm statistics per row in
float64, its parameter gradients per column; attention one thread per query row (scores,
max-shifted softmax and the logsumexp into the planned workspace, then the weighted sum of
values) and, in the backward, one thread per query row (dq and the score gradients) then one
per key row (dk and dv). q/k/v stay in their layout (``bshd`` is indexed in place, nothing
is transposed). Correct on every GPU and under the simulator; tiled tensor-core kernels
would be the next step for speed.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ...registry import carve, carved_bytes, kernel
from .launch import noop, sequence, step


# ---------------------------------------------------------------------- layer norm
@cuda.jit(cache=True)
def _ln_fwd(x, scale, bias, y, mean, rstd, eps):
    m, n = x.shape
    for i in range(cuda.grid(1), m, cuda.gridsize(1)):
        s = 0.0
        for j in range(n):
            s += x[i, j]
        mu = s / n
        s2 = 0.0
        for j in range(n):
            d = x[i, j] - mu
            s2 += d * d
        r = 1.0 / math.sqrt(s2 / n + eps)
        for j in range(n):
            y[i, j] = (x[i, j] - mu) * r * scale[j] + bias[j]
        mean[i] = mu
        rstd[i] = r


@cuda.jit(cache=True)
def _ln_dx(dy, x, scale, mean, rstd, dx):
    m, n = x.shape
    for i in range(cuda.grid(1), m, cuda.gridsize(1)):
        mu, r = float(mean[i]), float(rstd[i])
        a = 0.0
        b = 0.0
        for j in range(n):
            g = float(dy[i, j]) * scale[j]
            a += g
            b += g * (x[i, j] - mu) * r
        a /= n
        b /= n
        for j in range(n):
            dx[i, j] = r * (float(dy[i, j]) * scale[j] - a - (x[i, j] - mu) * r * b)


@cuda.jit(cache=True)
def _ln_dparam(dy, x, mean, rstd, dscale, dbias):
    m, n = x.shape
    for j in range(cuda.grid(1), n, cuda.gridsize(1)):
        s = 0.0
        sx = 0.0
        for i in range(m):
            g = float(dy[i, j])
            s += g
            sx += g * (x[i, j] - mean[i]) * rstd[i]
        dscale[j] = sx
        dbias[j] = s


def _rows(a, axis):
    return a.reshape((int(np.prod(a.shape[:axis], dtype=np.int64)),
                      int(np.prod(a.shape[axis:], dtype=np.int64))))


def _vec(a):
    return a.reshape(a.size)


@kernel("LayerNorm", "cuda")
def layer_norm(op, ins, outs):
    x, y = _rows(ins[0], op.axis), _rows(outs[0], op.axis)
    return step(_ln_fwd, x.shape[0], x, _vec(ins[1]), _vec(ins[2]), y, _vec(outs[1]),
                _vec(outs[2]), op.eps)


@kernel("LayerNormGrad", "cuda")
def layer_norm_grad(op, ins, outs):
    dy, x = _rows(ins[0], op.axis), _rows(ins[1], op.axis)
    scale, mean, rstd = (_vec(a) for a in ins[2:])
    dx = _rows(outs[0], op.axis)
    return sequence([step(_ln_dx, x.shape[0], dy, x, scale, mean, rstd, dx),
                     step(_ln_dparam, x.shape[1], dy, x, mean, rstd, _vec(outs[1]),
                          _vec(outs[2]))])


# ---------------------------------------------------------------------- attention
# Arrays are 4-d in their own layout; ``t`` (1 for bshd) swaps the head and seq indices.
@cuda.jit(device=True)
def _at(a, b, h, s, d, t):
    return a[b, s, h, d] if t else a[b, h, s, d]


@cuda.jit(device=True)
def _masked(s, b, h, r, c, mask, kind, causal):
    if kind == 1:
        s += mask[b % mask.shape[0], h % mask.shape[1], r % mask.shape[2], c % mask.shape[3]]
    elif kind == 2 and not mask[b % mask.shape[0], h % mask.shape[1], r % mask.shape[2],
                                c % mask.shape[3]]:
        s = -math.inf
    if causal and c > r:
        s = -math.inf
    return s


@cuda.jit(device=True)
def _probs(q, k, mask, kind, causal, scale, b, h, r, row, t):
    """Masked, scaled scores of query row r into ``row``; returns their maximum."""
    m = -math.inf
    for c in range(row.shape[0]):
        acc = 0.0
        for d in range(q.shape[3]):
            acc += _at(q, b, h, r, d, t) * _at(k, b, h, c, d, t)
        s = _masked(acc * scale, b, h, r, c, mask, kind, causal)
        row[c] = s
        m = max(m, s)
    return m


@cuda.jit(cache=True)
def _att_fwd(q, k, v, mask, kind, causal, scale, out, lse, ws, nh, sq, t):
    n = ws.shape[0] * sq
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        bh, r = i // sq, i % sq
        b, h = bh // nh, bh % nh
        row = ws[bh, r]
        m = _probs(q, k, mask, kind, causal, scale, b, h, r, row, t)
        tot = 0.0
        for c in range(row.shape[0]):
            e = math.exp(row[c] - m)
            row[c] = e
            tot += e
        for c in range(row.shape[0]):
            row[c] /= tot
        lse[b, h, r] = m + math.log(tot)
        for d in range(out.shape[3]):
            acc = 0.0
            for c in range(row.shape[0]):
                acc += row[c] * _at(v, b, h, c, d, t)
            if t:
                out[b, r, h, d] = acc
            else:
                out[b, h, r, d] = acc


@cuda.jit(cache=True)
def _att_bwd_rows(dout, q, k, v, out, lse, mask, kind, causal, scale, dq, ws, nh, sq, t):
    # per query row: P (ws[.., 0]), dS = P * (dP - D) * scale (ws[.., 1]) and dq = dS k
    n = ws.shape[0] * sq
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        bh, r = i // sq, i % sq
        b, h = bh // nh, bh % nh
        p, ds = ws[bh, 0, r], ws[bh, 1, r]
        _probs(q, k, mask, kind, causal, scale, b, h, r, p, t)
        l = lse[b, h, r]
        dd = 0.0
        for d in range(out.shape[3]):
            dd += _at(dout, b, h, r, d, t) * _at(out, b, h, r, d, t)
        for c in range(p.shape[0]):
            p[c] = math.exp(p[c] - l)
            dp = 0.0
            for d in range(v.shape[3]):
                dp += _at(dout, b, h, r, d, t) * _at(v, b, h, c, d, t)
            ds[c] = p[c] * (dp - dd) * scale
        for d in range(q.shape[3]):
            acc = 0.0
            for c in range(p.shape[0]):
                acc += ds[c] * _at(k, b, h, c, d, t)
            if t:
                dq[b, r, h, d] = acc
            else:
                dq[b, h, r, d] = acc


@cuda.jit(cache=True)
def _att_bwd_cols(dout, q, dk, dv, ws, nh, sk, t):
    # per key row c: dv = P^T dout, dk = dS^T q
    n = ws.shape[0] * sk
    sq = ws.shape[2]
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        bh, c = i // sk, i % sk
        b, h = bh // nh, bh % nh
        for d in range(dv.shape[3]):
            acc = 0.0
            for r in range(sq):
                acc += ws[bh, 0, r, c] * _at(dout, b, h, r, d, t)
            if t:
                dv[b, c, h, d] = acc
            else:
                dv[b, h, c, d] = acc
        for d in range(dk.shape[3]):
            acc = 0.0
            for r in range(sq):
                acc += ws[bh, 1, r, c] * _at(q, b, h, r, d, t)
            if t:
                dk[b, c, h, d] = acc
            else:
                dk[b, h, c, d] = acc


def _geometry(op, q, k):
    if op.layout == "bshd":
        return q.shape[0], q.shape[2], q.shape[1], k.shape[1]
    return q.shape[0], q.shape[1], q.shape[2], k.shape[2]


def _mask(ins, at, like):
    # without a mask the kernel never reads it: any 4-d array of the right type will do
    if len(ins) <= at:
        return like, 0
    m = ins[at]
    m = m.reshape((1,) * (4 - m.ndim) + tuple(m.shape))
    return m, (2 if m.dtype == np.bool_ else 1)


def attention_workspace(op, ins, outs):
    b, h, sq, sk = _geometry(op, ins[0], ins[1])
    return carved_bytes(((b * h, sq, sk), ins[0].dtype))


def attention_grad_workspace(op, ins, outs):
    b, h, sq, sk = _geometry(op, ins[1], ins[2])
    return carved_bytes(((b * h, 2, sq, sk), ins[1].dtype))


@kernel("ScaledDotProductAttention", "cuda", workspace=attention_workspace)
def attention(op, ins, outs, ws):
    q, k, v = ins[:3]
    b, h, sq, sk = _geometry(op, q, k)
    if b * h * sq == 0:
        return noop
    mask, kind = _mask(ins, 3, q)
    (s,) = carve(ws, ((b * h, sq, sk), q.dtype))
    t = int(op.layout == "bshd")
    return step(_att_fwd, b * h * sq, q, k, v, mask, kind, op.causal, q.dtype.type(op.scale),
                outs[0], outs[1], s, h, sq, t)


@kernel("ScaledDotProductAttentionGrad", "cuda", workspace=attention_grad_workspace)
def attention_grad(op, ins, outs, ws):
    dout, q, k, v, out, lse = ins[:6]
    b, h, sq, sk = _geometry(op, q, k)
    if b * h * (sq + sk) == 0:
        return noop
    mask, kind = _mask(ins, 6, q)
    (s,) = carve(ws, ((b * h, 2, sq, sk), q.dtype))
    t = int(op.layout == "bshd")
    dq, dk, dv = outs
    return sequence([
        step(_att_bwd_rows, b * h * sq, dout, q, k, v, out, lse, mask, kind, op.causal,
             q.dtype.type(op.scale), dq, s, h, sq, t),
        step(_att_bwd_cols, b * h * sk, dout, q, dk, dv, s, h, sk, t)])

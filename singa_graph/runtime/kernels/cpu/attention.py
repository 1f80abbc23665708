"""LayerNorm and attention kernels: Numba loops, statistics in float64, GEMMs in BLAS.

Attention splits the ``batch * heads`` slices into at most :data:`PARTS` chunks, one per
thread; each chunk owns one ``seq_q x seq_k`` block of the planned workspace (two in the
backward: probabilities and their gradient) and runs its slices one after the other, each
slice two (forward) or five (backward) single-threaded BLAS GEMMs on strided views and one
fused, max-shifted softmax pass over the block. The chunk count does not depend on the
thread count, so the workspace and the results are the same on every machine.
"""
import numpy as np
from numba import njit, prange, uintp

from ...registry import carve, carved_bytes, kernel
from .blas import HANDLE, gemm
from .vexp import exp as _exp  # float32: vectorisable (libm's expf is a scalar call)
from .loops import bound, flat_view, loops, pick

PARTS = 16
_NO_MASK = np.zeros((1, 1, 1, 1), np.float32)  # read-only stand-in when there is no mask


# ---------------------------------------------------------------------- layer norm
# reassoc (pinned, not inherited): the sums may be regrouped into vector lanes; float64
# keeps the order's effect far below float32's rounding
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def _moments(x, b, n, shift):
    """``sum(x[b:b+n] - shift)`` and ``sum((x[b:b+n] - shift)**2)`` in float64."""
    s = q = 0.0
    for j in range(n):
        d = np.float64(x[b + uintp(j)]) - shift
        s += d
        q += d * d
    return s, q


@loops
def _LN_FWD(x, scale, bias, y, mean, rstd, eps, n):
    """LayerNorm of the rows of the flat ``x`` (rows of ``n``), found by offset: slicing a
    row per iteration bumped one reference count from every thread, and the sums in four
    scalar lanes did not vectorise (a ViT's 130 x 64 rows 17.7 -> 14.3 us a step, 2026-11-27).
    The moments are one pass in float64 over the row shifted by its first value (which
    keeps the variance of values far from zero free of cancellation, as a second pass
    about the mean did); the row is normalised in its own dtype, so that the loop over it
    vectorises without conversions (130 x 64, one thread: 11.6 -> 5.0 us, 2026-12-02):
    the mean as its rounding ``mt`` and the rest ``ct``, subtracted one after the other, so
    that a mean far from zero loses nothing to its rounding (x - mt is exact near it)."""
    m = mean.shape[0]
    for i in prange(m):
        b = uintp(i * n)
        first = np.float64(x[b])
        s, s2 = _moments(x, b, n, first)
        mu = first + s / n
        r = 1.0 / np.sqrt(max(s2 / n - (s / n) ** 2, 0.0) + eps)
        mt, rt = x.dtype.type(mu), x.dtype.type(r)
        ct = x.dtype.type(mu - np.float64(mt))
        for j in range(n):
            u = b + uintp(j)
            y[u] = ((x[u] - mt) - ct) * rt * scale[j] + bias[j]
        mean[i] = mu
        rstd[i] = r


LN_PARTS = 16  # row blocks of the backward, each summing its own dscale/dbias partials


@loops
def _LN_BWD(dy, x, scale, mean, rstd, dx, dscale, dbias, acc, parts):
    """dx row by row; dscale and dbias summed per block of rows into ``acc`` (float64,
    ``(parts, 3, n)``), then over the blocks in order: the same sums on any thread count."""
    m, n = x.shape
    for p in prange(parts):
        ds, db, t = acc[p, 0], acc[p, 1], acc[p, 2]
        ds[:] = 0.0
        db[:] = 0.0
        for i in range(p * m // parts, (p + 1) * m // parts):
            mu, r = np.float64(mean[i]), np.float64(rstd[i])
            for j in range(n):  # vectorised: xhat, g = dy * scale, the parameter sums
                g = np.float64(dy[i, j])
                xh = (x[i, j] - mu) * r
                ds[j] += g * xh
                db[j] += g
                t[j] = g * scale[j]
            a0 = a1 = b0 = b1 = 0.0  # sum(g), sum(g * xhat) in two lanes each
            j = 0
            while j + 2 <= n:
                a0 += t[j]
                a1 += t[j + 1]
                b0 += t[j] * ((x[i, j] - mu) * r)
                b1 += t[j + 1] * ((x[i, j + 1] - mu) * r)
                j += 2
            if j < n:
                a0 += t[j]
                b0 += t[j] * ((x[i, j] - mu) * r)
            a, b = (a0 + a1) / n, (b0 + b1) / n
            for j in range(n):
                dx[i, j] = r * (t[j] - a - (x[i, j] - mu) * r * b)
    for j in range(n):
        s = 0.0
        sb = 0.0
        for p in range(parts):
            s += acc[p, 0, j]
            sb += acc[p, 1, j]
        dscale[j] = s
        dbias[j] = sb


def _rows(a, axis):
    return a.reshape(int(np.prod(a.shape[:axis], dtype=np.int64)), -1)


@kernel("LayerNorm")
def layer_norm(op, ins, outs):
    x, scale, bias = (_rows(a, op.axis) if a is ins[0] else a.reshape(-1) for a in ins)
    y, mean, rstd = _rows(outs[0], op.axis), outs[1].reshape(-1), outs[2].reshape(-1)
    fn = pick(_LN_FWD, x.size)
    return bound(fn, flat_view(x), scale, bias, flat_view(y), mean, rstd, op.eps, x.shape[1])


def _ln_grad_geometry(op, ins):
    x = _rows(ins[1], op.axis)
    return min(LN_PARTS, max(x.shape[0], 1)), x.shape[1]


def layer_norm_grad_workspace(op, ins, outs):
    parts, n = _ln_grad_geometry(op, ins)
    return carved_bytes(((parts, 3, n), np.float64))


@kernel("LayerNormGrad", workspace=layer_norm_grad_workspace)
def layer_norm_grad(op, ins, outs, ws):
    dy, x = _rows(ins[0], op.axis), _rows(ins[1], op.axis)
    scale, mean, rstd = (a.reshape(-1) for a in ins[2:])
    dx, ds, db = _rows(outs[0], op.axis), outs[1].reshape(-1), outs[2].reshape(-1)
    parts, n = _ln_grad_geometry(op, ins)
    (acc,) = carve(ws, ((parts, 3, n), np.float64))
    fn = pick(_LN_BWD, x.size)
    return bound(fn, dy, x, scale, mean, rstd, dx, ds, db, acc, parts)


# ---------------------------------------------------------------------- attention
@njit(cache=True, nogil=True, error_model="numpy")
def _score(row, r, b, h, mask, kind, lim, scale):
    """Scale ``row[:lim]`` of the scores in place and add or apply the mask; returns the
    maximum. (Keys from ``lim`` on are cut by ``causal``.)"""
    ninf = -np.inf
    if kind == 0:  # one vectorised pass, then the maximum in independent chains
        sc = row.dtype.type(scale)
        for c in range(lim):
            row[c] *= sc
        return run_max(row, 0, lim) if lim else ninf
    m = ninf
    for c in range(lim):
        s = row[c] * scale
        if kind == 1:
            s += mask[b % mask.shape[0], h % mask.shape[1], r % mask.shape[2],
                      c % mask.shape[3]]
        elif not mask[b % mask.shape[0], h % mask.shape[1], r % mask.shape[2],
                      c % mask.shape[3]]:
            s = ninf
        row[c] = s
        m = max(m, s)
    return m


# reassoc: the adds may be regrouped, so LLVM sums in vector lanes (the four scalar chains
# this replaced took 19 of a 65-wide softmax's 150 us a call on 520 rows); float64 keeps the
# order's effect far below float32's rounding. Pinned: fastmath is not inherited from callers.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def sum64(a, b, n):
    """``sum(a[b:b+n])`` accumulated in float64."""
    t = 0.0
    for c in range(n):
        t += a[uintp(b) + uintp(c)]
    return t


@njit(cache=True, nogil=True, error_model="numpy")
def run_max(a, b, n):
    """``max(a[b:b+n])`` for ``n >= 1`` in eight independent chains: a float max takes 4
    cycles and is not regrouped without fast-math, so one chain over a 65-wide row cost
    as much as its exponentials. Max is exact, so the grouping does not change the result
    (a row with a NaN gives NaN outputs either way)."""
    b = uintp(b)
    if n < 16:
        m = a[b]
        for k in range(1, n):
            m = max(m, a[b + uintp(k)])
        return m
    m0, m1, m2, m3 = a[b], a[b + uintp(1)], a[b + uintp(2)], a[b + uintp(3)]
    m4, m5, m6, m7 = a[b + uintp(4)], a[b + uintp(5)], a[b + uintp(6)], a[b + uintp(7)]
    k = 8
    while k + 8 <= n:
        u = b + uintp(k)
        m0, m1 = max(m0, a[u]), max(m1, a[u + uintp(1)])
        m2, m3 = max(m2, a[u + uintp(2)]), max(m3, a[u + uintp(3)])
        m4, m5 = max(m4, a[u + uintp(4)]), max(m5, a[u + uintp(5)])
        m6, m7 = max(m6, a[u + uintp(6)]), max(m7, a[u + uintp(7)])
        k += 8
    for j in range(k, n):
        m0 = max(m0, a[b + uintp(j)])
    return max(max(max(m0, m1), max(m2, m3)), max(max(m4, m5), max(m6, m7)))


@njit(cache=True, nogil=True, error_model="numpy")
def exp_shift(row, lim, shift):
    """``row[:lim] = exp(row[:lim] - shift)`` (a loop LLVM vectorises: no division check, one
    array), ``row[lim:] = 0``; returns the sum of the exponentials, accumulated in float64
    (:func:`sum64`)."""
    sh = row.dtype.type(shift)  # float32 rows subtract and exponentiate in float32
    for c in range(lim):
        row[c] = _exp(row[c] - sh)
    for c in range(lim, row.shape[0]):
        row[c] = 0
    return sum64(row, 0, lim)


@njit(cache=True, nogil=True, error_model="numpy")
def _softmax_grad(p, dp, lim, d, scale):
    """``p[:lim] = p * (dp - d) * scale``: the scores' gradient over the probabilities."""
    for c in range(lim):
        p[c] = p[c] * (dp[c] - d) * scale


@loops
def _ATT_FWD(q, k, v, mask, kind, causal, scale, out, lse, ws, parts, blas):
    nb, nh, sq, _ = q.shape
    sk = k.shape[2]
    n = nb * nh
    for p in prange(parts):
        s = ws[p]
        for i in range(p * n // parts, (p + 1) * n // parts):
            b, h = i // nh, i % nh
            gemm(q[b, h], k[b, h].T, s, 0.0, blas)
            for r in range(sq):
                lim = min(r + 1, sk) if causal else sk
                m = _score(s[r], r, b, h, mask, kind, lim, scale)
                tot = exp_shift(s[r], lim, m)
                inv = s.dtype.type(1.0 / tot)
                row = s[r]
                for c in range(lim):
                    row[c] *= inv
                lse[b, h, r] = m + np.log(tot)
            gemm(s, v[b, h], out[b, h], 0.0, blas)


@loops
def _ATT_BWD(dout, q, k, v, out, lse, mask, kind, causal, scale, dq, dk, dv, ws, parts, blas):
    nb, nh, sq, _ = q.shape
    sk = k.shape[2]
    n = nb * nh
    for p in prange(parts):
        s, dp = ws[p, 0], ws[p, 1]
        for i in range(p * n // parts, (p + 1) * n // parts):
            b, h = i // nh, i % nh
            gemm(q[b, h], k[b, h].T, s, 0.0, blas)
            for r in range(sq):
                lim = min(r + 1, sk) if causal else sk
                _score(s[r], r, b, h, mask, kind, lim, scale)
                exp_shift(s[r], lim, lse[b, h, r])
            gemm(s.T, dout[b, h], dv[b, h], 0.0, blas)
            gemm(dout[b, h], v[b, h].T, dp, 0.0, blas)
            do, o = dout[b, h], out[b, h]
            for r in range(sq):
                lim = min(r + 1, sk) if causal else sk
                d = 0.0  # rowsum(dout * out) = rowsum(P * dP)
                for j in range(do.shape[1]):
                    d += np.float64(do[r, j]) * o[r, j]
                _softmax_grad(s[r], dp[r], lim, s.dtype.type(d), s.dtype.type(scale))
            gemm(s, k[b, h], dq[b, h], 0.0, blas)
            gemm(s.T, q[b, h], dk[b, h], 0.0, blas)


def _view(a, layout):
    """``a`` as ``(batch, heads, seq, dim)`` without copying."""
    return a if layout == "bhsd" else a.swapaxes(1, 2)


def _mask(op, ins, at):
    if len(ins) <= at:
        return _NO_MASK, 0
    m = ins[at]
    m = m.reshape((1,) * (4 - m.ndim) + m.shape)
    return m, (2 if m.dtype == np.bool_ else 1)


def _geometry(op, ins):
    q, k = ins[0], ins[1]
    if op.layout == "bshd":
        return q.shape[0] * q.shape[2], q.shape[1], k.shape[1]
    return q.shape[0] * q.shape[1], q.shape[2], k.shape[2]


def attention_workspace(op, ins, outs):
    n, sq, sk = _geometry(op, ins)
    return carved_bytes(((min(PARTS, n), sq, sk), ins[0].dtype))


def attention_grad_workspace(op, ins, outs):
    n, sq, sk = _geometry(op, ins[1:])
    return carved_bytes(((min(PARTS, n), 2, sq, sk), ins[1].dtype))


@kernel("ScaledDotProductAttention", workspace=attention_workspace)
def attention(op, ins, outs, ws):
    q, k, v = (_view(a, op.layout) for a in ins[:3])
    mask, kind = _mask(op, ins, 3)
    out, lse = _view(outs[0], op.layout), outs[1]
    n, sq, sk = _geometry(op, ins)
    parts = min(PARTS, n)
    (s,) = carve(ws, ((parts, sq, sk), q.dtype))
    fn = pick(_ATT_FWD, n * sq * sk * max(q.shape[3], 1))
    return bound(fn, q, k, v, mask, kind, op.causal, op.scale, out, lse, s, parts, HANDLE)


@kernel("ScaledDotProductAttentionGrad", workspace=attention_grad_workspace)
def attention_grad(op, ins, outs, ws):
    dout, q, k, v, out = (_view(a, op.layout) for a in ins[:5])
    lse = ins[5]
    mask, kind = _mask(op, ins, 6)
    dq, dk, dv = (_view(a, op.layout) for a in outs)
    n, sq, sk = _geometry(op, ins[1:])
    parts = min(PARTS, n)
    (s,) = carve(ws, ((parts, 2, sq, sk), q.dtype))
    fn = pick(_ATT_BWD, n * sq * sk * max(q.shape[3], 1))
    return lambda: fn(dout, q, k, v, out, lse, mask, kind, op.causal, op.scale, dq, dk, dv, s,
                      parts, HANDLE)

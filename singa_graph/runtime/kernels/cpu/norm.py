"""Batch-norm kernels: Numba loops parallel over channels, statistics in float64.

Inputs are viewed as ``(N, C, S)`` (S = H*W, or 1 for 2-d inputs). Each reduction is one
pass over the contiguous S-planes of a channel, accumulated per plane in float64 by small
helpers compiled with ``fastmath={"reassoc"}`` so LLVM may vectorise the sums (the only
licence taken: reordering the additions); the plane sums are added serially. The forward's
one pass takes the sum and the sum of squares of ``x - K``, K being the channel's first
value: this shifted form keeps the variance accurate when |mean| >> std, as the two-pass
form did, without a second pass. Small inputs run on one thread (see ``loops.PARALLEL_WORK``).
"""
import numpy as np
from numba import njit, prange, uintp

from ....runtime import threads
from ...registry import carve, carved_bytes, kernel
from .loops import bound, loops, pick

_REASSOC = {"reassoc"}


@njit(cache=True, fastmath=_REASSOC)
def _shifted_sums(v, k):
    """``(sum(v - k), sum((v - k)**2))`` of a 1-d array, in float64."""
    s = 0.0
    s2 = 0.0
    for i in range(v.shape[0]):
        d = v[i] - k
        s += d
        s2 += d * d
    return s, s2


@njit(cache=True, fastmath=_REASSOC)
def _grad_sums(g, v, mu):
    """``(sum(g), sum(g * (v - mu)))`` of two 1-d arrays, in float64."""
    s = 0.0
    sx = 0.0
    for i in range(g.shape[0]):
        gi = np.float64(g[i])
        s += gi
        sx += gi * (v[i] - mu)
    return s, sx


@njit(cache=True, fastmath=_REASSOC)
def _masked_grad_sums(g, z, v, mu):
    """:func:`_grad_sums` of ``g * (z > 0)`` (a ReLU's backward folded in), the same loop
    with the ReLUGrad kernel's select in front of each term."""
    zero = g.dtype.type(0)
    s = 0.0
    sx = 0.0
    for i in range(g.shape[0]):
        gi = np.float64(g[i] if z[i] > 0 else zero)
        s += gi
        sx += gi * (v[i] - mu)
    return s, sx


@njit(cache=True, inline="always")
def _affine(xr, yr, a, b, relu):
    """``yr = xr * a + b``, then ``max(yr, 0)`` as np.maximum computes it (NaN kept) when
    ``relu``: the ReLU kernel's result on the stored values, bit for bit."""
    _affine_at(xr, yr, 0, xr.shape[0], a, b, relu)


@njit(cache=True, inline="always")
def _affine_at(x, y, o, n, a, b, relu):
    """:func:`_affine` on ``x[o:o + n]`` into ``y[o:o + n]`` of flat arrays. Inlined, and
    on offsets rather than a view per plane: on densenet's 4x4 and 2x2 planes a call per
    plane cost more than the plane itself, and so did a view per plane, whose reference
    count both threads updated ((2, 1024, 2, 2): 16 us)."""
    zero = y.dtype.type(0)
    if relu:  # unsigned indices: no negative-index wrap-around in the way of vectorising
        for i in range(uintp(o), uintp(o + n)):
            f = y.dtype.type(x[i] * a + b)  # rounded as stored, then the ReLU
            y[i] = f if (f >= zero or f != f) else zero
    else:
        for i in range(uintp(o), uintp(o + n)):
            y[i] = x[i] * a + b


@loops
def _BN_TRAIN(x, scale, bias, y, mean_out, inv_out, rm, rv, momentum, eps, relu):
    n_, c_, s_ = x.shape
    m = n_ * s_
    for c in prange(c_):
        k = np.float64(x[0, c, 0]) if m else 0.0  # the shift, a sample near the mean
        acc = 0.0
        acc2 = 0.0
        for n in range(n_):
            s, s2 = _shifted_sums(x[n, c], k)
            acc += s
            acc2 += s2
        dm = acc / m  # mean - k
        var = max(acc2 / m - dm * dm, 0.0)
        mu = k + dm
        inv = 1.0 / np.sqrt(var + eps)
        a = scale[c] * inv
        b = bias[c] - mu * a
        for n in range(n_):
            _affine(x[n, c], y[n, c], a, b, relu)
        mean_out[c] = mu
        inv_out[c] = inv
        unbiased = var * m / (m - 1) if m > 1 else var
        rm[c] = (1.0 - momentum) * rm[c] + momentum * mu
        rv[c] = (1.0 - momentum) * rv[c] + momentum * unbiased


@loops
def _BN_EVAL(x, s, scale, bias, rm, rv, y, eps, relu, ab, parts):
    # ``x``, ``y`` flat, ``s`` values a plane; each channel's a and b first, for all
    # channels in one pass into the workspace ``ab``, not a square root and a division per
    # (n, c) plane. Then a flat range of planes for each of ``parts`` threads (a count from
    # the caller: numba.get_num_threads() here kept the kernel from caching)
    c_ = scale.shape[0]
    r_ = x.shape[0] // s if s else 0
    for c in range(c_):
        a = scale[c] / np.sqrt(np.float64(rv[c]) + eps)
        ab[0, c] = a
        ab[1, c] = bias[c] - rm[c] * a
    for t in prange(parts):
        r0, r1 = t * r_ // parts, (t + 1) * r_ // parts
        c = r0 % c_  # then counted, not a division per plane
        for r in range(r0, r1):
            _affine_at(x, y, r * s, s, ab[0, c], ab[1, c], relu)
            c = c + 1 if c + 1 < c_ else 0


@loops
def _BN_GRAD(dy, x, scale, mean, inv, dx, dscale, dbias, z, relu):
    # with ``relu`` the incoming gradient is dy * (z > 0): a ReLU's backward folded in
    n_, c_, s_ = x.shape
    m = n_ * s_
    zero = dy.dtype.type(0)
    for c in prange(c_):
        mu, iv = np.float64(mean[c]), np.float64(inv[c])
        sg = 0.0
        sgx = 0.0
        for n in range(n_):  # one fused pass: sum(dy) and sum(dy * (x - mu))
            if relu:
                s, sx = _masked_grad_sums(dy[n, c], z[n, c], x[n, c], mu)
            else:
                s, sx = _grad_sums(dy[n, c], x[n, c], mu)
            sg += s
            sgx += sx
        ds = sgx * iv  # sum(dy * xhat)
        dbias[c] = sg
        dscale[c] = ds
        # dx = scale*inv/m * (m*dy - sum(dy) - xhat*sum(dy*xhat)) = p*dy - q*(x - mu) - r
        k = scale[c] * iv / m
        p = k * m
        q = k * ds * iv
        r = k * sg
        for n in range(n_):
            gr, xr, dr, zr = dy[n, c], x[n, c], dx[n, c], z[n, c]
            if relu:
                for i in range(s_):
                    g = gr[i] if zr[i] > 0 else zero
                    dr[i] = p * g - q * (xr[i] - mu) - r
            else:
                for i in range(s_):
                    dr[i] = p * gr[i] - q * (xr[i] - mu) - r


def _ncs(a):
    """``(N, C, S)`` view of an ``(N, C, ...)`` array (a copy would leave stale data)."""
    v = a.reshape(a.shape[0], a.shape[1], -1)
    if v.size and not np.may_share_memory(v, a):
        raise ValueError(f"batch norm kernel needs a contiguous array, got shape {a.shape}")
    return v


def _ab_dtype(dtype):
    """The dtype of an eval batch norm's per-channel scale and shift: float32 for float32
    data, whose planes then multiply and add in float32 (two roundings, as PyTorch's CPU
    kernel does) and vectorise twice as wide: densenet121's (2, 128, 16, 16) with its ReLU,
    one thread, 19.1 -> 7.5 us (AMD EPYC, 2026-11-29); float64 for the others."""
    return np.float32 if dtype == np.float32 else np.float64


def _bn_workspace(op, ins, outs):
    """Eval mode: each channel's scale and shift (:func:`_ab_dtype`)."""
    return 0 if op.training else carved_bytes(((2, ins[1].shape[0]), _ab_dtype(outs[0].dtype)))


@kernel("BatchNorm2d", workspace=_bn_workspace)
def batchnorm_2d(op, ins, outs, ws):
    x, scale, bias, rm, rv = ins
    x3, y3 = _ncs(x), _ncs(outs[0])
    eps, relu = op.eps, getattr(op, "relu", False)
    if op.training:
        mean, inv = outs[1], outs[2]
        mom = op.momentum
        train = pick(_BN_TRAIN, x.size)
        return bound(train, x3, scale, bias, y3, mean, inv, rm, rv, mom, eps, relu)
    ev = pick(_BN_EVAL, x.size)
    (ab,) = carve(ws, ((2, scale.shape[0]), _ab_dtype(outs[0].dtype)))
    parts = threads.num_threads() if ev is _BN_EVAL[True] else 1
    return bound(ev, x3.reshape(-1), x3.shape[2], scale, bias, rm, rv, y3.reshape(-1), eps,
                 relu, ab, parts)


@kernel("BatchNorm2dGrad")
def batchnorm_2d_grad(op, ins, outs):
    dy, x, scale, mean, inv = ins[:5]
    dx, dscale, dbias = outs
    dy3, x3, dx3 = _ncs(dy), _ncs(x), _ncs(dx)
    relu = getattr(op, "relu", False)
    z3 = _ncs(ins[5]) if relu else dy3  # unread without relu
    grad = pick(_BN_GRAD, x.size)
    return bound(grad, dy3, x3, scale, mean, inv, dx3, dscale, dbias, z3, relu)

"""Batch-norm kernels: Numba loops parallel over channels, statistics in float64.

Inputs are viewed as ``(N, C, S)`` (S = H*W, or 1 for 2-d inputs). The variance is computed
in a second pass over the centred values, which stays accurate when |mean| >> std. Small
inputs run on one thread (see ``conv.PARALLEL_WORK``).
"""
import numpy as np
from numba import prange

from ...registry import kernel
from .conv import loops, pick


@loops
def _BN_TRAIN(x, scale, bias, y, mean_out, inv_out, rm, rv, momentum, eps):
    n_, c_, s_ = x.shape
    m = n_ * s_
    for c in prange(c_):
        acc = 0.0
        for n in range(n_):
            for i in range(s_):
                acc += x[n, c, i]
        mu = acc / m
        acc = 0.0
        for n in range(n_):
            for i in range(s_):
                d = x[n, c, i] - mu
                acc += d * d
        var = acc / m
        inv = 1.0 / np.sqrt(var + eps)
        a = scale[c] * inv
        b = bias[c] - mu * a
        for n in range(n_):
            for i in range(s_):
                y[n, c, i] = x[n, c, i] * a + b
        mean_out[c] = mu
        inv_out[c] = inv
        unbiased = var * m / (m - 1) if m > 1 else var
        rm[c] = (1.0 - momentum) * rm[c] + momentum * mu
        rv[c] = (1.0 - momentum) * rv[c] + momentum * unbiased


@loops
def _BN_EVAL(x, scale, bias, rm, rv, y, eps):
    n_, c_, s_ = x.shape
    for c in prange(c_):
        a = scale[c] / np.sqrt(rv[c] + eps)
        b = bias[c] - rm[c] * a
        for n in range(n_):
            for i in range(s_):
                y[n, c, i] = x[n, c, i] * a + b


@loops
def _BN_GRAD(dy, x, scale, mean, inv, dx, dscale, dbias):
    n_, c_, s_ = x.shape
    m = n_ * s_
    for c in prange(c_):
        mu, iv = mean[c], inv[c]
        sg = 0.0
        sgx = 0.0
        for n in range(n_):
            for i in range(s_):
                g = dy[n, c, i]
                sg += g
                sgx += g * (x[n, c, i] - mu)
        ds = sgx * iv  # sum(dy * xhat)
        dbias[c] = sg
        dscale[c] = ds
        k = scale[c] * iv / m
        for n in range(n_):
            for i in range(s_):
                xhat = (x[n, c, i] - mu) * iv
                dx[n, c, i] = k * (m * dy[n, c, i] - sg - xhat * ds)


def _ncs(a):
    """``(N, C, S)`` view of an ``(N, C, ...)`` array (a copy would leave stale data)."""
    v = a.reshape(a.shape[0], a.shape[1], -1)
    if v.size and not np.may_share_memory(v, a):
        raise ValueError(f"batch norm kernel needs a contiguous array, got shape {a.shape}")
    return v


@kernel("BatchNorm2d")
def batchnorm_2d(op, ins, outs):
    x, scale, bias, rm, rv = ins
    x3, y3 = _ncs(x), _ncs(outs[0])
    eps = op.eps
    if op.training:
        mean, inv = outs[1], outs[2]
        mom = op.momentum
        train = pick(_BN_TRAIN, x.size)
        return lambda: train(x3, scale, bias, y3, mean, inv, rm, rv, mom, eps)
    ev = pick(_BN_EVAL, x.size)
    return lambda: ev(x3, scale, bias, rm, rv, y3, eps)


@kernel("BatchNorm2dGrad")
def batchnorm_2d_grad(op, ins, outs):
    dy, x, scale, mean, inv = ins
    dx, dscale, dbias = outs
    dy3, x3, dx3 = _ncs(dy), _ncs(x), _ncs(dx)
    grad = pick(_BN_GRAD, x.size)
    return lambda: grad(dy3, x3, scale, mean, inv, dx3, dscale, dbias)

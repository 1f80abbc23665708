"""Fused optimizer-update kernels: one pass over each parameter, in place."""
import numpy as np
from numba import njit

from ...registry import kernel


@njit(cache=True)
def _sgd(p, g, buf, lr, mom, damp, wd, use_buf, nesterov):
    for i in range(p.size):
        d = g[i] + wd * p[i]
        if use_buf:
            b = mom * buf[i] + (1.0 - damp) * d
            buf[i] = b
            d = d + mom * b if nesterov else b
        p[i] -= lr * d


@njit(cache=True)
def _adam(p, g, m, v, t, lr, b1, b2, eps, wd):
    c1 = 1.0 - b1 ** t
    c2 = 1.0 - b2 ** t
    for i in range(p.size):
        d = g[i] + wd * p[i]
        mi = b1 * m[i] + (1.0 - b1) * d
        vi = b2 * v[i] + (1.0 - b2) * d * d
        m[i] = mi
        v[i] = vi
        p[i] -= lr * (mi / c1) / (np.sqrt(vi / c2) + eps)


@njit(cache=True)
def _rmsprop(p, g, s, lr, rho, eps, wd):
    for i in range(p.size):
        d = g[i] + wd * p[i]
        si = rho * s[i] + (1.0 - rho) * d * d
        s[i] = si
        p[i] -= lr * d / (np.sqrt(si) + eps)


@njit(cache=True)
def _adagrad(p, g, h, lr, eps, wd):
    for i in range(p.size):
        d = g[i] + wd * p[i]
        hi = h[i] + d * d
        h[i] = hi
        p[i] -= lr * d / (np.sqrt(hi) + eps)


def _flat(a):
    return a.reshape(-1)


@kernel("SGDUpdate")
def sgd(op, ins, outs):
    p, g = _flat(ins[0]), _flat(ins[1])
    buf = _flat(ins[2]) if op.momentum else p[:0]
    lr, mom, damp, wd = ins[-4:]
    nest = op.nesterov
    use = op.momentum
    return lambda: _sgd(p, g, buf, lr[()], mom[()], damp[()], wd[()], use, nest)


@kernel("AdamUpdate")
def adam(op, ins, outs):
    p, g, m, v = (_flat(a) for a in ins[:4])
    step, lr, b1, b2, eps, wd = ins[4:]

    def run():
        step[()] += 1
        _adam(p, g, m, v, float(step[()]), lr[()], b1[()], b2[()], eps[()], wd[()])
    return run


@kernel("RMSPropUpdate")
def rmsprop(op, ins, outs):
    p, g, s = (_flat(a) for a in ins[:3])
    lr, rho, eps, wd = ins[3:]
    return lambda: _rmsprop(p, g, s, lr[()], rho[()], eps[()], wd[()])


@kernel("AdaGradUpdate")
def adagrad(op, ins, outs):
    p, g, h = (_flat(a) for a in ins[:3])
    lr, eps, wd = ins[3:]
    return lambda: _adagrad(p, g, h, lr[()], eps[()], wd[()])

"""Fused optimizer-update kernels: one pass over each parameter, in place.

Each loop has a serial and a ``prange`` twin (``loops.loops``); parameters from
``loops.PARALLEL_WORK`` elements on are updated on all threads (the MLP's 784x256 weight:
0.21 -> 0.07 ms). Every element is computed by the same expression either way, so the
results do not depend on the thread count.
"""
import numpy as np
from numba import prange

from ...registry import kernel
from .loops import flat_view, loops, pick


@loops
def _SGD(p, g, buf, lr, mom, damp, wd, use_buf, nesterov):
    for i in prange(p.size):
        d = g[i] + wd * p[i]
        if use_buf:
            b = mom * buf[i] + (1.0 - damp) * d
            buf[i] = b
            d = d + mom * b if nesterov else b
        p[i] -= lr * d


@loops
def _ADAM(p, g, m, v, t, lr, b1, b2, eps, wd):
    c1 = 1.0 - b1 ** t
    c2 = 1.0 - b2 ** t
    for i in prange(p.size):
        d = g[i] + wd * p[i]
        mi = b1 * m[i] + (1.0 - b1) * d
        vi = b2 * v[i] + (1.0 - b2) * d * d
        m[i] = mi
        v[i] = vi
        p[i] -= lr * (mi / c1) / (np.sqrt(vi / c2) + eps)


@loops
def _RMSPROP(p, g, s, lr, rho, eps, wd):
    for i in prange(p.size):
        d = g[i] + wd * p[i]
        si = rho * s[i] + (1.0 - rho) * d * d
        s[i] = si
        p[i] -= lr * d / (np.sqrt(si) + eps)


@loops
def _ADAGRAD(p, g, h, lr, eps, wd):
    for i in prange(p.size):
        d = g[i] + wd * p[i]
        hi = h[i] + d * d
        h[i] = hi
        p[i] -= lr * d / (np.sqrt(hi) + eps)


@kernel("SGDUpdate")
def sgd(op, ins, outs):
    p, g = flat_view(ins[0]), flat_view(ins[1])
    buf = flat_view(ins[2]) if op.momentum else p[:0]
    lr, mom, damp, wd = ins[-4:]
    nest = op.nesterov
    use = op.momentum
    sgd_ = pick(_SGD, p.size)
    return lambda: sgd_(p, g, buf, lr[()], mom[()], damp[()], wd[()], use, nest)


@kernel("AdamUpdate")
def adam(op, ins, outs):
    p, g, m, v = (flat_view(a) for a in ins[:4])
    step, lr, b1, b2, eps, wd = ins[4:]

    adam_ = pick(_ADAM, p.size)

    def run():
        step[()] += 1
        adam_(p, g, m, v, float(step[()]), lr[()], b1[()], b2[()], eps[()], wd[()])
    return run


@kernel("RMSPropUpdate")
def rmsprop(op, ins, outs):
    p, g, s = (flat_view(a) for a in ins[:3])
    lr, rho, eps, wd = ins[3:]
    rmsprop_ = pick(_RMSPROP, p.size)
    return lambda: rmsprop_(p, g, s, lr[()], rho[()], eps[()], wd[()])


@kernel("AdaGradUpdate")
def adagrad(op, ins, outs):
    p, g, h = (flat_view(a) for a in ins[:3])
    lr, eps, wd = ins[3:]
    adagrad_ = pick(_ADAGRAD, p.size)
    return lambda: adagrad_(p, g, h, lr[()], eps[()], wd[()])

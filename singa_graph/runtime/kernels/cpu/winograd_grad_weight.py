"""The weight gradient of a Winograd-eligible 3x3 conv, as Winograd F(4x4, 3x3).

The forward conv computes each output tile as ``Y = A^T (U * V) A`` with ``U = G g G^T``.
Its gradient with respect to ``U`` is ``(A dY A^T) * V`` summed over the tiles, so
``dW = G^T dU G`` with, at each of the 36 points ``p``, ``dU_p (C x O) = V_p^T (C x T) @
Z_p (T x O)``: ``V`` the forward's input transform, ``Z = A dY A^T`` the output gradient's
6x6 transform. The 36 GEMMs run over all the tiles of a part's samples (a long inner
dimension, BLAS's best shape, where im2col + GEMM's ``(C*9 x L) @ (L x O)`` products are
thin) and do 4x fewer multiply-adds. Transforms vectorise over blocks of channels, as in
winograd_transforms.py.

Rounding: measured against float64, within ``GRAD_WEIGHT_ERROR_BOUND * eps *
(|dy| corr |x|)`` (tests/runtime/test_winograd.py). Workspace (planned): per part, the
partial ``dU`` ``(36, C, O)``, ``V`` and ``Z`` of a chunk of samples and the row buffers.
"""
import numpy as np
from numba import njit, prange, uintp

from ....runtime import threads
from ...registry import carve, carved_bytes
from . import blas
from .blas import gemm
from .loops import bound
from .winograd import Geometry, _planes
from .winograd_transforms import BLOCK, input_tiles

GRAD_WEIGHT_ERROR_BOUND = 64  # times eps times |dy| corr |x|; see the tests


@njit(cache=True, nogil=True, fastmath={'contract'})
def _dy_tiles(dy, n, zf, pitch, t0, th, tw, buf):
    """``Z[p, t0 + ty*tw + tx, o] = (A dY A^T)[p]`` for every 4x4 tile ``dY`` of
    ``dy[n, o]`` (zero past the plane's edge); ``Z[p, t, o]`` is ``zf[p*pitch + t*O + o]``.
    Per block of channels and row of tiles: the four rows into ``buf[0]`` as
    ``(4, 4*tw, BLOCK)``, along y into ``buf[1]`` (``(6, 4*tw, BLOCK)``), then along x."""
    o_, ho, wo = dy.shape[1], dy.shape[2], dy.shape[3]
    dt = zf.dtype.type
    f2, f4, f8, zero = dt(2), dt(4), dt(8), dt(0)
    df = dy[n].reshape(-1)
    rb, qb = buf[0], buf[1]
    ub = uintp(BLOCK)
    b2, b3 = ub + ub, ub * uintp(3)
    zc = uintp(4 * tw) * ub  # one buffer row
    z2, z3, z4, z5 = zc + zc, zc * uintp(3), zc * uintp(4), zc * uintp(5)
    s1 = uintp(pitch)
    hw = uintp(ho * wo)
    for o0 in range(0, o_, BLOCK):
        ob = min(BLOCK, o_ - o0)
        for ty in range(th):
            for i in range(uintp(4) * zc):
                rb[uintp(i)] = zero
            for r in range(min(4, ho - 4 * ty)):
                src = uintp(o0) * hw + uintp((4 * ty + r) * wo)
                d = uintp(r) * zc
                for k in range(ob):
                    s = src + uintp(k) * hw
                    dk = d + uintp(k)
                    for i in range(wo):
                        rb[dk + uintp(i) * ub] = df[s + uintp(i)]
            for i in range(zc):
                qb[uintp(i)] = rb[uintp(i)]
            for i in range(zc):
                ui = uintp(i)
                qb[zc + ui] = rb[ui] + rb[zc + ui] + rb[z2 + ui] + rb[z3 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[z2 + ui] = rb[ui] - rb[zc + ui] + rb[z2 + ui] - rb[z3 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[z3 + ui] = rb[ui] + f2 * rb[zc + ui] + f4 * rb[z2 + ui] + f8 * rb[z3 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[z4 + ui] = rb[ui] - f2 * rb[zc + ui] + f4 * rb[z2 + ui] - f8 * rb[z3 + ui]
            for i in range(zc):
                qb[z5 + uintp(i)] = rb[z3 + uintp(i)]
            t1 = t0 + ty * tw
            for a in range(6):
                q = uintp(a) * zc
                plane = uintp(a * 6) * s1
                for tx in range(tw):
                    j = q + uintp(4 * tx) * ub
                    o = plane + uintp((t1 + tx) * o_ + o0)
                    for k in range(ob):
                        zf[o + uintp(k)] = qb[j + uintp(k)]
                    o += s1
                    for k in range(ob):
                        uk = uintp(k)
                        zf[o + uk] = qb[j + uk] + qb[j + ub + uk] + qb[j + b2 + uk] + qb[j + b3 + uk]
                    o += s1
                    for k in range(ob):
                        uk = uintp(k)
                        zf[o + uk] = qb[j + uk] - qb[j + ub + uk] + qb[j + b2 + uk] - qb[j + b3 + uk]
                    o += s1
                    for k in range(ob):
                        uk = uintp(k)
                        zf[o + uk] = (qb[j + uk] + f2 * qb[j + ub + uk] + f4 * qb[j + b2 + uk]
                                      + f8 * qb[j + b3 + uk])
                    o += s1
                    for k in range(ob):
                        uk = uintp(k)
                        zf[o + uk] = (qb[j + uk] - f2 * qb[j + ub + uk] + f4 * qb[j + b2 + uk]
                                      - f8 * qb[j + b3 + uk])
                    o += s1
                    for k in range(ob):
                        zf[o + uintp(k)] = qb[j + b3 + uintp(k)]


@njit(cache=True, nogil=True)
def _g_coef(a, i):
    """``G[a, i]`` of F(4x4, 3x3)."""
    if a == 0:
        return 0.25 if i == 0 else 0.0
    if a == 1:
        return -1.0 / 6.0
    if a == 2:
        return -1.0 / 6.0 if i != 1 else 1.0 / 6.0
    if a == 3:
        return (1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0)[i]
    if a == 4:
        return (1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0)[i]
    return 1.0 if i == 2 else 0.0


@njit(cache=True, nogil=True, parallel=True)
def grad_weight(x, dy, dw, acc, vf, v4, zf, z4, buf, h, pt, pl, th, tw, chunk, parts, bl):
    """``dw = G^T (sum over parts of acc) G``, ``acc[t]`` part ``t``'s ``dU`` (``h``:
    float64 scratch ``(3, 6, O)``): each part
    transforms ``chunk`` samples at a time into ``V`` and ``Z`` and adds the 36 GEMMs
    ``V_p^T Z_p`` into its ``acc``."""
    n_ = x.shape[0]
    per = th * tw
    vp, zp = v4.strides[1] // v4.itemsize, z4.strides[1] // z4.itemsize
    for t in prange(parts):
        lo, hi = t * n_ // parts, (t + 1) * n_ // parts
        if hi == lo:
            acc[t][:] = 0
        for n0 in range(lo, hi, chunk):
            n1 = min(n0 + chunk, hi)
            for n in range(n0, n1):
                input_tiles(x, n, vf[t], vp, (n - n0) * per, pt, pl, th, tw, buf[t])
            for n in range(n0, n1):
                _dy_tiles(dy, n, zf[t], zp, (n - n0) * per, th, tw, buf[t])
            tt = (n1 - n0) * per
            beta = 0.0 if n0 == lo else 1.0
            for p in range(36):
                gemm(v4[t, p, :tt].T, z4[t, p, :tt], acc[t, p], beta, bl)
    # dU summed over the parts into acc[0], then dW[o, c] = G^T dU[:, c, o] G in float64
    # (scratch h, (3, 6, O)), every loop over the output channels, contiguous in acc
    a0 = acc[0]
    for q in range(1, acc.shape[0]):
        for p in range(36):
            for c in range(a0.shape[1]):
                for o in range(a0.shape[2]):
                    a0[p, c, o] += acc[q, p, c, o]
    o_, c_ = dw.shape[0], dw.shape[1]
    for c in range(c_):
        for i in range(3):
            for b in range(6):
                r = h[i, b]
                for o in range(o_):
                    r[o] = 0.0
                for a in range(6):
                    ga = _g_coef(a, i)
                    if ga != 0.0:
                        src = a0[a * 6 + b, c]
                        for o in range(o_):
                            r[o] += ga * src[o]
        for i in range(3):
            for j in range(3):
                for o in range(o_):
                    s = 0.0
                    for b in range(6):
                        s += h[i, b, o] * _g_coef(b, j)
                    dw[o, c, i, j] = s


def _geometry(op, x_shape, dy_shape, o, dtype):
    return Geometry(x_shape, o, dy_shape, op.padding, threads.num_threads(), dtype)


def _specs(gm):
    """``acc``, ``V``, ``Z``, the row buffers and ``h``."""
    zw = 4 * gm.tw + 2
    dt = gm.dtype
    return [((gm.parts, 36, gm.c, gm.o), dt), ((gm.parts, 36 * gm.vpitch), dt),
            ((gm.parts, 36 * gm.mpitch), dt), ((gm.parts, 2, 6 * zw * BLOCK), dt),
            ((3, 6, gm.o), np.float64)]


def workspace(op, ins, outs) -> int:
    """Workspace bytes of :func:`grad_weight_step`."""
    dy, x = ins
    dw = outs[0]
    return carved_bytes(*_specs(_geometry(op, x.shape, dy.shape, dw.shape[0], dw.dtype)))


def grad_weight_step(op, ins, outs, ws):
    """The step of ``dW`` from ``(dy, x)``."""
    dy, x = ins
    (dw,) = outs
    gm = _geometry(op, x.shape, dy.shape, dw.shape[0], dw.dtype)
    acc, vf, zf, buf, h = carve(ws, *_specs(gm))
    args = (x, dy, dw, acc, vf, _planes(vf, gm.tc, gm.c, gm.vpitch), zf,
            _planes(zf, gm.tc, gm.o, gm.mpitch), buf, h, gm.pt, gm.pl, gm.th, gm.tw, gm.chunk,
            gm.parts, blas.HANDLE)
    return bound(grad_weight, *args)

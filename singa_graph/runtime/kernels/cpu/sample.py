"""GridSample: a Numba loop over output points (in parallel over the batch and the points);
each point's taps and weights per spatial axis are computed once and shared by the
channels. Follows ONNX's reference: coordinates in float32, reflection folded at the
borders, cubic taps with A = -0.75."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ...registry import kernel
from ....ops.sample import MODES, PADDINGS


@njit(cache=True)
def _reflect(x, lo, hi):
    rng = hi - lo
    if x < lo:
        dx = lo - x
        k = int(dx / rng)
        r = dx - k * rng
        return lo + r if k % 2 == 0 else hi - r
    if x > hi:
        dx = x - hi
        k = int(dx / rng)
        r = dx - k * rng
        return hi - r if k % 2 == 0 else lo + r
    return x


@njit(cache=True)
def _cubic(t, a):
    t = abs(t)
    if t <= 1:
        return ((a + 2) * t - (a + 3)) * t * t + 1
    if t < 2:
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return 0.0


@njit(cache=True, parallel=True)
def _grid_sample(x, dims, strides, grid, y, mode, pad, align):
    n_, c_, _ = x.shape
    p_ = grid.shape[1]
    d_ = dims.shape[0]
    taps = 1 if mode == 0 else (2 if mode == 1 else 4)
    for np_ in prange(n_ * p_):
        n = np_ // p_
        p = np_ % p_
        idx = np.zeros((d_, 4), np.int64)
        wts = np.zeros((d_, 4), np.float64)
        ok = np.zeros((d_, 4), np.bool_)
        for d in range(d_):
            length = dims[d]
            v = grid[n, p, d_ - 1 - d]
            lo, hi = (0.0, length - 1.0) if align else (-0.5, length - 0.5)
            c = np.float32((v + 1) / 2.0 * (length - 1)) if align else \
                np.float32(((v + 1) * length - 1) / 2.0)
            c = np.float64(c)
            if mode == 0:
                c = np.rint(c)
            if c < lo or c > hi:
                if pad == 1:
                    c = min(max(c, 0.0), length - 1.0)
                elif pad == 2:
                    c = _reflect(c, lo, hi)
            if mode == 0:
                first = int(c)
                wts[d, 0] = 1.0
            else:
                first = int(math.floor(c))
                t = c - first
                if mode == 1:
                    wts[d, 0], wts[d, 1] = 1.0 - t, t
                else:
                    first -= 1
                    for j in range(4):
                        wts[d, j] = _cubic(t + 1 - j, -0.75)
            for j in range(taps):
                i = first + j
                good = True
                if pad == 0:
                    good = 0 <= i < length
                elif pad == 1:
                    i = min(max(i, 0), length - 1)
                else:
                    i = int(_reflect(float(i), lo, hi))
                    i = min(max(i, 0), length - 1)
                idx[d, j], ok[d, j] = i, good
        for ch in range(c_):
            acc = 0.0
            for flat in range(taps ** d_):
                rem = flat
                w = 1.0
                off = 0
                for d in range(d_ - 1, -1, -1):
                    j = rem % taps
                    rem //= taps
                    if not ok[d, j]:
                        w = 0.0
                        break
                    w *= wts[d, j]
                    off += idx[d, j] * strides[d]
                if w != 0.0:
                    acc += w * x[n, ch, off]
            y[n, ch, p] = acc


@kernel("GridSample")
def grid_sample(op, ins, outs):
    (x, grid), (y,) = ins, outs
    n, c = x.shape[:2]
    dims = np.asarray(x.shape[2:], np.int64)
    strides = np.asarray([int(np.prod(x.shape[3 + i:], dtype=np.int64))
                          for i in range(len(dims))], np.int64)
    x3 = x.reshape(n, c, -1)
    g3 = grid.reshape(n, -1, grid.shape[-1])
    y3 = y.reshape(n, c, -1)
    mode, pad = MODES.index(op.mode), PADDINGS.index(op.padding_mode)
    return lambda: _grid_sample(x3, dims, strides, g3, y3, mode, pad, op.align_corners)


@njit(cache=True)
def _roi_align(x, rois, batch, y, scale, ratio, is_max, half):
    _, c_, h_, w_ = x.shape
    r_, _, ph_, pw_ = y.shape
    off = 0.5 if half else 0.0
    for r in range(r_):
        b = batch[r]
        x0 = rois[r, 0] * scale - off
        y0 = rois[r, 1] * scale - off
        rw = rois[r, 2] * scale - off - x0
        rh = rois[r, 3] * scale - off - y0
        if not half:  # malformed regions become 1x1
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / ph_, rw / pw_
        gh = ratio if ratio > 0 else int(math.ceil(rh / ph_))
        gw = ratio if ratio > 0 else int(math.ceil(rw / pw_))
        count = max(gh * gw, 1)
        for ph in range(ph_):
            for pw in range(pw_):
                for ch in range(c_):
                    acc = 0.0
                    first = True
                    for iy in range(gh):
                        yy = y0 + ph * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            xx = x0 + pw * bw + (ix + 0.5) * bw / gw
                            if yy < -1.0 or yy > h_ or xx < -1.0 or xx > w_:
                                v = 0.0
                            else:
                                sy, sx = max(yy, 0.0), max(xx, 0.0)
                                yl, xl = int(sy), int(sx)
                                if yl >= h_ - 1:
                                    yl = yh = h_ - 1
                                    sy = float(yl)
                                else:
                                    yh = yl + 1
                                if xl >= w_ - 1:
                                    xl = xh = w_ - 1
                                    sx = float(xl)
                                else:
                                    xh = xl + 1
                                ly, lx = sy - yl, sx - xl
                                hy, hx = 1.0 - ly, 1.0 - lx
                                a = hy * hx * x[b, ch, yl, xl]
                                bb = hy * lx * x[b, ch, yl, xh]
                                cc = ly * hx * x[b, ch, yh, xl]
                                d = ly * lx * x[b, ch, yh, xh]
                                v = a + bb + cc + d if not is_max else max(max(a, bb),
                                                                           max(cc, d))
                            if is_max:
                                acc = v if first else max(acc, v)
                                first = False
                            else:
                                acc += v
                    y[r, ch, ph, pw] = acc if is_max else acc / count


@kernel("RoiAlign")
def roi_align(op, ins, outs):
    (x, rois, batch), (y,) = ins, outs
    return lambda: _roi_align(x, rois, batch, y, op.spatial_scale, op.sampling_ratio,
                              op.mode == "max", op.half_pixel)

"""Numba loops of the direct grouped-convolution kernels (runtime/kernels/cpu/depthwise.py).

Each plane is first copied into a zero-padded scratch plane ``pad`` of ``Hp x Wp`` (its
thread's slice of planned workspace). With equal strides ``s`` in both directions, the
output computed on a *wide* grid of row pitch ``Wp``, ``wide[q]`` with ``q = oy*Wp + ox``,
reads tap ``(i, j)`` at ``pad[s*q + i*dh*Wp + j*dw]``: one flat loop per plane, with no
bounds tests and no per-row set-up, that LLVM vectorises (the 3x3 taps unrolled into one
pass). The ``Wp - Wo`` columns of each wide row that are not outputs are computed and
dropped, which costs little next to per-row loops on the small planes of mobile nets
(2x2 to 32x32): row-by-row loops with border cases measured 2-5x slower there.

Accumulation is in the arrays' dtype (float32 sums in float32). Work is split into
``parts`` contiguous ranges of planes (output channels for dW), one per thread of Numba's
pool; each plane is computed by one thread in a fixed order, so results do not depend on
the thread count. Arrays are flat (1-d) and indexed with unsigned offsets, which lets LLVM
drop Numba's negative-index wrap-around.

``geo`` is ``(kh, kw, s, pt, pl, dh, dw)``; ``dims`` is ``(N, C_src, H_src, W_src, C_dst,
H_dst, W_dst)`` in the direction of the correlation.
"""
from numba import njit, prange, uintp


LANES = 16  # independent partial sums of a row reduction


@njit(cache=True, nogil=True, inline="always")
def _sum_row(a, b, n, lanes):
    """``sum(a[b:b+n])`` over ``LANES`` interleaved partial sums (held in ``lanes``): one
    running sum is a chain of dependent adds, 4 cycles each; these vectorise."""
    zero = a.dtype.type(0)
    for k in range(LANES):
        lanes[k] = zero
    m = n - n % LANES
    for q in range(0, m, LANES):
        for k in range(LANES):
            lanes[k] += a[uintp(b + q + k)]
    sm = zero
    for k in range(LANES):
        sm += lanes[k]
    for q in range(m, n):
        sm += a[uintp(b + q)]
    return sm


@njit(cache=True, nogil=True)
def pitch(kh, kw, s, dh, dw, ho, wo):
    """``(Hp, Wp, L)``: the padded plane that an ``ho x wo`` output reads, and the length
    of the wide output."""
    hp = (ho - 1) * s + (kh - 1) * dh + 1
    wp = (wo - 1) * s + (kw - 1) * dw + 1
    return hp, wp, (ho - 1) * wp + wo


@njit(cache=True, nogil=True, inline="always")
def _fill(pad, src, sb, hs, ws, hp, wp, pt, pl):
    """``pad[r, c] = src plane[r - pt, c - pl]``, zero outside the plane."""
    zero = pad.dtype.type(0)
    c0, c1 = min(max(0, pl), wp), max(min(wp, ws + pl), 0)
    c0 = min(c0, c1)
    for r in range(hp):
        rb = uintp(r * wp)
        y = r - pt
        if y < 0 or y >= hs:
            for c in range(wp):
                pad[rb + uintp(c)] = zero
            continue
        for c in range(c0):
            pad[rb + uintp(c)] = zero
        b = uintp(sb + y * ws + c0 - pl)
        for c in range(c1 - c0):
            pad[rb + uintp(c0 + c)] = src[b + uintp(c)]
        for c in range(c1, wp):
            pad[rb + uintp(c)] = zero


@njit(cache=True, nogil=True, inline="always")
def _rows3x3(wide, pad, ws, us, c1, c2, r1, r2, n):
    """``wide[q] += sum_ij w_ij pad[s*q + r_i + c_j]`` for ``q < n``: a 3x3 kernel ``ws``
    (row-major) at stride ``us``, the taps' offsets ``(0, c1, c2)`` along a row and
    ``(0, r1, r2)`` down the rows."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = ws
    for q in range(n):
        u = uintp(q)
        a = u * us
        b, c = a + r1, a + r2
        wide[u] += ((w0 * pad[a] + w1 * pad[a + c1] + w2 * pad[a + c2])
                    + (w3 * pad[b] + w4 * pad[b + c1] + w5 * pad[b + c2])
                    + (w6 * pad[c] + w7 * pad[c + c1] + w8 * pad[c + c2]))


@njit(cache=True, nogil=True, inline="always")
def _taps(wide, pad, w, wb, flip, kh, kw, s, dh, dw, wp, n):
    """``wide[q] += sum_ij w_ij pad[s*q + i*dh*wp + j*dw]`` for ``q < n`` (``w_ij`` from
    ``w[wb:]``, ``flip``: the kernel rotated by 180 degrees)."""
    nt = kh * kw
    if kh == 3 and kw == 3:
        w0, w1, w2 = w[wb + (8 if flip else 0)], w[wb + (7 if flip else 1)], w[wb + (6 if flip else 2)]
        w3, w4, w5 = w[wb + (5 if flip else 3)], w[wb + 4], w[wb + (3 if flip else 5)]
        w6, w7, w8 = w[wb + (2 if flip else 6)], w[wb + (1 if flip else 7)], w[wb + (0 if flip else 8)]
        c1, c2 = uintp(dw), uintp(2 * dw)
        r1, r2 = uintp(dh * wp), uintp(2 * dh * wp)
        # the stride a constant where it is 1 or 2 (once inlined): LLVM then loads the
        # taps contiguously, or the even and odd lanes by shuffles, not one by one
        ws = (w0, w1, w2, w3, w4, w5, w6, w7, w8)
        if s == 1:
            _rows3x3(wide, pad, ws, uintp(1), c1, c2, r1, r2, n)
        elif s == 2:
            _rows3x3(wide, pad, ws, uintp(2), c1, c2, r1, r2, n)
        else:
            _rows3x3(wide, pad, ws, uintp(s), c1, c2, r1, r2, n)
        return
    us = uintp(s)
    for t in range(nt):
        i, j = t // kw, t % kw
        wv = w[wb + (nt - 1 - t if flip else t)]
        off = uintp(i * dh * wp + j * dw)
        if s == 1:
            for q in range(n):
                wide[uintp(q)] += wv * pad[uintp(q) + off]
        else:
            for q in range(n):
                wide[uintp(q)] += wv * pad[uintp(q) * us + off]


@njit(cache=True, nogil=True, parallel=True)
def correlate(src, w, dst, transposed, geo, dims, cg, og, bias, has_bias, relu, ws, parts):
    """Every plane ``dst[n, c]`` of a direct correlation of ``src`` with ``w``.

    Forward: ``c`` is an output channel; it reads the ``cg`` input channels of its group.
    ``transposed`` (the input gradient of a stride-1 conv): ``c`` is an input channel; it
    reads the ``og`` output channels of its group, each kernel flipped, and ``geo`` holds
    the transposed padding ``dilation*(k-1) - pad``. ``ws`` is ``(parts, Hp*Wp + L)``."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, cs, hs, ws_, cd, ho, wo = dims
    hp, wp, ln = pitch(kh, kw, s, dh, dw, ho, wo)
    total = n_ * cd
    cnt = og if transposed else cg
    taps = kh * kw
    for t in prange(parts):
        pad, wide = ws[t, :hp * wp], ws[t, hp * wp:hp * wp + ln]
        zero = pad.dtype.type(0)
        for p in range(t * total // parts, (t + 1) * total // parts):
            n, c = p // cd, p % cd
            b0 = bias[c] if has_bias else zero
            for q in range(ln):
                wide[uintp(q)] = b0
            for k in range(cnt):
                if transposed:
                    sc = (c // cg) * og + k
                    wb = (sc * cg + c % cg) * taps
                else:
                    sc = (c // og) * cg + k
                    wb = (c * cg + k) * taps
                _fill(pad, src, (n * cs + sc) * hs * ws_, hs, ws_, hp, wp, pt, pl)
                _taps(wide, pad, w, wb, transposed, kh, kw, s, dh, dw, wp, ln)
            db = p * ho * wo
            for oy in range(ho):
                for ox in range(wo):
                    f = wide[uintp(oy * wp + ox)]
                    if relu and not (f >= zero or f != f):
                        f = zero
                    dst[uintp(db + oy * wo + ox)] = f


@njit(cache=True, nogil=True, inline="always")
def _widen(wide, src, sb, ho, wo, wp):
    """``wide[oy*wp + ox] = src plane[oy, ox]``, zero in the columns ``ox >= wo``."""
    zero = wide.dtype.type(0)
    for oy in range(ho):
        for ox in range(wp if oy < ho - 1 else wo):
            wide[uintp(oy * wp + ox)] = src[uintp(sb + oy * wo + ox)] if ox < wo else zero


@njit(cache=True, nogil=True, parallel=True)
def grad_input_strided(dy, w, dx, geo, dims, cg, og, ws, parts):
    """``dx`` of a strided conv (``dims``: x as source, dy as destination, as in the
    forward): each input plane, padded, gets the taps of the output planes that read it
    added at ``s*q + offset``, then its inside is copied out."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, c_, h, wi, co, ho, wo = dims
    hp, wp, ln = pitch(kh, kw, s, dh, dw, ho, wo)
    total = n_ * c_
    taps = kh * kw
    us = uintp(s)
    for t in prange(parts):
        pad, wide = ws[t, :hp * wp], ws[t, hp * wp:hp * wp + ln]
        zero = pad.dtype.type(0)
        for p in range(t * total // parts, (t + 1) * total // parts):
            n, c = p // c_, p % c_
            for q in range(hp * wp):
                pad[uintp(q)] = zero
            g, ci = c // cg, c % cg
            for k in range(og):
                oc = g * og + k
                _widen(wide, dy, (n * co + oc) * ho * wo, ho, wo, wp)
                for tp in range(taps):
                    wv = w[(oc * cg + ci) * taps + tp]
                    off = uintp((tp // kw) * dh * wp + (tp % kw) * dw)
                    for q in range(ln):
                        pad[uintp(q) * us + off] += wv * wide[uintp(q)]
            xb = p * h * wi
            for iy in range(h):
                r = iy + pt
                for ix in range(wi):
                    cc = ix + pl
                    inside = r < hp and cc < wp
                    dx[uintp(xb + iy * wi + ix)] = pad[uintp(r * wp + cc)] if inside else zero


@njit(cache=True, nogil=True, parallel=True)
def grad_weight(dy, x, dw_, geo, dims, cg, og, ws, parts):
    """``dW[oc, ci, i, j] = sum_{n, oy, ox} dy[n, oc, oy, ox] * x[n, c, iy, ix]`` (``dims``:
    x as source, dy as destination).

    Output channels are split over the parts; a part adds one channel's products
    element-wise into its own ``cg*kh*kw`` rows of length L (planned workspace: adds that
    vectorise, where a scalar sum would not), then sums each row. ``ws`` is ``(parts,
    Hp*Wp + L + cg*kh*kw*L + LANES)``."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, c_, h, wi, o_, ho, wo = dims
    hp, wp, ln = pitch(kh, kw, s, dh, dw, ho, wo)
    taps = kh * kw
    rows = cg * taps
    us = uintp(s)
    for t in prange(parts):
        pad, wide = ws[t, :hp * wp], ws[t, hp * wp:hp * wp + ln]
        acc = ws[t, hp * wp + ln:hp * wp + ln + rows * ln]
        lanes = ws[t, hp * wp + ln + rows * ln:hp * wp + ln + rows * ln + LANES]
        zero = pad.dtype.type(0)
        for oc in range(t * o_ // parts, (t + 1) * o_ // parts):
            for q in range(rows * ln):
                acc[uintp(q)] = zero
            g = oc // og
            for n in range(n_):
                _widen(wide, dy, (n * o_ + oc) * ho * wo, ho, wo, wp)
                for ci in range(cg):
                    _fill(pad, x, (n * c_ + g * cg + ci) * h * wi, h, wi, hp, wp, pt, pl)
                    for tp in range(taps):
                        off = uintp((tp // kw) * dh * wp + (tp % kw) * dw)
                        ab = uintp((ci * taps + tp) * ln)
                        if s == 1:  # contiguous: vectorised
                            for q in range(ln):
                                u = uintp(q)
                                acc[ab + u] += wide[u] * pad[u + off]
                        else:
                            for q in range(ln):
                                u = uintp(q)
                                acc[ab + u] += wide[u] * pad[u * us + off]
            for r in range(rows):
                dw_[oc * rows + r] = _sum_row(acc, r * ln, ln, lanes)

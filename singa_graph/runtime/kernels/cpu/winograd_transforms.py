"""The input and output transforms of the Winograd F(4x4, 3x3) kernel (winograd.py),
vectorised over blocks of ``BLOCK`` channels.

The transforms are a few additions per element, but along x each 4x4 tile reads a 6-wide
window at a stride of 4, which LLVM does not vectorise, and the planes of ResNet's 16-64
channel convs are 2-8 tiles wide, too short to vectorise over. So the channels are the
vector lanes: ``V`` holds the point sums as ``V[p, t, c]`` (channel innermost) and ``M`` as
``M[p, t, o]``, and every transform loop runs over the ``BLOCK`` channels of one tile. Only
the copies in and out of the row buffers move one element at a time (the input is NCHW).
Measured on the 2-core AVX-512 machine, one thread, batch 32 (fastest of 40 calls), the
whole forward conv went from 2.0 to 1.7 ms for 16 channels at 32x32, 1.75 to 1.0 for 32 at
16x16 and 1.56 to 0.9 for 64 at 8x8 (the GEMMs, ``V_p (T x C) @ U_p (C x O)``, run at
100-140 GFLOP/s in this orientation).

Each loop writes one output stream (the compiler's runtime alias checks between the flat
arrays stay few enough for it to vectorise), and every index is unsigned, so that Numba
emits no negative-index wrap-around.
"""
from numba import njit, uintp

BLOCK = 16  # channels per vector block: one AVX-512 register of float32


@njit(cache=True, nogil=True, fastmath={'contract'})
def input_tiles(x, n, vf, pitch, t0, pt, pl, th, tw, buf):
    """``V[p, t0 + ty*tw + tx, c] = (B^T d B)[p]`` for the 6x6 input block ``d`` of every
    tile of sample ``n`` and channel ``c``; ``V[p, t, c]`` is ``vf[p*pitch + t*C + c]``.

    Per block of channels and row of tiles, the six input rows are copied, zero-padded,
    into ``buf[0]`` as ``(6, zw, BLOCK)``, transformed along y into ``buf[1]`` (one
    contiguous loop per output row), then along x, tile by tile, over the block's lanes."""
    c_, h, w = x.shape[1], x.shape[2], x.shape[3]
    zw = 4 * tw + 2
    dt = vf.dtype.type
    f2, f4, f5, zero = dt(2), dt(4), dt(5), dt(0)
    a, b = pl, min(zw, pl + w)  # buffer columns holding input columns 0 .. b - a - 1
    xf = x[n].reshape(-1)
    pb, qb = buf[0], buf[1]
    ub = uintp(BLOCK)
    zc = uintp(zw) * ub  # one buffer row
    z2, z3, z4, z5 = zc + zc, zc * uintp(3), zc * uintp(4), zc * uintp(5)
    b2, b3, b4, b5 = ub + ub, ub * uintp(3), ub * uintp(4), ub * uintp(5)
    s1 = uintp(pitch)
    s2, s3, s4, s5 = s1 + s1, s1 * uintp(3), s1 * uintp(4), s1 * uintp(5)
    hw = uintp(h * w)
    for c0 in range(0, c_, BLOCK):
        cb = min(BLOCK, c_ - c0)
        for ty in range(th):
            for r in range(6):
                iy = 4 * ty - pt + r
                row = uintp(r) * zc
                if 0 <= iy < h:
                    for i in range(uintp(a) * ub):
                        pb[row + uintp(i)] = zero
                    for i in range(uintp(b) * ub, zc):
                        pb[row + uintp(i)] = zero
                    # plane by plane: contiguous reads (16 planes read side by side, 4 KiB
                    # apart for 32x32, shared an L1 set: 1.4x slower); stores stay in L1
                    src = uintp(c0) * hw + uintp(iy * w)
                    d = row + uintp(a) * ub
                    for k in range(cb):
                        s = src + uintp(k) * hw
                        dk = d + uintp(k)
                        for i in range(b - a):
                            pb[dk + uintp(i) * ub] = xf[s + uintp(i)]
                    for k in range(cb, BLOCK):
                        for i in range(b - a):
                            pb[d + uintp(k) + uintp(i) * ub] = zero
                else:
                    for i in range(zc):
                        pb[row + uintp(i)] = zero
            for i in range(zc):
                ui = uintp(i)
                qb[ui] = f4 * pb[ui] - f5 * pb[z2 + ui] + pb[z4 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[zc + ui] = pb[z3 + ui] + pb[z4 + ui] - f4 * (pb[zc + ui] + pb[z2 + ui])
            for i in range(zc):
                ui = uintp(i)
                qb[z2 + ui] = f4 * (pb[zc + ui] - pb[z2 + ui]) + pb[z4 + ui] - pb[z3 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[z3 + ui] = f2 * (pb[z3 + ui] - pb[zc + ui]) + pb[z4 + ui] - pb[z2 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[z4 + ui] = f2 * (pb[zc + ui] - pb[z3 + ui]) + pb[z4 + ui] - pb[z2 + ui]
            for i in range(zc):
                ui = uintp(i)
                qb[z5 + ui] = f4 * pb[zc + ui] - f5 * pb[z3 + ui] + pb[z5 + ui]
            t1 = t0 + ty * tw
            for r in range(6):
                q = uintp(r) * zc
                plane = uintp(r * 6) * s1
                for tx in range(tw):
                    j = q + uintp(4 * tx) * ub
                    o = plane + uintp((t1 + tx) * c_ + c0)
                    for k in range(cb):
                        uk = uintp(k)
                        vf[o + uk] = f4 * qb[j + uk] - f5 * qb[j + b2 + uk] + qb[j + b4 + uk]
                    o += s1
                    for k in range(cb):
                        uk = uintp(k)
                        vf[o + uk] = (qb[j + b3 + uk] + qb[j + b4 + uk]
                                      - f4 * (qb[j + ub + uk] + qb[j + b2 + uk]))
                    o += s1
                    for k in range(cb):
                        uk = uintp(k)
                        vf[o + uk] = (f4 * (qb[j + ub + uk] - qb[j + b2 + uk])
                                      + qb[j + b4 + uk] - qb[j + b3 + uk])
                    o += s1
                    for k in range(cb):
                        uk = uintp(k)
                        vf[o + uk] = (f2 * (qb[j + b3 + uk] - qb[j + ub + uk])
                                      + qb[j + b4 + uk] - qb[j + b2 + uk])
                    o += s1
                    for k in range(cb):
                        uk = uintp(k)
                        vf[o + uk] = (f2 * (qb[j + ub + uk] - qb[j + b3 + uk])
                                      + qb[j + b4 + uk] - qb[j + b2 + uk])
                    o += s1
                    for k in range(cb):
                        uk = uintp(k)
                        vf[o + uk] = f4 * qb[j + ub + uk] - f5 * qb[j + b3 + uk] + qb[j + b5 + uk]


@njit(cache=True, nogil=True, fastmath={'contract'})
def output_tiles(mf, pitch, y, n, t0, th, tw, sb, yb, bias, has_bias, relu):
    """``y[n]``'s 4x4 tiles ``= A^T M A`` from the point sums ``M[p, t0 + ty*tw + tx, o]``
    (``mf[p*pitch + t*O + o]``), over the lanes of a block of output channels: along the
    point rows into ``sb`` (``(4, 6, BLOCK)``), along the columns into the tile row buffer
    ``yb`` (``(4, 4*tw, BLOCK)``), whose valid part is copied out per channel with the bias
    and ReLU epilogue (as conv_loops._epilogue computes it)."""
    o_, ho, wo = y.shape[1], y.shape[2], y.shape[3]
    dt = y.dtype.type
    f2, f4, f8, zero = dt(2), dt(4), dt(8), dt(0)
    yf = y[n].reshape(-1)
    ub = uintp(BLOCK)
    b2, b3, b4, b5 = ub + ub, ub * uintp(3), ub * uintp(4), ub * uintp(5)
    m1 = uintp(6 * pitch)  # from point (a, j) to (a + 1, j)
    m2, m3, m4, m5 = m1 + m1, m1 * uintp(3), m1 * uintp(4), m1 * uintp(5)
    sr = uintp(6) * ub  # from row i of sb to row i + 1
    yr = uintp(4 * tw) * ub  # from row i of yb to row i + 1
    hw = uintp(ho * wo)
    for o0 in range(0, o_, BLOCK):
        ob = min(BLOCK, o_ - o0)
        for ty in range(th):
            for tx in range(tw):
                base = uintp((t0 + ty * tw + tx) * o_ + o0)
                for j in range(6):
                    i0 = base + uintp(j) * uintp(pitch)
                    d = uintp(j) * ub
                    for k in range(ob):
                        i = i0 + uintp(k)
                        sb[d + uintp(k)] = mf[i] + mf[i + m1] + mf[i + m2] + mf[i + m3] + mf[i + m4]
                    d += sr
                    for k in range(ob):
                        i = i0 + uintp(k)
                        sb[d + uintp(k)] = mf[i + m1] - mf[i + m2] + f2 * (mf[i + m3] - mf[i + m4])
                    d += sr
                    for k in range(ob):
                        i = i0 + uintp(k)
                        sb[d + uintp(k)] = mf[i + m1] + mf[i + m2] + f4 * (mf[i + m3] + mf[i + m4])
                    d += sr
                    for k in range(ob):
                        i = i0 + uintp(k)
                        sb[d + uintp(k)] = (mf[i + m1] - mf[i + m2] + f8 * (mf[i + m3] - mf[i + m4])
                                            + mf[i + m5])
                for r in range(4):
                    s = uintp(r) * sr
                    d = uintp(r) * yr + uintp(4 * tx) * ub
                    for k in range(ob):
                        i = s + uintp(k)
                        yb[d + uintp(k)] = sb[i] + sb[i + ub] + sb[i + b2] + sb[i + b3] + sb[i + b4]
                    d += ub
                    for k in range(ob):
                        i = s + uintp(k)
                        yb[d + uintp(k)] = sb[i + ub] - sb[i + b2] + f2 * (sb[i + b3] - sb[i + b4])
                    d += ub
                    for k in range(ob):
                        i = s + uintp(k)
                        yb[d + uintp(k)] = sb[i + ub] + sb[i + b2] + f4 * (sb[i + b3] + sb[i + b4])
                    d += ub
                    for k in range(ob):
                        i = s + uintp(k)
                        yb[d + uintp(k)] = (sb[i + ub] - sb[i + b2] + f8 * (sb[i + b3] - sb[i + b4])
                                            + sb[i + b5])
            for k in range(ob):
                o = o0 + k
                bo = bias[o] if has_bias else zero
                for r in range(min(4, ho - 4 * ty)):
                    src = uintp(r) * yr + uintp(k)
                    dst = uintp(o) * hw + uintp((4 * ty + r) * wo)
                    for i in range(wo):
                        f = yb[src + uintp(i) * ub]
                        if has_bias:
                            f = f + bo
                        if relu and not (f >= zero or f != f):
                            f = zero
                        yf[dst + uintp(i)] = f

"""Numba loops of the direct grouped-convolution kernels (runtime/kernels/cpu/depthwise.py).

Each plane is first copied into a zero-padded scratch plane ``pad`` of ``Hp x Wp`` (its
thread's slice of planned workspace). With equal strides ``s`` in both directions, the
output computed on a *wide* grid of row pitch ``Wp``, ``wide[q]`` with ``q = oy*Wp + ox``,
reads tap ``(i, j)`` at ``pad[s*q + i*dh*Wp + j*dw]``: one flat loop per plane, with no
bounds tests and no per-row set-up, that LLVM vectorises (the 3x3 taps unrolled into one
pass). The ``Wp - Wo`` columns of each wide row that are not outputs are computed and
dropped, which costs little next to per-row loops on the small planes of mobile nets
(2x2 to 32x32): row-by-row loops with border cases measured 2-5x slower there.

A strided forward first splits the padded plane into its ``s*s`` phases (rows and columns
``a, a+s, ...``): tap ``(i, j)`` then reads one phase contiguously at an offset, as at
stride 1, and the wide grid's pitch is ``Wp/s``, so little is computed and dropped. At
stride 2 the float32 source is read as 64-bit pairs, each split into its two columns'
phases. Measured at batch 2, one thread (2026-11-26): 96 channels 32x32 stride 2 180 ->
90 us, 5x5 on 144 channels 16x16 stride 2 610 -> 155 us (a stride-2 tap on the padded
plane read every other element, which LLVM gathered by shuffles). The forward's padding
is written once per call: every plane has the same geometry, so only the source's
elements are copied in for the next.

Accumulation is in the arrays' dtype (float32 sums in float32). Work is split into
``parts`` contiguous ranges of planes, one per thread of Numba's pool; each plane is
computed by one thread in a fixed order, so results do not depend on the thread count. Arrays are flat (1-d) and indexed with unsigned offsets, which lets LLVM
drop Numba's negative-index wrap-around.

``geo`` is ``(kh, kw, s, pt, pl, dh, dw)``; ``dims`` is ``(N, C_src, H_src, W_src, C_dst,
H_dst, W_dst)`` in the direction of the correlation.
"""
from numba import int64, njit, prange, uint32, uint64, uintp

from .epilogue import NONE, block_epilogue


@njit(cache=True, nogil=True)
def pitch(kh, kw, s, dh, dw, ho, wo):
    """``(Hp, Wp, L)``: the padded plane that an ``ho x wo`` output reads, and the length
    of the wide output."""
    hp = (ho - 1) * s + (kh - 1) * dh + 1
    wp = (wo - 1) * s + (kw - 1) * dw + 1
    return hp, wp, (ho - 1) * wp + wo


@njit(cache=True, nogil=True)
def phases(kh, kw, s, dh, dw, ho, wo):
    """``(Hq, Wq, L)``: the ``s*s`` phase planes of the padded plane that an ``ho x wo``
    output of stride ``s`` reads (phase ``(a, b)`` holds the padded plane's rows ``a, a+s,
    ...`` and columns ``b, b+s, ...``), and the length of the wide output on their pitch.
    At stride 1 the one phase is the padded plane."""
    hp, wp, _ = pitch(kh, kw, s, dh, dw, ho, wo)
    hq, wq = (hp + s - 1) // s, (wp + s - 1) // s
    return hq, wq, (ho - 1) * wq + wo


@njit(cache=True, nogil=True, inline="always")
def _split_row(bits, e0, e1, k, pairs, n):
    """Elements ``2c`` and ``2c + 1`` of a float32 row that starts on a 64-bit pair
    ``pairs[k]`` (little-endian: the even element is the low half), into ``bits[e0 + c]``
    and ``bits[e1 + c]`` for ``c < n``: in vectors, where reading every other element ran
    scalar."""
    lo, sh = uint64(0xFFFFFFFF), uint64(32)
    for c in range(n):
        u = uintp(c)
        v = pairs[uintp(k) + u]
        bits[uintp(e0) + u] = uint32(v & lo)
        bits[uintp(e1) + u] = uint32(v >> sh)


@njit(cache=True, nogil=True, inline="always")
def _phase_at(r, c, s, hq, wq):
    """Where element ``(r, c)`` of the padded plane lies in its phase planes (``r, c >= 0``;
    pass a literal stride 2 and the divisions are shifts)."""
    return ((r % s * s + c % s) * hq + r // s) * wq + c // s


@njit(cache=True, nogil=True, inline="always")
def _fill_phases(pad, bits, src, pairs, p0, sb, hs, ws, hq, wq, s, pt, pl):
    """``pad[a, b, r, c] = padded plane[s*r + a, s*c + b]`` for the ``s*s`` phases (at
    stride 1 the one phase is the padded plane): a strided conv then reads every tap
    contiguously, as a stride-1 one does (a stride-2 tap read one element in two, and LLVM
    gathered its lanes by shuffles).

    ``pad`` was zeroed when its part began, and every plane has the same geometry, so only
    the source's elements are written where the plane fits inside the padding (else every
    element, zeros included). ``bits`` is ``pad`` as uint32, ``pairs`` the source as uint64
    from its element ``p0`` (empty: not float32): stride-2 rows are split from those."""
    if not (pt >= 0 and pl >= 0 and (hs - 1 + pt) // s < hq and (ws - 1 + pl) // s < wq):
        if s == 1:  # a literal stride: the row copies vectorise
            _fill_all_phases(pad, src, sb, hs, ws, hq, wq, 1, pt, pl)
        else:
            _fill_all_phases(pad, src, sb, hs, ws, hq, wq, s, pt, pl)
        return
    if s == 1:
        for y in range(hs):
            rb = uintp((y + pt) * wq + pl)
            xb = uintp(sb + y * ws)
            for x in range(ws):
                pad[rb + uintp(x)] = src[xb + uintp(x)]
        return
    if s == 2 and pairs.size > 0:
        for y in range(hs):
            r, e = y + pt, sb + y * ws  # the padded row, the row's first element
            x0 = (e - p0) & 1  # 1: the row starts on a high half, copied alone
            if x0:
                pad[uintp(_phase_at(r, pl, 2, hq, wq))] = src[uintp(e)]
            n = (ws - x0) >> 1
            _split_row(bits, _phase_at(r, x0 + pl, 2, hq, wq),
                       _phase_at(r, x0 + pl + 1, 2, hq, wq), (e + x0 - p0) >> 1, pairs, n)
            if x0 + 2 * n < ws:
                pad[uintp(_phase_at(r, ws - 1 + pl, 2, hq, wq))] = src[uintp(e + ws - 1)]
        return
    for y in range(hs):
        for x in range(ws):
            pad[uintp(_phase_at(y + pt, x + pl, s, hq, wq))] = src[uintp(sb + y * ws + x)]


@njit(cache=True, nogil=True, inline="always")
def _fill_all_phases(pad, src, sb, hs, ws, hq, wq, s, pt, pl):
    """Every element of the phase planes, zeros included (any padding, cropping too). At
    stride 1 (pass a literal 1: the copies then vectorise) the one phase is the padded
    plane ``pad[r, c] = src plane[r - pt, c - pl]``."""
    zero = pad.dtype.type(0)
    for a in range(s):
        for b in range(s):
            pb = (a * s + b) * hq * wq
            d = b - pl  # source column s*c + d of phase column c
            c0 = min(max(0, (-d + s - 1) // s), wq)
            c1 = max(min(wq, (ws - d + s - 1) // s), 0)
            c0 = min(c0, c1)
            for r in range(hq):
                rb = uintp(pb + r * wq)
                y = s * r + a - pt
                if y < 0 or y >= hs:
                    for c in range(wq):
                        pad[rb + uintp(c)] = zero
                    continue
                for c in range(c0):
                    pad[rb + uintp(c)] = zero
                xb = sb + y * ws + s * c0 + d
                for c in range(c1 - c0):
                    pad[rb + uintp(c0 + c)] = src[uintp(xb + s * c)]
                for c in range(c1, wq):
                    pad[rb + uintp(c)] = zero


@njit(cache=True, nogil=True, inline="always")
def _tap_offset(i, j, s, dh, dw, hq, wq):
    """Where tap ``(i, j)`` of output 0 lies in the phase planes."""
    return uintp(_phase_at(i * dh, j * dw, s, hq, wq))


@njit(cache=True, nogil=True, inline="always")
def _rows3x3(wide, pad, ws, os, n):
    """``wide[q] += sum_t w_t pad[q + o_t]`` for ``q < n``: a 3x3 kernel ``ws`` (row-major)
    whose taps lie at the offsets ``os``, all nine in one pass that LLVM vectorises."""
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = ws
    o0, o1, o2, o3, o4, o5, o6, o7, o8 = os
    for q in range(n):
        u = uintp(q)
        wide[u] += ((w0 * pad[u + o0] + w1 * pad[u + o1] + w2 * pad[u + o2])
                    + (w3 * pad[u + o3] + w4 * pad[u + o4] + w5 * pad[u + o5])
                    + (w6 * pad[u + o6] + w7 * pad[u + o7] + w8 * pad[u + o8]))


@njit(cache=True, nogil=True, inline="always")
def _taps(wide, pad, w, wb, flip, kh, kw, s, dh, dw, hq, wq, n):
    """``wide[q] += sum_ij w_ij padded[s*(q // wq) ..., s*(q % wq) ...]`` for ``q < n``, read
    from the phase planes (``w_ij`` from ``w[wb:]``, ``flip``: the kernel rotated by 180
    degrees)."""
    nt = kh * kw
    if kh == 3 and kw == 3:
        w0, w1, w2 = w[wb + (8 if flip else 0)], w[wb + (7 if flip else 1)], w[wb + (6 if flip else 2)]
        w3, w4, w5 = w[wb + (5 if flip else 3)], w[wb + 4], w[wb + (3 if flip else 5)]
        w6, w7, w8 = w[wb + (2 if flip else 6)], w[wb + (1 if flip else 7)], w[wb + (0 if flip else 8)]
        os = (_tap_offset(0, 0, s, dh, dw, hq, wq), _tap_offset(0, 1, s, dh, dw, hq, wq),
              _tap_offset(0, 2, s, dh, dw, hq, wq), _tap_offset(1, 0, s, dh, dw, hq, wq),
              _tap_offset(1, 1, s, dh, dw, hq, wq), _tap_offset(1, 2, s, dh, dw, hq, wq),
              _tap_offset(2, 0, s, dh, dw, hq, wq), _tap_offset(2, 1, s, dh, dw, hq, wq),
              _tap_offset(2, 2, s, dh, dw, hq, wq))
        _rows3x3(wide, pad, (w0, w1, w2, w3, w4, w5, w6, w7, w8), os, n)
        return
    if kw == 5 or kw == 7:
        for i in range(kh):
            _kernel_row(wide, pad, w, wb, flip, i, kw, nt, s, dh, dw, hq, wq, n)
        return
    for t in range(nt):
        wv = w[wb + (nt - 1 - t if flip else t)]
        off = _tap_offset(t // kw, t % kw, s, dh, dw, hq, wq)
        for q in range(n):
            wide[uintp(q)] += wv * pad[uintp(q) + off]


@njit(cache=True, nogil=True, inline="always")
def _kernel_row(wide, pad, w, wb, flip, i, kw, nt, s, dh, dw, hq, wq, n):
    """Row ``i`` of a 5- or 7-wide kernel in one pass, its taps summed left to right and
    then added to ``wide``, where a pass per tap loaded and stored ``wide`` for each.
    Measured at batch 2, two threads (2026-11-27): ConvNeXt's 7x7 on 96 channels at 16x16
    220-248 -> 93 us, 5x5 on 240 channels at 16x16 194-232 -> 112 us; strided 5x5 (144
    channels, 16x16) unchanged."""
    t = i * kw
    w0 = w[wb + (nt - 1 - t if flip else t)]
    w1 = w[wb + (nt - 2 - t if flip else t + 1)]
    w2 = w[wb + (nt - 3 - t if flip else t + 2)]
    w3 = w[wb + (nt - 4 - t if flip else t + 3)]
    w4 = w[wb + (nt - 5 - t if flip else t + 4)]
    o0 = _tap_offset(i, 0, s, dh, dw, hq, wq)
    o1 = _tap_offset(i, 1, s, dh, dw, hq, wq)
    o2 = _tap_offset(i, 2, s, dh, dw, hq, wq)
    o3 = _tap_offset(i, 3, s, dh, dw, hq, wq)
    o4 = _tap_offset(i, 4, s, dh, dw, hq, wq)
    if kw == 5:
        for q in range(n):
            u = uintp(q)
            wide[u] += (w0 * pad[u + o0] + w1 * pad[u + o1] + w2 * pad[u + o2]
                        + w3 * pad[u + o3] + w4 * pad[u + o4])
        return
    w5 = w[wb + (nt - 6 - t if flip else t + 5)]
    w6 = w[wb + (nt - 7 - t if flip else t + 6)]
    o5 = _tap_offset(i, 5, s, dh, dw, hq, wq)
    o6 = _tap_offset(i, 6, s, dh, dw, hq, wq)
    for q in range(n):
        u = uintp(q)
        wide[u] += (w0 * pad[u + o0] + w1 * pad[u + o1] + w2 * pad[u + o2]
                    + w3 * pad[u + o3] + w4 * pad[u + o4] + w5 * pad[u + o5]
                    + w6 * pad[u + o6])


@njit(cache=True, nogil=True, inline="always")
def part_scratch(ws, bits, t, size, ln):
    """Part ``t``'s phase planes (``size`` elements, their padding zeroed here and written
    once: :func:`_fill_phases`), their uint32 view and its wide row of ``ln``."""
    pad = ws[t, :size]
    zero = pad.dtype.type(0)
    for q in range(size):
        pad[uintp(q)] = zero
    return pad, ws[t, size:size + ln], bits[t, :size]


@njit(cache=True, nogil=True, parallel=True)
def correlate(src, pairs, p0, w, dst, transposed, geo, dims, cg, og, bias, has_bias, relu, ws,
              bits, parts, dst2, res2, has_res, act, alpha, beta, kc):
    """Every plane ``dst[n, c]`` of a direct correlation of ``src`` with ``w``.

    Forward: ``c`` is an output channel; it reads the ``cg`` input channels of its group.
    ``transposed`` (the input gradient of a stride-1 conv): ``c`` is an input channel; it
    reads the ``og`` output channels of its group, each kernel flipped, and ``geo`` holds
    the transposed padding ``dilation*(k-1) - pad``. ``ws`` is ``(parts, s*s*Hq*Wq + L)``
    (:func:`phases`), and ``bits`` is its uint32 view (empty if not float32). Each part
    ends with the conv epilogue (residual ``res2``, activation ``act``; epilogue.py) on its
    rows of ``dst2``, ``dst`` as ``(N*C_dst, H_dst*W_dst)`` (``kc``: the formulas'
    constants)."""
    for t in prange(parts):
        _correlate_part(src, pairs, p0, w, dst, transposed, geo, dims, cg, og, bias, has_bias,
                        relu, ws, bits, parts, dst2, res2, has_res, act, alpha, beta, kc,
                        int64(t))


@njit(cache=True, nogil=True)
def _correlate_part(src, pairs, p0, w, dst, transposed, geo, dims, cg, og, bias, has_bias, relu,
                    ws, bits, parts, dst2, res2, has_res, act, alpha, beta, kc, t):
    """Part ``t`` of :func:`correlate`."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, cs, hs, ws_, cd, ho, wo = dims
    hq, wq, ln = phases(kh, kw, s, dh, dw, ho, wo)
    size = s * s * hq * wq
    total = n_ * cd
    cnt = og if transposed else cg
    taps = kh * kw
    pad, wide, pbits = part_scratch(ws, bits, t, size, ln)
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
            _fill_phases(pad, pbits, src, pairs, p0, (n * cs + sc) * hs * ws_, hs, ws_,
                         hq, wq, s, pt, pl)
            _taps(wide, pad, w, wb, transposed, kh, kw, s, dh, dw, hq, wq, ln)
        db = p * ho * wo
        for oy in range(ho):
            for ox in range(wo):
                f = wide[uintp(oy * wq + ox)]
                if relu and not (f >= zero or f != f):
                    f = zero
                dst[uintp(db + oy * wo + ox)] = f
    if has_res or act != NONE:
        r0, r1 = t * total // parts, (t + 1) * total // parts
        block_epilogue(dst2[r0:r1], bias, False, True, res2[r0:r1], has_res, act, alpha,
                       beta, kc)


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

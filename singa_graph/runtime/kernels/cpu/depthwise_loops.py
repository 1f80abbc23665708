"""Numba loops of the direct grouped-convolution kernels (runtime/kernels/cpu/depthwise.py).

Each plane is first copied into a zero-padded scratch plane ``pad`` of ``Hp x Wp`` (its
thread's slice of planned workspace), its rows in vectors (simd_plane.copy_row). A strided
forward splits the padded plane into its ``s*s`` phases instead (rows and columns ``a, a+s,
...``; at stride 2 each row's vectors shuffled into their even and odd lanes,
simd_plane.split_row), so that every tap ``(i, j)`` reads one phase contiguously at an
offset, as at stride 1: output ``(oy, ox)`` reads ``pad[oy*Wq + ox + at(i*dh, j*dw)]``
with ``Wq`` the phases' pitch. The forward's padding is written once per call: every plane
has the same geometry, so only the source's elements are copied in for the next.

The outputs are then computed on register tiles (simd_plane.plane_tile): 8 rows of one
vector of columns, or 4 rows of two, summed over all the taps in registers and stored in
place, ReLU applied, in the order of the channels-last tiles (the bias, then one product
and one add per tap in row-major order). Measured at batch 8, one thread (2026-11-28, min
of 200 calls, one run each) against the wide-row loops that they replaced (a flat loop
over each padded plane in LLVM's 256-bit vectors, its sums loaded and stored for every
kernel row, then copied out): 144 channels at 16x16 493 -> 201 us, 96 at 32x32 stride 2
835 -> 270, 32 at 32x32 297 -> 149. About a third of what is left is the copy into the
padded plane, which reads the input from L2 or memory.

Accumulation is in the arrays' dtype (float32 sums in float32). Work is split into
``parts`` contiguous ranges of planes, one per thread of Numba's pool; each plane is
computed by one thread in a fixed order, so results do not depend on the thread count.
Arrays are flat (1-d) and indexed with unsigned offsets, which lets LLVM drop Numba's
negative-index wrap-around.

``geo`` is ``(kh, kw, s, pt, pl, dh, dw)``; ``dims`` is ``(N, C_src, H_src, W_src, C_dst,
H_dst, W_dst)`` in the direction of the correlation.
"""
from numba import int64, njit, prange, uintp

from .epilogue import NONE, block_epilogue
from .simd import VECTOR_BYTES
from .simd_plane import copy_row, plane_tile, split_row


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
def _phase_at(r, c, s, hq, wq):
    """Where element ``(r, c)`` of the padded plane lies in its phase planes (``r, c >= 0``;
    pass a literal stride 2 and the divisions are shifts)."""
    return ((r % s * s + c % s) * hq + r // s) * wq + c // s


@njit(cache=True, nogil=True, inline="always")
def fill_phases(pad, src, sb, hs, ws, hq, wq, s, pt, pl):
    """``pad[a, b, r, c] = padded plane[s*r + a, s*c + b]`` for the ``s*s`` phases (at
    stride 1 the one phase is the padded plane): a strided conv then reads every tap
    contiguously, as a stride-1 one does (a stride-2 tap read one element in two, and LLVM
    gathered its lanes by shuffles).

    ``pad`` was zeroed when its part began, and every plane has the same geometry, so only
    the source's elements are written where the plane fits inside the padding (else every
    element, zeros included)."""
    if not (pt >= 0 and pl >= 0 and (hs - 1 + pt) // s < hq and (ws - 1 + pl) // s < wq):
        if s == 1:  # a literal stride: the row copies vectorise
            _fill_all_phases(pad, src, sb, hs, ws, hq, wq, 1, pt, pl)
        else:
            _fill_all_phases(pad, src, sb, hs, ws, hq, wq, s, pt, pl)
        return
    if s == 1:
        for y in range(hs):
            copy_row(pad, (y + pt) * wq + pl, src, sb + y * ws, ws)
        return
    if s == 2:
        for y in range(hs):
            r = y + pt
            split_row(pad, _phase_at(r, pl, 2, hq, wq), _phase_at(r, pl + 1, 2, hq, wq), src,
                      sb + y * ws, ws)
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
def _tile(R, V, S, x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo,
          ys, tail):
    """simd_plane.plane_tile(R, V, S) for R in (4, 1), V in (1, 2), S in (1, 2), and the
    general stride's (1, 1, 0): Numba needs each intrinsic called by its name."""
    if S == 1:
        if R == 4:
            _P421(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
        elif R == 8:
            _P811(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
        elif V == 2:
            _P121(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
        else:
            _P111(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
    elif S == 2:
        if R == 4:
            _P422(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
        elif R == 8:
            _P812(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
        elif V == 2:
            _P122(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
        else:
            _P112(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys,
                  tail)
    else:
        _P110(x, xo, xs, hq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, y, yo, ys, tail)


@njit(cache=True, nogil=True, inline="always")
def _plane(pad, hq, wq, s, kh, kw, dh, dw, w, wo, wt, init, acc_in, relu, dst, db, ho, wd):
    """Output plane ``dst[db:db + ho*wd]`` (``wd`` wide) of the phase planes ``pad``
    (:func:`fill_phases`) on the register tiles: 4 rows by up to 2 vectors of columns at
    a time (simd_plane.plane_tile, whose docstring gives the other arguments)."""
    lanes = VECTOR_BYTES // dst.itemsize
    S = s if s <= 2 else 0
    vmax = 2 if S else 1
    for c0 in range(0, wd, vmax * lanes):
        nv = min(vmax, (wd - c0 + lanes - 1) // lanes)
        tail = wd - c0 - (nv - 1) * lanes
        oy = 0
        while oy < ho:
            r = 8 // nv if S and ho - oy >= 8 // nv else 1
            _tile(r, nv, S, pad, oy * wq + c0, wq, hq, s, kh, kw, dh, dw, w, wo, wt, init,
                  acc_in, relu, dst, db + oy * wd + c0, wd, tail)
            oy += r


@njit(cache=True, nogil=True, inline="always")
def phase_planes(ws, t, size):
    """Part ``t``'s phase planes, ``size`` elements, zeroed: :func:`fill_phases` writes
    only their inside, so their padding is written here once for all the planes."""
    pad = ws[t, :size]
    zero = pad.dtype.type(0)
    for q in range(size):
        pad[uintp(q)] = zero
    return pad


@njit(cache=True, nogil=True, inline="always")
def part_scratch(ws, t, size, ln):
    """Part ``t``'s phase planes (:func:`phase_planes`) and its wide row of ``ln``."""
    return phase_planes(ws, t, size), ws[t, size:size + ln]


@njit(cache=True, nogil=True, parallel=True)
def correlate(src, w, dst, transposed, geo, dims, cg, og, bias, has_bias, relu, ws, parts,
              dst2, res2, has_res, act, alpha, beta, kc):
    """Every plane ``dst[n, c]`` of a direct correlation of ``src`` with ``w``.

    Forward: ``c`` is an output channel; it reads the ``cg`` input channels of its group.
    ``transposed`` (the input gradient of a stride-1 conv): ``c`` is an input channel; it
    reads the ``og`` output channels of its group, each kernel flipped, and ``geo`` holds
    the transposed padding ``dilation*(k-1) - pad``. ``ws`` is ``(parts, s*s*Hq*Wq)``
    (:func:`phases`), at least. Each part
    ends with the conv epilogue (residual ``res2``, activation ``act``; epilogue.py) on its
    rows of ``dst2``, ``dst`` as ``(N*C_dst, H_dst*W_dst)`` (``kc``: the formulas'
    constants)."""
    for t in prange(parts):
        _correlate_part(src, w, dst, transposed, geo, dims, cg, og, bias, has_bias, relu, ws,
                        parts, dst2, res2, has_res, act, alpha, beta, kc, int64(t))


@njit(cache=True, nogil=True)
def _correlate_part(src, w, dst, transposed, geo, dims, cg, og, bias, has_bias, relu, ws, parts,
                    dst2, res2, has_res, act, alpha, beta, kc, t):
    """Part ``t`` of :func:`correlate`."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, cs, hs, ws_, cd, ho, wo = dims
    hq, wq, ln = phases(kh, kw, s, dh, dw, ho, wo)
    size = s * s * hq * wq
    total = n_ * cd
    cnt = og if transposed else cg
    taps = kh * kw
    pad = phase_planes(ws, t, size)
    zero = pad.dtype.type(0)
    for p in range(t * total // parts, (t + 1) * total // parts):
        n, c = p // cd, p % cd
        b0 = bias[c] if has_bias else zero
        for k in range(cnt):
            if transposed:  # the kernel rotated by 180 degrees: its taps read backwards
                sc = (c // cg) * og + k
                wb, wt = (sc * cg + c % cg) * taps + taps - 1, -1
            else:
                sc = (c // og) * cg + k
                wb, wt = (c * cg + k) * taps, 1
            fill_phases(pad, src, (n * cs + sc) * hs * ws_, hs, ws_, hq, wq, s, pt, pl)
            _plane(pad, hq, wq, s, kh, kw, dh, dw, w, wb, wt, b0, int64(k > 0),
                   int64(relu and k == cnt - 1), dst, p * ho * wo, ho, wo)
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


_P421, _P811, _P121, _P111, _P422, _P812, _P122, _P112 = (
    plane_tile(r, v, s) for s in (1, 2) for r, v in ((4, 2), (8, 1), (1, 2), (1, 1)))
_P110 = plane_tile(1, 1, 0)

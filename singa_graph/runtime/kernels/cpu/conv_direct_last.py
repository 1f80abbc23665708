"""Direct convolutions on channels-last activations (``Conv2dDirectNHWC``: x ``(N, H, W,
C)``, y ``(N, Ho, Wo, O)``, the weight blocked as Conv2dDirect's; made by passes/layout.py
for the dense convs of a channels-last chain).

conv_direct.py's register tiles find a pixel's inputs from its offset and step through
the input channels by a fixed stride: the plane size in NCHW, 1 here. A tile's block of
``pixels x channels`` sums is a block of the NHWC output itself, so the tiles store it in
place and the conv epilogue runs on those rows: no scratch for the sums and no transpose
into planes (the NCHW kernel's ``rows_to_planes``), and the input channels a tile reads
for one tap are one contiguous run. A padded conv copies its samples zero-padded once per
part (runs of ``W*C`` values). The parts, the order of every sum and so the rounding are
the NCHW kernel's (:func:`.conv_direct.plan_parts`): results do not depend on the thread
count, and equal the NCHW kernel's bit for bit.
"""
from numba import njit, uintp

from ...registry import kernel
from . import conv_direct
from .conv_direct import columns
from .epilogue import rows_range_epilogue
from .loops import loops


@njit(cache=True, nogil=True)
def pad_rows(x3, p, pt, pl, hp, wp):
    """``p[:hp*wp*C]`` = the ``(H, W, C)`` sample ``x3`` zero-padded to ``(hp, wp, C)``."""
    h, w, c = x3.shape
    z = p.dtype.type(0)
    row, run = uintp(wp * c), uintp(w * c)
    left = uintp(pl * c)
    for q in range(uintp(pt) * row):
        p[q] = z
    for iy in range(h):
        b = uintp(iy + pt) * row
        for q in range(b, b + left):
            p[q] = z
        src = x3[iy].reshape(-1)
        for q in range(run):
            p[b + left + q] = src[q]
        for q in range(b + left + run, b + row):
            p[q] = z
    for q in range(uintp(h + pt) * row, uintp(hp) * row):
        p[q] = z


@njit(cache=True, nogil=True, error_model="numpy")
def _group(x, w, y3, xt, et, ot, bias, has_bias, res3, has_res, act, alpha, beta, consts,
           geo, grp, n0, n1, o0, o1, lanes):
    """Output channels ``[o0, o1)`` of samples ``[n0, n1)`` (``y3``/``res3`` ``(N, Ho*Wo,
    O)``, ``x`` ``(N, H, W, C)``), one part's: conv_direct._group's contract (``et``
    empty: the tiles store into ``y3``; ``xt`` the part's padded samples)."""
    kh, kw, sh, sw, pt, pl, dh, dw, hp, wp = geo
    og, cg, span = grp
    c_, hw, o_ = x.shape[3], y3.shape[1], y3.shape[2]
    wo = (wp - dw * (kw - 1) - 1) // sw + 1
    cs = hp * wp * c_  # one padded sample
    slab = kh * kw * span * lanes
    padded = pt > 0 or pl > 0 or hp > x.shape[1] or wp > x.shape[2]
    first = 0
    if padded:
        flat = xt.reshape(-1)
        for n in range(n0, n1):
            pad_rows(x[n], flat[(n - n0) * cs:(n - n0 + 1) * cs], pt, pl, hp, wp)
    else:  # the input's own rows are the padded rows
        flat = x.reshape(-1)
        first = n0 * cs
    pixels = (n1 - n0) * hw
    for q in range(pixels):
        s, r = q // hw, q % hw
        ot[q] = first + s * cs + ((r // wo) * sh * wp + (r % wo) * sw) * c_
    r0, r1 = n0 * hw, n1 * hw
    # one group, no dilation along rows: a kernel row's taps and their channels are one
    # run of kw*C inputs and of weights, in the (i, j, c) order of the sums, so the tiles
    # take it as one loop (a 7x7 stem over 3 channels: 7 loops of 21, not 49 of 3)
    nc, taps, rj = span, kw, dw * c_
    if dw == 1 and span == c_:
        nc, taps, rj = kw * c_, 1, 0
    # row p of the tiles is output row r0 + p: at (r0 + p)*O + o, so "e0" is -r0*O
    columns(flat, ot, pixels, w, slab, lanes, slab, y3.reshape(-1), o_, -r0 * o_, nc, kh,
            taps, dh * wp * c_, rj, 1, o0, o1, lanes, og, cg, c_ - span)
    rows_range_epilogue(y3.reshape(-1, o_), res3.reshape(-1, o_), r0, r1, o0, o1, bias,
                        has_bias, has_res, act, alpha, beta, consts)


_FORWARD = loops(conv_direct.variant(conv_direct._forward, "_last", _group=_group,
                                     CHANNEL_AXIS=2), error_model="numpy")


@kernel("Conv2dDirectNHWC", workspace=conv_direct.workspace)
def conv2d_direct_nhwc(op, ins, outs, ws):
    return conv_direct.blocked_step(op, ins, outs, ws, _FORWARD)

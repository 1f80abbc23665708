"""Depthwise convolution forward with the channels innermost (runtime/kernels/cpu/depthwise.py).

On the small planes of the last stages of mobile nets (2x2 to 8x8, hundreds of channels) a
plane offers a 3x3 tap 4 to 64 outputs, too few for a vector loop along a row, and blocks
of 16 interleaved channels (oneDNN's layout, which this kernel replaced) spend their time
in loops of 2-8 vectors. Here a unit of work is a range of channels of one sample,
transposed once into planned workspace as ``(H*W, cc)``: one channels-last sample. The
forward then runs the register tiles of :func:`tiled_taps` (simd.depthwise_tile, shared
with the channels-last kernels of conv_channels_last.py) on it: each output pixel's valid
taps added over up to 64 channels at a time (128 by a border), the sums held in
registers. The input gradient at any stride (the adjoint) scatters with
:func:`_tap_products`, one flat loop over the ``cc`` channels per (pixel, tap), in the
same order. The weights are transposed to ``(taps, C)`` once a call, into workspace that
every unit reads, and the output is transposed back into its NCHW planes on the way out,
with bias, ReLU and the conv epilogue (residual add, activation).

Taps are tested per pixel, so padding costs nothing and any stride or dilation reads only
what it uses. Units are split into ``parts`` contiguous ranges, one per thread; each output
element is computed by one thread in a fixed order (bias, then the taps row by row), so
results do not depend on the thread count.
"""
from numba import njit, prange, uintp

from . import simd
from .epilogue import conv_epilogue
from .loops import loops
from .simd_transpose import planes4_to_rows, rows_to_planes4, transpose8


def units_of(n, c, parts) -> int:
    """Channel ranges per sample: enough units to give every part work, each at least 16
    channels wide (one AVX-512 vector) where there are that many."""
    per = max(1, -(-parts // n))
    return max(1, min(per, c // 16))


@njit(cache=True, nogil=True, inline="always")
def unit_channels(u, per_sample, c_):
    """``(sample, first channel, end channel)`` of unit ``u`` when every sample's ``c_``
    channels are cut into ``per_sample`` ranges."""
    k = u % per_sample
    return u // per_sample, k * c_ // per_sample, (k + 1) * c_ // per_sample


def scratch_elements(c, kh, kw, h, w, ho, wo, per_sample) -> int:
    """Workspace elements of one part of :func:`grad_weight`: the weight gradient's sums,
    input and output gradient of its widest unit (``ceil(c / per_sample)`` channels)."""
    cc = -(-c // per_sample)
    return cc * (kh * kw + h * w + ho * wo)


#: parts of at least this many channels each are cut at multiples of it: 16 float32
#: channels are one AVX-512 vector and one cache line, so every row of a part's transposed
#: planes starts on a line (240 channels at 8x8, 5x5, batch 2, two threads, medians of 60
#: alternating bursts, 2026-12-02: cut at 112 | 128 30.5 us, at 120 | 120 37.7)
CHANNEL_CUT = 16
#: channels per part from which :func:`forward` cuts every sample's channels into one range
#: per part (:func:`part_channels`), each part transposing its own weights, rather than
#: giving parts whole samples: one parallel loop instead of two, and each thread reads the
#: weights of its own channels only. Same measurement as above, against whole samples per
#: part: 240 channels at 8x8 batch 2 35.3 -> 30.5 us, batch 8 94.8 -> 82.4, 480 at 4x4 3x3
#: 17.0 -> 14.8, 1152 at 2x2 5x5 17.9 -> 14.6; 144 at 16x16 stride 2 (72 a part) within
#: noise, hence 64 and up.
SPLIT_CHANNELS = 64


@njit(cache=True, nogil=True)
def split_by_channels(c, parts):
    """Whether :func:`forward` cuts every sample's ``c`` channels into ``parts`` ranges
    rather than giving its parts whole samples (``per_sample = parts`` then)."""
    return c >= SPLIT_CHANNELS * parts


@njit(cache=True, nogil=True)
def part_channels(t, parts, c_):
    """``(c0, c1)``: the channels of part ``t`` of ``parts`` when every sample's ``c_``
    channels are cut into one range a part (cuts at multiples of CHANNEL_CUT where
    :func:`split_by_channels`: every part gets at least SPLIT_CHANNELS)."""
    c0, c1 = t * c_ // parts, (t + 1) * c_ // parts
    if split_by_channels(c_, parts):
        c0 = c0 // CHANNEL_CUT * CHANNEL_CUT
        c1 = c_ if t + 1 == parts else c1 // CHANNEL_CUT * CHANNEL_CUT
    return c0, c1


def forward_scratch(c, h, w, ho, wo, per_sample) -> int:
    """Workspace elements of one part of :func:`forward`: the transposed input and output
    of its widest unit (the transposed weights are shared, ``kh * kw * c`` elements). The
    ranges of :func:`part_channels` are those of every unit (``unit_channels``) where they
    are not cut on CHANNEL_CUT."""
    widest = max(b - a for a, b in (part_channels(t, per_sample, c)
                                    for t in range(per_sample)))
    return widest * (h * w + ho * wo)


#: vectors of channels in a border pixel's tile (WIDE) and in the halves of a block that
#: the inner pixels' 4-pixel tiles take (HALF): with AVX2's 16 registers 4 x 4 tiles
#: spilled their sums
HALF = 4 if simd.REGISTERS >= 32 else 2
WIDE = 2 * HALF

#: channel transposes run in 8 x 8 blocks in vector registers (simd_transpose.py), 2x2
#: planes 16 channels at a time, the pixels and channels past the last whole block element
#: by element. Against the element loops in 32 x 32 tiles that they replaced, one thread
#: (2026-11-27): batch 8 of 192 channels at 8x8 73 -> 23 us, 576 at 4x4 54 -> 30, 144 at
#: 16x16 282 -> 125, 960 at 2x2 41 -> 14-21
BLOCK = 8


@njit(cache=True, nogil=True, inline="always")
def _contiguous(a):
    """Whether ``a`` (1-d or 2-d) is laid out as its flat elements, as transpose8 reads it."""
    if a.size == 0:
        return True
    return (a.strides[-1] == a.itemsize
            and a.strides[0] == (a.size // a.shape[0]) * a.itemsize)


@njit(cache=True, nogil=True, inline="always")
def planes_to_rows(x, xt, first, cc, hw):
    """``xt[q*cc + c] = x[(first + c)*hw + q]``: the ``cc`` planes of ``hw`` elements from
    plane ``first`` of the flat ``x`` as ``(hw, cc)``, channels innermost."""
    c8, q8 = (cc // BLOCK) * BLOCK, (hw // BLOCK) * BLOCK
    flat = _contiguous(x) and _contiguous(xt)
    if not flat:
        c8 = q8 = 0
    for q0 in range(0, q8, BLOCK):
        for c0 in range(0, c8, BLOCK):
            transpose8(x, (first + c0) * hw + q0, hw, xt, q0 * cc + c0, cc, False)
    if hw == 4 and flat:  # 2x2 planes, 16 channels at a time
        c8, q8 = (cc // 16) * 16, 4
        for c0 in range(0, c8, 16):
            planes4_to_rows(x, (first + c0) * 4, xt, c0, cc)
    for c in range(cc):
        xb = uintp((first + c) * hw)
        for q in range(q8 if c < c8 else 0, hw):
            xt[uintp(q * cc + c)] = x[xb + uintp(q)]


@njit(cache=True, nogil=True, inline="always")
def rows_to_planes(acc, y2, first, cc, hw, relu):
    """The inverse of :func:`planes_to_rows` into rows ``first...`` of ``y2`` (planes x
    ``hw``), with a ReLU on the way (NaN kept)."""
    c8, q8 = (cc // BLOCK) * BLOCK, (hw // BLOCK) * BLOCK
    flat = _contiguous(acc) and _contiguous(y2)
    if not flat:
        c8 = q8 = 0
    for q0 in range(0, q8, BLOCK):
        for c0 in range(0, c8, BLOCK):
            transpose8(acc, q0 * cc + c0, cc, y2, (first + c0) * hw + q0, hw, relu)
    if hw == 4 and flat:
        c8, q8 = (cc // 16) * 16, 4
        for c0 in range(0, c8, 16):
            rows_to_planes4(acc, c0, cc, y2, (first + c0) * 4, relu)
    zero = acc.dtype.type(0)
    for c in range(cc):
        plane = y2[first + c]
        for q in range(q8 if c < c8 else 0, hw):
            f = acc[uintp(q * cc + c)]
            if relu and not (f >= zero or f != f):
                f = zero
            plane[uintp(q)] = f


@njit(cache=True, nogil=True, inline="always")
def _tap_products(mode, a, b, wt, wc, w0, geo, dims, cc):
    """Every (output pixel p, valid tap t reading input pixel q) pair of the conv of
    ``geo``/``dims``, as one loop over the ``cc`` channels of rows ``p``, ``q`` of
    channels-innermost buffers and row ``t`` of ``wt`` (``wc`` channels a row, these from
    channel ``w0``): mode 0 (forward) ``a[p] += wt[t] * b[q]``; mode 1 (adjoint, the input
    gradient) ``a[q] += wt[t] * b[p]``; mode 2 (weight gradient) ``wt[t] += a[p] * b[q]``.
    Pairs come in a fixed order (pixels row-major, then taps)."""
    kh, kw, s, pt, pl, dh, dw = geo
    _, _, h, wi, _, ho, wo = dims
    for oy in range(ho):
        for ox in range(wo):
            pb = uintp((oy * wo + ox) * cc)
            for i in range(kh):
                iy = oy * s - pt + i * dh
                if iy < 0 or iy >= h:
                    continue
                for j in range(kw):
                    ix = ox * s - pl + j * dw
                    if ix < 0 or ix >= wi:
                        continue
                    tb = uintp((i * kw + j) * wc + w0)
                    qb = uintp((iy * wi + ix) * cc)
                    if mode == 0:
                        for c in range(cc):
                            u = uintp(c)
                            a[pb + u] += wt[tb + u] * b[qb + u]
                    elif mode == 1:
                        for c in range(cc):
                            u = uintp(c)
                            a[qb + u] += wt[tb + u] * b[pb + u]
                    else:
                        for c in range(cc):
                            u = uintp(c)
                            wt[tb + u] += a[pb + u] * b[qb + u]


@njit(cache=True, nogil=True, inline="always")
def _tile(R, V, x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
          ys, tail):
    """simd.depthwise_tile(R, V) for R in (4, 1), V in 1-4, and (1, WIDE): Numba needs
    each intrinsic called by its name."""
    if V == WIDE:
        _T1W(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo, ys, tail)
    elif R == 4:
        if V == 4:
            _T44(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
                 ys, tail)
        elif V == 3:
            _T43(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
                 ys, tail)
        elif V == 2:
            _T42(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
                 ys, tail)
        else:
            _T41(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo,
                 ys, tail)
    elif V == 4:
        _T14(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo, ys,
             tail)
    elif V == 3:
        _T13(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo, ys,
             tail)
    elif V == 2:
        _T12(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo, ys,
             tail)
    else:
        _T11(x, xo, xs, ri, rj, kh, kw, w, wo, wi, wj, bias, bo, has_bias, y, yo, ys,
             tail)


@njit(cache=True, nogil=True, inline="always")
def _inside(p0, d, k, n):
    """``[t0, t1)``: the taps ``t < k`` whose positions ``p0 + t*d`` lie in ``[0, n)``.
    Undilated without a division: on small planes every pixel is by a border, and the
    two integer divisions of each border tile were much of its cost (672 channels at 4x4,
    5x5, batch 8, one thread: 111 -> 58 us in one pair of runs on a noisy host)."""
    if d == 1:
        return max(0, -p0), min(k, n - p0)
    return max(0, (d - 1 - p0) // d), min(k, (n - 1 - p0) // d + 1)


@njit(cache=True, nogil=True)
def tiled_taps(y, x, wt, wc, w0, bias, bias0, has_bias, geo, dims, n, c0, c1):
    """Channels ``[c0, c1)`` of sample ``n`` of the channels-last ``x`` (flat, ``dims`` as
    in depthwise_loops.py; weights ``(kh, kw, wc)``, channel ``c`` at ``w0 + c``;
    ``bias[bias0 + c]`` for channel ``c``)
    into ``y`` on the register tiles (simd.depthwise_tile), in blocks of up to WIDE vectors of
    channels: in each output row the pixels whose taps lie inside the input's columns 4 at
    a time (two tiles of up to HALF vectors), the pixels by the left and right borders one by
    one with their taps cut to those inside (one tile of WIDE vectors where the block is
    whole), and the rows by the top and bottom borders with their tap rows cut the same
    way. Every output takes the bias, then its taps inside the input in row-major order,
    as the loop kernels do.

    A border pixel's tile is short (a 3x3 kernel by a corner has 4 taps) and its sums are
    chains of dependent adds, so its cost is the chains' latency and the exits of its
    short tap loops. Against 4-vector blocks in the other loop order (rows outside),
    channels-last at batch 8, two threads, best of 5 alternating runs (2026-11-27): 576
    channels at 4x4 32 -> 22 us, 672 at 4x4 5x5 52 -> 32, 480 at 4x4 24 -> 19, 240 at
    8x8 5x5 73 -> 66, 960 at 2x2 13.7 -> 12.3."""
    kh, kw, s, pt, pl, dh, dw = geo
    _, c_, h, wi, _, ho, wo = dims
    lanes = simd.VECTOR_BYTES // y.itemsize
    # output columns whose taps all read inside the row
    xa = min(wo, (pl + s - 1) // s)
    xb = max(xa, min(wo, (wi - 1 - (kw - 1) * dw + pl) // s + 1))
    for cb in range(c0, c1, WIDE * lanes):
        # the block's channels as a whole WIDE-vector tile, or as up to two of <= HALF vectors
        whole = c1 - cb >= WIDE * lanes
        nv0 = min(HALF, (c1 - cb + lanes - 1) // lanes)
        tail0 = min(lanes, c1 - cb - (nv0 - 1) * lanes)
        cb1 = cb + HALF * lanes
        nv1 = min(HALF, (c1 - cb1 + lanes - 1) // lanes) if cb1 < c1 else 0
        tail1 = min(lanes, c1 - cb1 - (nv1 - 1) * lanes) if nv1 else 0
        for oy in range(ho):
            y0 = oy * s - pt
            i0, i1 = _inside(y0, dh, kh, h)
            yrow = (n * ho + oy) * wo
            ox = 0
            while ox < wo:
                r, j0, j1 = 1, 0, kw
                x0 = ox * s - pl
                if xa <= ox < xb:
                    r = 4 if xb - ox >= 4 else 1
                else:
                    j0, j1 = _inside(x0, dw, kw, wi)
                xo = ((n * h + y0 + i0 * dh) * wi + x0 + j0 * dw) * c_
                wo_ = (i0 * kw + j0) * wc + w0
                yo = (yrow + ox) * c_
                # a whole block's first half ends on a whole vector (tail0 == lanes)
                v0 = WIDE if r == 1 and whole else nv0
                _tile(r, v0, x, xo + cb, s * c_, dh * wi * c_, dw * c_, i1 - i0, j1 - j0,
                      wt, wo_ + cb, kw * wc, wc, bias, bias0 + cb, has_bias, y, yo + cb, c_,
                      tail0)
                if nv1 and v0 < WIDE:
                    _tile(r, nv1, x, xo + cb1, s * c_, dh * wi * c_, dw * c_, i1 - i0,
                          j1 - j0, wt, wo_ + cb1, kw * wc, wc, bias, bias0 + cb1, has_bias,
                          y, yo + cb1, c_, tail1)
                ox += r


def forward(x, w, y3, bias, has_bias, relu, geo, dims, res3, has_res, act, alpha, beta,
            consts, wt, ws, parts, per_sample, flip, adjoint):
    """``y = act(depthwise_conv(x, w) + bias + res)`` for ``groups == C == O``.

    ``x`` and ``w`` are flat; ``y3`` (and ``res3``) the output viewed as ``(N, C, Ho*Wo)``;
    ``wt`` (``kh*kw*C`` elements) receives the weights as ``(kh, kw, C)``, once for all
    samples; ``ws`` is ``(parts, forward_scratch(...))``; ``geo``/``dims`` as in
    depthwise_loops.py; every sample's channels are cut into ``per_sample`` ranges.
    ``flip`` reverses every kernel's taps: the input gradient of a stride-1 conv is this
    correlation of ``dy`` with the flipped kernels, padded by ``dilation*(k-1) - pad``.
    ``adjoint`` runs the transpose of the forward of ``geo``/``dims`` (the input gradient
    at any stride): ``x`` is then ``dy`` and ``y3`` is ``dx``, each output pixel's
    channels scattered back onto the input pixels its taps read.

    With ``per_sample == parts`` part ``t`` takes channels :func:`part_channels` of every
    sample, and transposes their weights itself; otherwise the weights are transposed in a
    loop of their own, and parts take whole units in order (sample-major)."""
    n_ = dims[0]
    c_ = dims[1]
    if per_sample == parts:
        for t in prange(parts):
            c0, c1 = part_channels(t, parts, c_)
            _weights(w, wt, geo, dims, c0, c1, flip)
            for n in range(n_):
                _unit(x, y3, bias, has_bias, relu, geo, dims, res3, has_res, act, alpha,
                      beta, consts, wt, ws[t], n, c0, c1, adjoint)
        return
    for t in prange(parts):
        _weights(w, wt, geo, dims, t * c_ // parts, (t + 1) * c_ // parts, flip)
    units = n_ * per_sample
    for t in prange(parts):
        for u in range(t * units // parts, (t + 1) * units // parts):
            n, c0, c1 = unit_channels(u, per_sample, c_)
            _unit(x, y3, bias, has_bias, relu, geo, dims, res3, has_res, act, alpha,
                  beta, consts, wt, ws[t], n, c0, c1, adjoint)


#: :func:`forward`'s serial and parallel versions (loops.pick chooses by multiply-adds): on
#: the 2x2 to 8x8 planes of shufflenet's NCHW depthwise convs (a few thousand multiply-adds)
#: the parallel loop's start cost more than the convolution, batch 2 (2026-11-29, AMD EPYC
#: with AVX-512): 48 channels at 4x4 6.9 -> 4.4 us, 96 at 2x2 6.5 -> 3.8, 576 at 2x2
#: 9.7 -> 8.4; 144 at 8x8 (166K multiply-adds) stays parallel (14.8 against 18.9)
FORWARD = loops(forward, nogil=True)


@njit(cache=True, nogil=True, inline="always")
def _used_taps(k, s, pad, dil, n_in, n_out):
    """``[t0, t1)``, the kernel taps along one axis that read inside the input for some
    output position (a superset where the stride skips over the input): tap ``t`` reads
    ``o*s - pad + t*dil`` for ``o`` in ``[0, n_out)``."""
    t0, t1 = k, 0
    for t in range(k):
        if t * dil - pad <= n_in - 1 and (n_out - 1) * s - pad + t * dil >= 0:
            t0, t1 = min(t0, t), t + 1
    return t0, max(t0, t1)


@njit(cache=True, nogil=True)
def _weights(w, wt, geo, dims, c0, c1, flip):
    """Channels ``[c0, c1)`` of the flat ``(C, taps)`` weights into the flat ``(taps, C)``
    ``wt`` (taps reversed: ``flip``), only the taps some output reads: on a small plane
    most of a large kernel's taps fall in the padding (ConvNeXt's 7x7 at 2x2 reads 9 of
    49, and moving the other 40 took most of its 125 us). Done once a call: moved for
    every sample instead, they took half of the forward of 960 channels at 2x2, batch 8."""
    kh, kw = geo[0], geo[1]
    c_, h, wi, ho, wo = dims[1], dims[2], dims[3], dims[5], dims[6]
    taps = kh * kw
    i0, i1 = _used_taps(kh, geo[2], geo[3], geo[5], h, ho)
    j0, j1 = _used_taps(kw, geo[2], geo[4], geo[6], wi, wo)
    for i in range(i0, i1):
        for j in range(j0, j1):
            d = i * kw + j  # the tap as the tiles read it
            src = taps - 1 - d if flip else d
            db = uintp(d * c_)
            for c in range(c0, c1):
                wt[db + uintp(c)] = w[uintp(c * taps + src)]


@njit(cache=True, nogil=True)
def _unit(x, y3, bias, has_bias, relu, geo, dims, res3, has_res, act, alpha, beta, consts,
          wt, scratch, n, c0, c1, adjoint):
    _, c_, h, wi, _, ho, wo = dims
    cc = c1 - c0
    hw = h * wi
    pw = ho * wo
    src, dst = (pw, hw) if adjoint else (hw, pw)  # plane sizes read and written
    xt = scratch[:src * cc]
    acc = scratch[src * cc:(src + dst) * cc]
    zero = scratch.dtype.type(0)
    planes_to_rows(x, xt, n * c_ + c0, cc, src)
    if not adjoint:  # the transposed planes are one channels-last sample of cc channels
        tiled_taps(acc, xt, wt, c_, c0, bias, c0, has_bias, geo,
                   (1, cc, dims[2], dims[3], cc, dims[5], dims[6]), 0, 0, cc)
    else:
        for p in range(dst):
            pb = uintp(p * cc)
            if has_bias:
                for c in range(cc):
                    acc[pb + uintp(c)] = bias[uintp(c0 + c)]
            else:
                for c in range(cc):
                    acc[pb + uintp(c)] = zero
        _tap_products(1, acc, xt, wt, c_, c0, geo, dims, cc)
    yb = y3[n]
    rows_to_planes(acc, yb, c0, cc, dst, relu)  # ReLU on the way
    if has_res or act:
        conv_epilogue(yb[c0:c1], yb[0, :0], False,
                      res3[n, c0:c1] if has_res else yb[c0:c1], has_res,
                      act, alpha, beta, consts)


@njit(cache=True, nogil=True, parallel=True)
def grad_weight(dy, x, dw, geo, dims, ws, parts, units):
    """``dw`` (flat ``(C, kh*kw)``) of the depthwise conv of ``geo``/``dims``: the channels
    are cut into ``units`` ranges, each summed over the whole batch by one thread (the
    sums' order is fixed: samples, then pixels and taps as :func:`_tap_products` takes
    them), its samples' input and output-gradient planes transposed into ``ws[t]``
    (``scratch_elements(c, ..., units)``)."""
    c_ = dims[1]
    for t in prange(parts):
        for u in range(t * units // parts, (t + 1) * units // parts):
            _weight_unit(dy, x, dw, geo, dims, ws[t], u * c_ // units, (u + 1) * c_ // units)


@njit(cache=True, nogil=True)
def _weight_unit(dy, x, dw, geo, dims, scratch, c0, c1):
    taps = geo[0] * geo[1]
    n_, c_, h, wi, _, ho, wo = dims
    cc = c1 - c0
    hw = h * wi
    pw = ho * wo
    acc = scratch[:taps * cc]
    xt = scratch[taps * cc:(taps + hw) * cc]
    gt = scratch[(taps + hw) * cc:(taps + hw + pw) * cc]
    acc[:] = 0
    for n in range(n_):
        planes_to_rows(x, xt, n * c_ + c0, cc, hw)
        planes_to_rows(dy, gt, n * c_ + c0, cc, pw)
        _tap_products(2, gt, xt, acc, cc, 0, geo, dims, cc)
    for c in range(cc):  # (taps, cc) -> (cc, taps)
        wb = uintp((c0 + c) * taps)
        for tp in range(taps):
            dw[wb + uintp(tp)] = acc[uintp(tp * cc + c)]


@njit(cache=True, nogil=True, parallel=True)
def transpose_channels(x, y, n_, c_, hw, to_last, parts):
    """NCHW ``(n_, c_, hw)`` -> NHWC ``(n_, hw, c_)`` (``to_last``) or back, on flat
    arrays, in the tiles of :func:`planes_to_rows`; the samples are split across the
    parts."""
    size = c_ * hw
    for t in prange(parts):
        for n in range(t * n_ // parts, (t + 1) * n_ // parts):
            if to_last:
                planes_to_rows(x, y[n * size:(n + 1) * size], n * c_, c_, hw)
            else:
                rows_to_planes(x[n * size:(n + 1) * size], y[n * size:(n + 1) * size]
                               .reshape(c_, hw), 0, c_, hw, False)


_T44, _T43, _T42, _T41, _T14, _T13, _T12, _T11 = (
    simd.depthwise_tile(r, v) for r in (4, 1) for v in (4, 3, 2, 1))
_T1W = simd.depthwise_tile(1, WIDE)

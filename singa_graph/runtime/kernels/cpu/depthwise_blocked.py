"""Depthwise convolution forward on channel blocks (runtime/kernels/cpu/depthwise.py).

The plane-by-plane loops of depthwise_loops.py vectorise along an output row, which is as
short as 2-8 elements in the last stages of mobile nets (a 5x5 kernel on a 2x2 plane
spent some 130 ns per plane in set-up, 0.15 ms per layer), and read every other element
at stride 2. Here the channels are interleaved, as in oneDNN's blocked layouts: a unit of
work is a block of ``CB`` channels (of one sample or of all), whose input planes are first
transposed into ``(s, H, ceil(W/s), CB)`` (planned workspace): the columns of each stride
phase together, so that the inputs of consecutive output pixels are contiguous at any
stride. A tap then adds into a whole output row, ``Wo*CB`` contiguous values, in one flat
loop that LLVM vectorises (with the tap's weights repeated along the row); taps that fall
into the padding are skipped by computing each tap's valid output range, so no padded
plane is built and tiny planes do only their real work. (Numba leaves LLVM's SLP
vectoriser off, so a ``CB``-wide operation per pixel stayed scalar; flat loops with
unsigned indices are what its loop vectoriser takes.)

Units are split into ``parts`` contiguous ranges, one per thread; every output element is
computed by one thread in a fixed order (bias, then the taps row by row), so results do
not depend on the thread count. The conv epilogue (residual add, activation) runs on each
unit's finished planes while they are in cache.
"""
from numba import njit, prange, uintp

from .conv_loops import _span

from .epilogue import conv_epilogue

CB = 16  # channels per block: one AVX-512 float32 vector


def scratch_elements(kh, kw, s, h, w, ho, wo) -> int:
    """Workspace elements of one part: the taps' weights and the bias repeated along an
    output row, the phase-split input block and the output block."""
    w2 = -(-w // s)
    return (kh * kw * wo + wo + s * h * w2 + ho * wo) * CB


@njit(cache=True, nogil=True, parallel=True)
def forward(x, w, y3, bias, has_bias, relu, geo, dims, res3, has_res, act, alpha, beta,
            consts, ws, parts):
    """``y = act(depthwise_conv(x, w) + bias + res)`` for ``groups == C == O``.

    ``x`` and ``w`` are flat; ``y3`` (and ``res3``) the output viewed as ``(N, C, Ho*Wo)``;
    ``ws`` is ``(parts, scratch_elements(...))``; ``geo``/``dims`` as in
    depthwise_loops.py."""
    kh, kw, s, pt, pl, dh, dw = geo
    n_, c_, h, wi, _, ho, wo = dims
    taps = kh * kw
    row = wo * CB
    w2 = (wi + s - 1) // s
    nb = (c_ + CB - 1) // CB
    # a unit is a block of channels for every sample (its weights laid out once), or,
    # with fewer blocks than parts, a block of one sample
    per_n = nb < parts
    units = nb * n_ if per_n else nb
    for t in prange(parts):
        wr = ws[t, :taps * row]
        br = ws[t, taps * row:(taps + 1) * row]
        xt = ws[t, (taps + 1) * row:(taps + 1) * row + s * h * w2 * CB]
        acc = ws[t, (taps + 1) * row + s * h * w2 * CB:
                 (taps + 1 + ho) * row + s * h * w2 * CB]
        zero = ws.dtype.type(0)
        for u in range(t * units // parts, (t + 1) * units // parts):
            b = u // n_ if per_n else u
            c0 = b * CB
            nc = min(CB, c_ - c0)
            for c in range(CB):
                br[c] = bias[c0 + c] if has_bias and c < nc else zero
            for tp in range(taps):
                for c in range(CB):
                    wr[uintp(tp * row + c)] = w[uintp((c0 + c) * taps + tp)] if c < nc \
                        else zero
            _repeat(wr, br, taps, wo)
            for n in range(u % n_ if per_n else 0, u % n_ + 1 if per_n else n_):
                _unit(x, y3, res3, has_res, act, alpha, beta, consts, relu, wr, br, xt, acc,
                      n, c0, nc, c_, h, wi, w2, ho, wo, kh, kw, s, pt, pl, dh, dw)


@njit(cache=True, nogil=True)
def _repeat(wr, br, taps, wo):
    """Repeat each tap's ``CB`` weights (and the bias) along the ``wo`` pixels of a row."""
    row = wo * CB
    for tp in range(taps):
        b = uintp(tp * row)
        for q in range(CB, row):
            wr[b + uintp(q)] = wr[b + uintp(q - CB)]
    for q in range(CB, row):
        br[uintp(q)] = br[uintp(q - CB)]


@njit(cache=True, nogil=True)
def _unit(x, y3, res3, has_res, act, alpha, beta, consts, relu, wr, br, xt, acc, n, c0,
          nc, c_, h, wi, w2, ho, wo, kh, kw, s, pt, pl, dh, dw):
    """Channels ``[c0, c0 + nc)`` of sample ``n``: transpose the input planes, every
    output row, then the epilogue."""
    hw = h * wi
    row = wo * CB
    zero = xt.dtype.type(0)
    for c in range(nc):
        src = uintp((n * c_ + c0 + c) * hw)
        for ph in range(s):
            for iy in range(h):
                d = uintp(((ph * h + iy) * w2) * CB + c)
                sb = src + uintp(iy * wi + ph)
                for k in range((wi - ph + s - 1) // s):
                    xt[d + uintp(k * CB)] = x[sb + uintp(k * s)]
    if nc < CB:
        for d in range(s * h * w2):
            for c in range(nc, CB):
                xt[uintp(d * CB + c)] = zero
    yb = y3[n]
    for oy in range(ho):  # the bias along every output row
        ab = uintp(oy * row)
        for q in range(row):
            acc[ab + uintp(q)] = br[uintp(q)]
    for j in range(kw):  # taps by column: each column's span and phase computed once
        off = j * dw - pl
        a, e = _span(off, s, wi, wo)
        if e <= a:
            continue
        ph = off % s
        # input of output pixel ox: phase ph, column ox + (off - ph) // s (negative for a
        # left-padded tap: the unsigned sum below wraps back for every q >= a * CB)
        col = ((off - ph) // s) * CB
        for i in range(kh):
            ya, yb_ = _span(i * dh - pt, s, h, ho)
            wb = uintp((i * kw + j) * row)
            for oy in range(ya, yb_):
                iy = oy * s - pt + i * dh
                xb = uintp(((ph * h + iy) * w2) * CB + col)
                ab = uintp(oy * row)
                for q in range(a * CB, e * CB):
                    u = uintp(q)
                    acc[ab + u] += wr[wb + u] * xt[xb + u]
    for c in range(nc):
        dst = yb[c0 + c]
        for p in range(ho * wo):
            f = acc[uintp(p * CB + c)]
            if relu and not (f >= zero or f != f):
                f = zero
            dst[uintp(p)] = f
    if has_res or act:
        conv_epilogue(yb[c0:c0 + nc], yb[0, :0], False,
                      res3[n, c0:c0 + nc] if has_res else yb[c0:c0 + nc], has_res,
                      act, alpha, beta, consts)

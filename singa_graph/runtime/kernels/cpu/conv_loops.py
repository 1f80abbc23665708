"""Numba loops of the convolution kernels (runtime/kernels/cpu/conv.py): im2col, col2im and
the batch-parallel drivers.

Every driver is one ``prange`` over ``parts`` parts of the batch (the thread policy's
thread count): a part runs on one thread of Numba's pool, over its own samples, in its own
slice of workspace, and calls single-threaded BLAS (:func:`.blas.gemm`) on it. So both cores
do GEMM and the process has one thread pool, whose threads wait for the next kernel by
spinning briefly (a few microseconds to wake, where a sleeping thread took 40-80).

``geo`` is ``(kh, kw, sh, sw, pt, pl, dh, dw)``. im2col writes the ``(C*kh*kw, Ho*Wo)``
columns of one sample, row ``(c*kh + i)*kw + j`` holding tap ``(i, j)`` of channel ``c``.
The rows' valid output columns are computed, not tested per element, so the copies are
plain (stride-1 or strided) loops that LLVM vectorises, and the padding is never
materialised.
"""
import numpy as np
from llvmlite import ir
from numba import int64, njit, prange, types, uint32, uint64, uintp
from numba.extending import intrinsic

from .blas import gemm, gemm_columns
from .epilogue import conv_epilogue


#: output columns from which a stride-2 float32 im2col copies its rows from 64-bit pairs
#: (one thread, per sample, 2026-11-27): 16 columns 26.9 -> 16.8 us (16 channels at
#: 32x32), a 7x7 stem's 32 columns 68.8 -> 44.6; 8 columns element by element 15.6 us,
#: from pairs 17.7 (32 channels at 16x16)
PAIRS_MIN_ROW = 12


@intrinsic
def _f32_bits(typingctx, u):
    """The float32 whose bits are the uint32 ``u``."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _copy_every_other(cols, r, d, pairs, e0, n):
    """``cols[r, d + k] = plane[e0 + 2k]`` for ``k < n``, the float32 plane read as the
    64-bit pairs ``pairs`` (element ``e`` is half ``e & 1`` of pair ``e >> 1``, the even
    one the low half): one shift or mask per element, in vectors. Read one element in
    two, the copy ran scalar (a stride-2 im2col at 0.55-1.0 ns an element against 0.16
    at stride 1). The caller keeps ``(e0 + 2*(n-1)) >> 1`` inside ``pairs``."""
    q0 = uintp(e0 >> 1)
    ud = uintp(d)
    if e0 & 1:
        sh = uint64(32)
        for k in range(n):
            u = uintp(k)
            cols[r, ud + u] = _f32_bits(uint32(pairs[q0 + u] >> sh))
    else:
        lo = uint64(0xFFFFFFFF)
        for k in range(n):
            u = uintp(k)
            cols[r, ud + u] = _f32_bits(uint32(pairs[q0 + u] & lo))


@njit(cache=True, nogil=True)
def _span(off, s, n_in, n_out):
    """Output positions ``[a, b)`` whose input ``o*s + off`` lies in ``[0, n_in)``."""
    a = max(0, -(off // s))
    b = min(n_out, (n_in - 1 - off) // s + 1) if n_in - 1 - off >= 0 else 0
    return a, max(a, b)


@njit(cache=True, nogil=True)
def im2col(x, x3, n, cols, geo, ho, wo):
    """``cols = im2col(x[n])`` (``x3``: ``x`` viewed as ``(N, C, H*W)``).

    Indices are cast to unsigned: Numba then drops its negative-index wrap-around selects,
    and LLVM vectorises the row copies (2.5-3x faster than signed indices; a slice per row,
    a view object each, was slower still for these short rows)."""
    kh, kw, sh, sw, pt, pl, dh, dw = geo
    if sh == 1 and sw == 1 and wo == x.shape[3]:
        _im2col_shifted(x3, n, cols, geo, ho, wo)
        return
    if sw == 2 and wo >= PAIRS_MIN_ROW and x.itemsize == 4 and cols.itemsize == 4:
        _im2col_pairs(x, x3, n, cols, geo, ho, wo)
        return
    c_, h, w = x.shape[1], x.shape[2], x.shape[3]
    zero = cols.dtype.type(0)
    un = uintp(n)
    for c in range(c_):
        uc = uintp(c)
        for i in range(kh):
            for j in range(kw):
                r = uintp((c * kh + i) * kw + j)
                off = j * dw - pl
                a, b = _span(off, sw, w, wo)
                for oy in range(ho):
                    iy = oy * sh - pt + i * dh
                    d = uintp(oy * wo)
                    if iy < 0 or iy >= h:
                        for ox in range(wo):
                            cols[r, d + uintp(ox)] = zero
                        continue
                    uy = uintp(iy)
                    for ox in range(a):
                        cols[r, d + uintp(ox)] = zero
                    for ox in range(a, b):
                        cols[r, d + uintp(ox)] = x[un, uc, uy, uintp(ox * sw + off)]
                    for ox in range(b, wo):
                        cols[r, d + uintp(ox)] = zero


@njit(cache=True, nogil=True)
def _im2col_pairs(x, x3, n, cols, geo, ho, wo):
    """im2col of a float32 ``x`` at column stride 2: :func:`im2col`'s loop, each row's
    valid columns copied from ``x`` read as 64-bit pairs (:func:`_copy_every_other`)."""
    kh, kw, sh, sw, pt, pl, dh, dw = geo
    c_, h, w = x.shape[1], x.shape[2], x.shape[3]
    zero = cols.dtype.type(0)
    hw = h * w
    flat = x3.reshape(-1)
    pairs = flat[:flat.shape[0] - flat.shape[0] % 2].view(np.uint64)
    for c in range(c_):
        pb = (n * c_ + c) * hw  # the plane's first element in x
        for i in range(kh):
            for j in range(kw):
                r = uintp((c * kh + i) * kw + j)
                off = j * dw - pl
                a, b = _span(off, sw, w, wo)
                for oy in range(ho):
                    iy = oy * sh - pt + i * dh
                    d = uintp(oy * wo)
                    if iy < 0 or iy >= h:
                        for ox in range(wo):
                            cols[r, d + uintp(ox)] = zero
                        continue
                    for ox in range(a):
                        cols[r, d + uintp(ox)] = zero
                    if b > a:
                        e0 = pb + iy * w + a * 2 + off
                        n2 = b - a
                        if (e0 + 2 * (n2 - 1)) >> 1 >= pairs.shape[0]:
                            n2 -= 1  # x's odd last element, beyond the last pair
                            cols[r, d + uintp(b - 1)] = flat[uintp(e0 + 2 * n2)]
                        _copy_every_other(cols, r, d + a, pairs, e0, n2)
                    for ox in range(b, wo):
                        cols[r, d + uintp(ox)] = zero


@njit(cache=True, nogil=True)
def _im2col_shifted(x3, n, cols, geo, ho, wo):
    """im2col for stride 1 and an output as wide as the input: a tap's row is then the
    sample's channel plane shifted by a constant, so each row is one long contiguous copy
    (its first and last elements are valid taps, so it never reads outside ``x[n, c]``),
    followed by zeroing the columns that wrapped around into the neighbouring image row.
    Measured 1.7-2x faster than the row-by-row loop for 8x8 to 32x32 planes."""
    kh, kw, sh, sw, pt, pl, dh, dw = geo
    c_, w = x3.shape[1], wo  # as wide as the input
    h = x3.shape[2] // w
    size = ho * wo
    zero = cols.dtype.type(0)
    un = uintp(n)
    for c in range(c_):
        plane = x3[un, uintp(c)]
        for i in range(kh):
            ya, yb = _span(i * dh - pt, 1, h, ho)
            for j in range(kw):
                r = uintp((c * kh + i) * kw + j)
                off = j * dw - pl
                a, b = _span(off, 1, w, wo)
                p0, p1 = ya * wo + a, (yb - 1) * wo + b
                if yb <= ya or b <= a:
                    p0 = p1 = size
                for p in range(p0):
                    cols[r, uintp(p)] = zero
                shift = (i * dh - pt) * w + off  # p + shift >= 0 for p in [p0, p1)
                for p in range(p0, p1):
                    cols[r, uintp(p)] = plane[uintp(p + shift)]
                for p in range(p1, size):
                    cols[r, uintp(p)] = zero
                if p0 < p1 and (a > 0 or b < wo):
                    for oy in range(ya, yb):
                        d = oy * wo
                        for ox in range(a):
                            cols[r, uintp(d + ox)] = zero
                        for ox in range(b, wo):
                            cols[r, uintp(d + ox)] = zero


@njit(cache=True, nogil=True)
def col2im(cols, dx, n, geo, ho, wo):
    """``dx[n] = col2im(cols)``: the columns added back onto the input (im2col's adjoint)."""
    kh, kw, sh, sw, pt, pl, dh, dw = geo
    c_, h, w = dx.shape[1], dx.shape[2], dx.shape[3]
    zero = dx.dtype.type(0)
    un = uintp(n)
    for c in range(c_):
        uc = uintp(c)
        for iy in range(h):
            for ix in range(w):
                dx[un, uc, uintp(iy), uintp(ix)] = zero
        for i in range(kh):
            for j in range(kw):
                r = uintp((c * kh + i) * kw + j)
                off = j * dw - pl
                a, b = _span(off, sw, w, wo)
                for oy in range(ho):
                    iy = oy * sh - pt + i * dh
                    if iy < 0 or iy >= h:
                        continue
                    uy, d = uintp(iy), uintp(oy * wo)
                    for ox in range(a, b):
                        dx[un, uc, uy, uintp(ox * sw + off)] += cols[r, d + uintp(ox)]


@njit(cache=True, nogil=True, parallel=True)
def forward(x, x3, w3, y3, cols, bias, geo, ho, wo, has_bias, res3, has_res, act, alpha,
            beta, consts, pointwise, parts, bl):
    """``y = act(conv(x, w) (+ bias) (+ res))``: per sample, im2col then one GEMM per group,
    then the fused epilogue (:func:`.epilogue.conv_epilogue`) on the sample's output.

    ``w3`` is ``(G, Og, K)``, ``y3`` the output as ``(N, O, L)``, ``res3`` the residual
    likewise, ``cols`` ``(parts, C*kh*kw, L)``; a pointwise conv (1x1, stride 1, unpadded)
    multiplies ``x3``, ``x`` as ``(N, C, H*W)``, itself."""
    n_, g_, og, k = x.shape[0], w3.shape[0], w3.shape[1], w3.shape[2]
    for t in prange(parts):
        col = cols[t]
        for n in range(t * n_ // parts, (t + 1) * n_ // parts):
            if pointwise:
                src = x3[n]
            else:
                im2col(x, x3, n, col, geo, ho, wo)
                src = col
            for g in range(g_):
                gemm_columns(w3[g], src[g * k:(g + 1) * k], y3[n, g * og:(g + 1) * og], 0.0,
                             bl)
            conv_epilogue(y3[n], bias, has_bias, res3[n] if has_res else y3[n], has_res, act,
                          alpha, beta, consts)


@njit(cache=True, nogil=True, parallel=True)
def grad_input(dy3, w3, dx, dx3, cols, geo, ho, wo, pointwise, parts, bl):
    """``dx = conv_transpose(dy, w)``: per sample, one GEMM per group into the columns,
    then col2im (a pointwise conv writes ``dx`` directly)."""
    n_, g_, og, k = dx.shape[0], w3.shape[0], w3.shape[1], w3.shape[2]
    for t in prange(parts):
        col = cols[t]
        for n in range(t * n_ // parts, (t + 1) * n_ // parts):
            dst = dx3[n] if pointwise else col
            for g in range(g_):
                gemm_columns(w3[g].T, dy3[n, g * og:(g + 1) * og], dst[g * k:(g + 1) * k],
                             0.0, bl)
            if not pointwise:
                col2im(col, dx, n, geo, ho, wo)


@njit(cache=True, nogil=True, parallel=True)
def grad_weight(dy3, x, x3, dw3, cols, acc, geo, ho, wo, pointwise, parts, bl):
    """``dW = sum_n dy[n] @ im2col(x[n])^T``, computed transposed (``dW^T += cols @
    dy[n]^T``, the faster orientation of these thin products, 10-30% measured) into one
    ``(G, K, Og)`` partial sum per part (``acc``), which are added up at the end."""
    n_, g_, og, k = x.shape[0], dw3.shape[0], dw3.shape[1], dw3.shape[2]
    for t in prange(parts):
        col, a = cols[t], acc[t]
        lo, hi = t * n_ // parts, (t + 1) * n_ // parts
        if hi == lo:
            a[:] = 0
        for n in range(lo, hi):
            if pointwise:
                src = x3[n]
            else:
                im2col(x, x3, n, col, geo, ho, wo)
                src = col
            beta = 0.0 if n == lo else 1.0
            for g in range(g_):
                gemm(src[g * k:(g + 1) * k], dy3[n, g * og:(g + 1) * og].T, a[g], beta, bl)
    sum_parts(acc, dw3)


@njit(cache=True, nogil=True)
def sum_parts(acc, dw3):
    """``dw3[g, o, i]`` = the sum over the parts ``t`` of ``acc[t, g, i, o]``, in part
    order: the ``(G, K, Og)`` partial ``dW^T`` of each part of a weight gradient."""
    parts, g_, k, og = acc.shape
    for g in range(g_):
        for o in range(og):
            for i in range(k):
                s = acc[0, g, i, o]
                for t in range(1, parts):
                    s += acc[t, g, i, o]
                dw3[g, o, i] = s



@njit(cache=True, nogil=True)
def _stack_columns(x, x3, cols, n, geo, ho, wo, pointwise):
    """Sample ``n``'s columns (its im2col, or the input itself when pointwise) into its
    block of the side-by-side ``cols`` ``(C*kh*kw, N*L)``."""
    ln = ho * wo
    dst = cols[:, n * ln:(n + 1) * ln]
    if pointwise:
        dst[:, :] = x3[n]
    else:
        im2col(x, x3, n, dst, geo, ho, wo)


@njit(cache=True, nogil=True, parallel=True)
def grad_weight_stacked(dy3, x, x3, dw3, cols, dys, geo, ho, wo, pointwise, parts, bl):
    """``dW = dY @ im2col(X)^T`` with the batch side by side: for tiny output planes
    (ResNet's 2x2 and 4x4 at batch 2) the per-sample products have an inner dimension of
    4-16, so :func:`grad_weight`'s per-part partial ``dW`` (as large as the weights) and
    their sum cost more than the products. Here the samples' columns and output gradients
    are laid side by side in ``cols`` ``(C*kh*kw, N*L)`` and ``dys`` ``(O, N*L)``, and
    each part computes its block of ``dW``'s rows in one GEMM of inner dimension ``N*L``."""
    n_, g_, og, k = x.shape[0], dw3.shape[0], dw3.shape[1], dw3.shape[2]
    ln = ho * wo
    for n in prange(n_):
        _stack_columns(x, x3, cols, int64(n), geo, ho, wo, pointwise)
        dys[:, n * ln:(n + 1) * ln] = dy3[n]
    for t in prange(parts):
        o0, o1 = t * og // parts, (t + 1) * og // parts
        for g in range(g_):
            gemm(dys[g * og + o0:g * og + o1], cols[g * k:(g + 1) * k].T, dw3[g, o0:o1], 0.0,
                 bl)


@njit(cache=True, nogil=True, parallel=True)
def forward_stacked(x, x3, w3, y3, cols, ys, bias, geo, ho, wo, has_bias, res3, has_res,
                    act, alpha, beta, consts, pointwise, parts, bl):
    """:func:`forward` with the batch side by side (see :func:`grad_weight_stacked`): one
    GEMM per part over a block of output channels, ``ys = w @ cols`` with ``cols``
    ``(C*kh*kw, N*L)`` and ``ys`` ``(O, N*L)``, so the weights are packed once per step
    instead of once per sample; then each sample's output is copied out and finished by
    the epilogue."""
    n_, g_, og, k = x.shape[0], w3.shape[0], w3.shape[1], w3.shape[2]
    ln = ho * wo
    for n in prange(n_):
        _stack_columns(x, x3, cols, int64(n), geo, ho, wo, pointwise)
    for t in prange(parts):
        o0, o1 = t * og // parts, (t + 1) * og // parts
        for g in range(g_):
            gemm_columns(w3[g, o0:o1], cols[g * k:(g + 1) * k], ys[g * og + o0:g * og + o1],
                         0.0, bl)
    for n in prange(n_):
        y3[n] = ys[:, n * ln:(n + 1) * ln]
        conv_epilogue(y3[n], bias, has_bias, res3[n] if has_res else y3[n], has_res, act,
                      alpha, beta, consts)

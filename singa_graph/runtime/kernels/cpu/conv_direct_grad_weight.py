"""The weight gradient of strided convolutions on conv_direct.py's register tiles.

``dW = sum over samples n of dY[n] @ im2col(x[n])^T``. conv_loops.grad_weight builds each
sample's im2col columns and multiplies them on BLAS; at stride 2 the columns gather every
other input pixel, which its scalar loop copies at about 20 GB/s: a third of the time of
ResNet's strided weight gradients. Here the tiles read the taps from the sample's padded
planes where they are. A tile's rows are taps ``k = (c, i, j)`` (each an offset into the
planes), its vectors are output channels, and its terms are the output pixels::

    dW^T[k, o] = sum over oy, ox of  xp[c, oy*sh + i*dh, ox*sw + j*dw] * dY[n]^T[oy*wo + ox, o]

So a sample needs its planes padded (conv_direct.pad_planes) and its output gradient
turned to pixels x channels (planes_to_rows), both in its part's workspace and both small
enough to stay in cache while every tile passes over them. Parts split the batch as
conv_loops.grad_weight's do, each summing its samples' products into its own ``(K, O)``
partial; the partials are added in part order at the end.

Every partial is one chain of fused multiply-adds per sample, over its output pixels in
row-major order, and the samples add in order: the result depends on the thread count
(through the parts, as the GEMM path's does) and on nothing else, so graph and eager runs,
which choose by shapes alone (:func:`chosen`), agree bit for bit.
"""
import numpy as np
from numba import njit, prange

from ....ops._util import tiled
from ....runtime import threads
from ...registry import carve, carved_bytes
from . import simd
from .conv_direct import _geometry as conv_direct_geometry, columns_in_place, pad_planes
from .conv_loops import sum_parts
from .depthwise_channels_last import planes_to_rows
from .loops import bound, flat_view, loops


def chosen(op, x_shape, w_shape, dtype) -> bool:
    """Whether the weight gradient of the plain conv ``op`` runs here: a float32 2-d conv
    of one group with a stride and a window larger than 1x1 (a strided 1x1 conv's
    "columns" are the input's pixels, which the GEMM path reads with no gather worth
    avoiding)."""
    return (len(x_shape) == 4 and len(w_shape) == 4 and op.groups == 1 and tiled(dtype)
            and max(op.stride) > 1 and w_shape[2] * w_shape[3] > 1)


def _padded(geo, x_shape) -> bool:
    _, _, _, _, pt, pl, _, _, hp, wp = geo
    return pt > 0 or pl > 0 or hp > x_shape[2] or wp > x_shape[3]


def _geometry(op, x_shape, w_shape, y_shape):
    """``(kh, kw, sh, sw, pt, pl, dh, dw, hp, wp)``: the window, the padded planes
    (conv_direct's, which reads the window from a blocked weight's axes 1 and 2: an OIHW
    weight's ``(C, kh, kw)``)."""
    return conv_direct_geometry(op, x_shape, w_shape[1:], y_shape)


#: taps (rows of ``dW^T``) a sample's tiles compute before adding them to the part's sum:
#: the sums of one such block of rows are all the scratch a sample needs beyond the part's
#: own ``(K, O)`` partial (ResNet-18's 128 -> 256 3x3: 1152 taps)
TAP_BLOCK = 128


def _specs(op, x_shape, w_shape, y_shape, dtype):
    """``(parts, specs)``: the parts, and each part's padded planes, transposed output
    gradient, partial ``dW^T``, one block of a sample's ``dW^T`` rows and tap offsets."""
    n, c = x_shape[0], x_shape[1]
    o, k, p = w_shape[0], w_shape[1] * w_shape[2] * w_shape[3], y_shape[2] * y_shape[3]
    geo = _geometry(op, x_shape, w_shape, y_shape)
    parts = max(1, min(threads.num_threads(), n))
    planes = geo[8] * geo[9] if _padded(geo, x_shape) else 0
    return parts, (((parts, c, planes), dtype), ((parts, p * o), dtype),
                   ((parts, k, o), dtype), ((parts, min(k, TAP_BLOCK), o), dtype),
                   ((parts, k), np.int64))


def workspace(op, ins, outs):
    dy, x = ins
    return carved_bytes(*_specs(op, x.shape, outs[0].shape, dy.shape, outs[0].dtype)[1])


@njit(cache=True, nogil=True, error_model="numpy")
def _prepare(x, n, dyf, xp, dyt, offs, geo, padded, o_, p_):
    """Sample ``n``'s padded planes (or none, where the input's own serve), its taps'
    offsets into them and its output gradient as ``(pixels, O)``, in the part's scratch;
    returns the flat planes the offsets point into."""
    kh, kw, sh, sw, pt, pl, dh, dw, hp, wp = geo
    c_ = x.shape[1]
    cs = hp * wp
    if padded:
        pad_planes(x, n, xp, pt, pl, hp, wp)
        flat, first = xp.reshape(-1), 0
    else:
        flat, first = x.reshape(-1), n * c_ * cs
    for c in range(c_):
        for i in range(kh):
            for j in range(kw):
                offs[(c * kh + i) * kw + j] = first + c * cs + i * dh * wp + j * dw
    planes_to_rows(dyf, dyt, n * o_, o_, p_)
    return flat


@njit(cache=True, nogil=True, error_model="numpy")
def _taps(flat, offs, r0, r1, dyt, e, geo, ho, wo, lanes):
    """``e`` = rows ``[r0, r1)`` of the sample's ``dW^T``. The tile's terms: its ``i`` runs
    over the output rows (``ri``: ``sh`` input rows), its ``c`` over a row's pixels
    (``rc``: ``sw`` columns), and ``dY^T``'s rows follow in that order (``wr``: O)."""
    _, _, sh, sw, _, _, _, _, _, wp = geo
    o_ = e.shape[1]
    columns_in_place(flat, offs[r0:], r1 - r0, dyt, lanes, o_, lanes, e.reshape(-1), o_, 0,
                     wo, ho, 1, sh * wp, 0, sw, 0, o_, lanes, o_, 0, 0)


def grad_weight(dyf, x, dw2, xp, dyt, acc, e, offs, geo, padded, ho, wo, parts, lanes):
    """``dw2 = dW`` ``(O, K)``: part ``t`` sums its range of samples into ``acc[t]``
    ``(K, O)``, a block of :data:`TAP_BLOCK` rows at a time, then the parts' sums add up
    in order."""
    n_ = x.shape[0]
    k_, o_ = acc.shape[1], acc.shape[2]
    block = e.shape[1]
    for t in prange(parts):
        lo, hi = t * n_ // parts, (t + 1) * n_ // parts
        a = acc[t]
        if hi == lo:
            a[:] = 0
        for n in range(lo, hi):
            flat = _prepare(x, n, dyf, xp[t], dyt[t], offs[t], geo, padded, o_, ho * wo)
            for r0 in range(0, k_, block):
                r1 = min(r0 + block, k_)
                if n == lo:  # the part's first sample: its sums are the partial's start
                    _taps(flat, offs[t], r0, r1, dyt[t], a[r0:r1], geo, ho, wo, lanes)
                    continue
                b = e[t, :r1 - r0]
                _taps(flat, offs[t], r0, r1, dyt[t], b, geo, ho, wo, lanes)
                for q in range(r1 - r0):
                    for o in range(o_):
                        a[r0 + q, o] += b[q, o]
    sum_parts(acc.reshape(parts, 1, k_, o_), dw2.reshape(1, o_, k_))


GRAD_WEIGHT = loops(grad_weight, error_model="numpy")


def grad_weight_step(op, ins, outs, ws):
    """The step of a Conv2dGradWeight that :func:`chosen` gives these tiles."""
    dy, x = ins
    (dw,) = outs
    parts, specs = _specs(op, x.shape, dw.shape, dy.shape, dw.dtype)
    xp, dyt, acc, e, offs = carve(ws, *specs)
    geo = _geometry(op, x.shape, dw.shape, dy.shape)
    dw2 = flat_view(dw).reshape(dw.shape[0], -1)
    return bound(GRAD_WEIGHT[parts > 1], flat_view(dy), x, dw2, xp, dyt, acc, e, offs, geo,
                 _padded(geo, x.shape), dy.shape[2], dy.shape[3], parts,
                 simd.lanes(dw.dtype))

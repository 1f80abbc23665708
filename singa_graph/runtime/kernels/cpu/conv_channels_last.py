"""Convolutions on channels-last activations (``Conv2dNHWC``, made by passes/layout.py).

A mobile net's inference time goes to its pointwise convs and its depthwise convs, and in
NCHW both pay for the layout: a pointwise conv is one GEMM per sample over a short,
wide ``(C x H*W)`` operand, and a depthwise conv that runs channels innermost
(depthwise_channels_last.py) transposes its input and output. With the activations
channels-last, a pointwise conv is ``(N*H*W x C) @ (C x O)``: one product for the whole
batch. Over at most :data:`TILE_ROWS` pixels it runs on the register tiles of
matmul_direct.py, reading the weight in place; over more it is cut into blocks of rows
(one range of them per thread, each range in blocks small enough for OpenBLAS's
small-matrix kernels, :data:`blas.SMALL_PRODUCT`). Each block is finished by the conv
epilogue while it is in cache. Over few rows (``weight_layout``
"OIHW") the weight's rows multiply the pixels: with many channels as dot products on the
pixels as they are (pointwise.py transposes them first), with few as the NCHW kernel's
product. A depthwise conv runs on register tiles (simd.depthwise_tile): 4 output pixels
by up to 64 channels, their sums in registers over all taps, each tap's input pixels read
as runs of channels in place, with no scratch at all; pixels by the borders take only
their taps inside the input. The loop that added every tap into the output rows in memory
ran 2-2.8x slower on one thread (48 channels at 16x16, batch 2: 31 -> 13 us; 96 at 32x32,
stride 2: 54 -> 26) and 1.2-2.1x on two. (A variant that added each tap to a whole output
row in one flat loop, its weights repeated along the row in workspace, was not kept
either: slower than that loop everywhere but 32 channels at 32x32.)

Every output element is computed by one thread in an order fixed by the shapes, so
results do not depend on the thread count. They differ in the last bits from the NCHW
kernels' (another GEMM blocking); the depthwise sums are the NCHW channels-innermost
kernel's, in the same order.
"""
from numba import njit, prange, uintp

from ....runtime import threads
from ....ops.conv_tiles import pointwise_nhwc
from ...registry import carve, carved_bytes, kernel
from . import blas, matmul_direct, simd
from .depthwise_channels_last import tiled_taps, unit_channels, units_of
from .dots import FAST, block_of, products
from .epilogue import epilogue_args, rows_epilogue, rows_range_epilogue
from .loops import bound, loops
from .pointwise import MIN_CHANNELS


def _rows_block(c, o) -> int:
    """Rows of one GEMM block: a ``rows x C x O`` product small enough for OpenBLAS's
    small-matrix kernels, in whole multiples of 16, at least 16."""
    return max(16, blas.SMALL_PRODUCT // max(c * o, 1) // 16 * 16)


def pointwise_gemm(x2, wt, y2, bias, has_bias, res2, has_res, act, alpha, beta, consts,
                   parts, block, bl):
    """``y2 = act(x2 @ wt + bias + res2)``: ``x2`` the ``(P, C)`` pixels, ``wt`` the
    ``(C, O)`` transposed view of the weight, ``y2``/``res2`` ``(P, O)``; part ``t`` takes
    its range of rows in blocks of ``block``."""
    p_ = x2.shape[0]
    for t in prange(parts):
        r1 = (t + 1) * p_ // parts
        for b0 in range(t * p_ // parts, r1, block):
            b1 = min(b0 + block, r1)
            blas.gemm(x2[b0:b1], wt, y2[b0:b1], 0.0, bl)
            rows_epilogue(y2[b0:b1], bias, has_bias, res2[b0:b1], has_res, act, alpha, beta,
                          consts)


def pointwise_dots(x, w, y2, bias, has_bias, res2, has_res, act, alpha, beta, consts, parts):
    """The same over few rows: each weight row read once for every row of ``x`` (flat
    ``(P, C)``), as dot products (dots.py), output channels split across the parts."""
    p_, o_ = y2.shape
    y3 = y2.reshape(p_, o_, 1)
    for t in prange(parts):
        o0, o1 = block_of(t, parts, o_)
        products(w, x, y3, o0, o1, w.shape[0] // o_)
    for t in prange(parts):
        r0, r1 = t * p_ // parts, (t + 1) * p_ // parts
        rows_epilogue(y2[r0:r1], bias, has_bias, res2[r0:r1], has_res, act, alpha, beta,
                      consts)


def pointwise_columns(x2, w2, cols, yt, y2, bias, has_bias, res2, has_res, act, alpha, beta, consts,
                      parts, bl):
    """The same over few rows with fewer channels (short dot products): ``yt = w2 @
    x2^T``, the NCHW kernel's product ``(O x C) @ (C x P)`` into the ``(O, P)``
    workspace ``yt``, its output channels split across the parts, then ``y2 = yt^T`` with
    the epilogue; ``cols`` holds the pixels transposed, ``(C, P)``."""
    o_, p_ = yt.shape
    xt = cols[:x2.size].reshape(x2.shape[1], p_)
    for c in range(x2.shape[1]):  # a few KiB: BLAS ran slower on the transposed view
        for p in range(p_):
            xt[c, p] = x2[p, c]
    for t in prange(parts):
        o0, o1 = t * o_ // parts, (t + 1) * o_ // parts
        blas.gemm(w2[o0:o1], xt, yt[o0:o1], 0.0, bl)
    for t in prange(parts):
        r0, r1 = t * p_ // parts, (t + 1) * p_ // parts
        for p in range(r0, r1):
            for o in range(o_):
                y2[p, o] = yt[o, p]
        rows_epilogue(y2[r0:r1], bias, has_bias, res2[r0:r1], has_res, act, alpha, beta,
                      consts)


def depthwise(x, wt, y, y2, bias, has_bias, res2, has_res, act, alpha, beta, consts, geo,
              dims, parts, per_sample):
    """``y = act(depthwise_conv(x, w) + bias + res)`` on flat NHWC ``x`` and ``y`` (``y2``
    its ``(N*Ho*Wo, C)`` view) with the flat ``(kh, kw, C)`` weights ``wt``. Every
    sample's channels are cut into ``per_sample`` ranges; the units are split across the
    parts."""
    n_, c_, h, wi, _, ho, wo = dims
    units = n_ * per_sample
    pw = ho * wo
    for t in prange(parts):
        for u in range(t * units // parts, (t + 1) * units // parts):
            n, c0, c1 = unit_channels(u, per_sample, c_)
            tiled_taps(y, x, wt, c_, 0, bias, 0, has_bias, geo, dims, n, c0, c1)
            if not (has_res or act):
                continue
            rows_range_epilogue(y2, res2, n * pw, (n + 1) * pw, c0, c1, bias, False,
                                has_res, act, alpha, beta, consts)


_GEMM = loops(pointwise_gemm, nogil=True)
_DOTS = loops(pointwise_dots, nogil=True, error_model="numpy", fastmath=FAST)
_COLUMNS = loops(pointwise_columns, nogil=True)
_DEPTHWISE = loops(depthwise, nogil=True)

#: multiply-adds below which a conv runs on the calling thread. Starting the pool's threads
#: costs about 1.3 us a parallel loop (two threads, 2026-11-27), and most convs of a small
#: net's squeeze-and-excitation blocks and last stages do a few thousand multiply-adds
PARALLEL_MACS = 1 << 16

#: depthwise convs over at most this many output pixels (all samples together), and at most
#: :data:`SERIAL_DEPTHWISE_VECTORS` vector multiply-adds (taps inside the input only, by
#: channel vectors), run on the calling thread. On small planes most taps of a 5x5 kernel
#: fall in the padding, so the conv is a few microseconds of work and the parallel loop's
#: start and join cost as much again. mnasnet0_5 in its plan, batch 2, two threads
#: (2026-12-02, Xeon with AVX-512), parallel against serial, us: 576 channels 5x5 at 2x2
#: 5.4 -> 3.0, 288 at 4x4 7.3 -> 2.8, 240 at 4x4 6.8 -> 5.5, 144 at 8x8 stride 2 (4x4
#: out) 5.8 -> 5.2; over 128 pixels the parallel loop wins: 72 at 8x8 8.2 against 9.9, 48
#: at 16x16 8.8 against 11.4, 24 at 32x32 stride 2 10.6 against 18.
SERIAL_DEPTHWISE_PIXELS = 64
SERIAL_DEPTHWISE_VECTORS = 1 << 12

#: pointwise convs (``(C, O)`` weights) over at most this many pixels run on the register
#: tiles (matmul_direct.product), more on OpenBLAS. Two threads, 2026-11-27, GEMM against
#: tiles in us: 2x2 pixels at batch 2, 160 -> 1280 60 against 20 (25 for the dot products
#: of an ``(O, C)`` weight), 576 -> 96 10 against 7; 7x7 at batch 1, 960 -> 160 117
#: against 76; even at 8x8 (128 pixels) and 4x4; from 512 pixels with few channels the
#: GEMM wins by 5-15% (96 -> 24 at 16x16: 16 against 19; 24 -> 144 at 56x56, batch 8:
#: 1197 against 1386)
TILE_ROWS = 256


def _tiles(op, w_shape, rows) -> bool:
    """Whether a Conv2dNHWC of (HWIO) weight shape ``w_shape`` over ``rows`` pixels runs on
    the register tiles."""
    kh, kw, c, o = w_shape
    return (op.weight_layout != "OIHW" and rows <= TILE_ROWS
            and pointwise_nhwc(op, (o, c, kh, kw)))


# ---------------------------------------------------------------------------- the op
def _taps_inside(k, s, pad, dil, n_in, n_out) -> int:
    """The taps of one axis that read inside the input, summed over the output positions."""
    return sum(1 for o in range(n_out) for t in range(k) if 0 <= o * s - pad + t * dil < n_in)


def _depthwise_parallel(op, x_shape, w_shape, y_shape, lanes) -> bool:
    """Whether a channels-last depthwise conv is worth the parallel loop (see
    :data:`SERIAL_DEPTHWISE_PIXELS`)."""
    n, h, wi, c = x_shape
    ho, wo = y_shape[1], y_shape[2]
    (sh, sw), (pt, pl, _, _), (dh, dw) = op.stride, op.padding, op.dilation
    if n * ho * wo > SERIAL_DEPTHWISE_PIXELS:
        return n * ho * wo * c * w_shape[0] * w_shape[1] >= PARALLEL_MACS
    taps = (_taps_inside(w_shape[0], sh, pt, dh, h, ho) *
            _taps_inside(w_shape[1], sw, pl, dw, wi, wo))
    return n * taps * -(-c // lanes) > SERIAL_DEPTHWISE_VECTORS


def _depthwise_plan(op, x_shape, w_shape, y_shape):
    n, h, wi, c = x_shape
    (s, _), (pt, pl, _, _), (dh, dw) = op.stride, op.padding, op.dilation
    geo = (w_shape[0], w_shape[1], s, pt, pl, dh, dw)
    dims = (n, c, h, wi, c, y_shape[1], y_shape[2])
    parts = max(1, min(threads.num_threads(), n * c))
    return geo, dims, parts, units_of(n, c, parts)


def _columns_spec(w_shape, y2_shape, dtype):
    """The transposed pixels ``(C*P,)`` and the ``(O, P)`` product of
    :func:`pointwise_columns`, or nothing where the dot products take the conv."""
    o, c = w_shape[0], w_shape[1]
    p = y2_shape[0]
    if c >= MIN_CHANNELS:
        return ((0,), dtype), ((0, 0), dtype)
    return ((c * p,), dtype), ((o, p), dtype)


def _workspace(op, ins, outs):
    w, y = ins[1], outs[0]
    if op.weight_layout == "OIHW":
        return carved_bytes(*_columns_spec(w.shape, (y.size // w.shape[0], w.shape[0]),
                                           y.dtype))
    if _tiles(op, w.shape, y.size // w.shape[3]):
        return carved_bytes(((y.size // w.shape[3],), "int64"))
    return 0


@kernel("Conv2dNHWC", workspace=_workspace)
def conv2d_nhwc(op, ins, outs, ws):
    x, w = ins[0], ins[1]  # w: (kh, kw, C/groups, O)
    (y,) = outs
    kh, kw, c, o = w.shape
    if op.weight_layout == "OIHW":
        o, c, kh, kw = w.shape
    y2 = y.reshape(-1, o)
    epi = epilogue_args(op, ins, y2)
    if not pointwise_nhwc(op, (o, c, kh, kw)):
        geo, dims, parts, per = _depthwise_plan(op, x.shape, w.shape, y.shape)
        fn = _DEPTHWISE[_depthwise_parallel(op, x.shape, w.shape, y.shape,
                                            simd.lanes(y.dtype))]
        return bound(fn, x.reshape(-1), w.reshape(-1), y.reshape(-1), y2, *epi, geo,
                     dims, parts, per)
    x2 = x.reshape(-1, c)
    rows = x2.shape[0]
    nt = threads.num_threads()
    par = y.size * c >= PARALLEL_MACS
    if op.weight_layout == "OIHW":
        if c >= MIN_CHANNELS:
            return bound(_DOTS[par], x.reshape(-1), w.reshape(-1), y2, *epi,
                         max(1, min(nt, o)))
        cols, yt = carve(ws, *_columns_spec(w.shape, y2.shape, y.dtype))
        return bound(_COLUMNS[par], x2, w.reshape(o, c), cols, yt, y2, *epi,
                     max(1, min(nt, o // 16, rows)), blas.HANDLE)
    if _tiles(op, w.shape, rows):
        (offs,) = carve(ws, ((rows,), "int64"))
        lanes = simd.lanes(y.dtype)
        parts, by_rows = matmul_direct.split(rows, o, lanes, nt, w.nbytes)
        return bound(matmul_direct.PRODUCT[par and parts > 1], x2, w.reshape(-1), y2, offs,
                     *epi, parts, by_rows, lanes, False)
    parts = max(1, min(nt, -(-rows // 16)))
    return bound(_GEMM[par], x2, w.reshape(c, o), y2, *epi, parts, _rows_block(c, o),
                 blas.HANDLE)

"""Max pooling forward with the channels innermost, on tiny planes of many channels
(runtime/kernels/cpu/pool.py runs the others plane by plane).

pool.py folds a row of outputs in one vector register (simd.window_max), so an output row of
2-4 values leaves most of the register's lanes idle. Here a unit of work, a range of
channels of one sample, is transposed into planned workspace as ``(H*W, cc)``, and each
output pixel folds its window's cells in row-major order as vector loops over the ``cc``
channels, then the result is transposed back. That is the plane-by-plane fold itself (the
first maximum kept, ``v > m``, so a NaN in a window's first cell stays and later ones are
skipped), so the results are the same bit for bit. The same fold (:func:`output_row`)
runs the channels-last max pools of inference plans (``MaxPool2dNHWC``) on their rows in
place, with no transposes.
"""
from numba import njit, prange

from .conv import _view
from .depthwise_channels_last import planes_to_rows, rows_to_planes, units_of
from .loops import bound, loops, pick
from .simd_window import cells_max

#: output planes up to which, and channels from which, max pooling runs channels
#: innermost. Measured at batch 2 (2 threads, 2026-11-27), 3x3 windows, against pool.py's
#: vector rows: 256 channels at 7x7 to 3x3 17 us (28); 128 at 15x15 to 7x7 19 (16), 480
#: at 8x8 to 8x8 33 (35), 192 at 16x16 to 8x8 31 (29), 64 at 31x31 to 15x15 48 (16).
#: Since the windows fold in registers (simd_window.cells_max; AMD EPYC, 2026-11-29, 3x3
#: stride 2, two runs): 128 at 15x15 17-18 (40-48), 192 at 16x16 28-34 (62-81), 64 at
#: 31x31 40-43 (40-48), 64 at 32x32 63-71 (54-65), 24 and 32 channels lose (14-25 against
#: 16-30, 50-96 against 113-140): :data:`WIDE_PLANE` for :data:`WIDE_CHANNELS`
SMALL_PLANE, MIN_CHANNELS = 16, 64
WIDE_PLANE, WIDE_CHANNELS = 64, 128


def chosen(x_shape, y_shape) -> bool:
    """Whether a max pool of ``x_shape`` into ``y_shape`` runs here."""
    pixels, c = y_shape[2] * y_shape[3], x_shape[1]
    return (pixels <= SMALL_PLANE and c >= MIN_CHANNELS) or \
        (pixels <= WIDE_PLANE and c >= WIDE_CHANNELS)


def scratch_elements(c, h, w, ho, wo, per_sample) -> int:
    """Workspace elements of one part: the transposed input and output of its widest unit
    (``ceil(c / per_sample)`` channels)."""
    return -(-c // per_sample) * (h * w + ho * wo)


@loops
def _MAX_POOL_LAST(x, y, dims, kh, kw, sh, sw, pt, pl, ws, parts, per_sample):
    """``x`` flat and ``y`` as ``(N*C, Ho*Wo)`` (a view per plane costs more than these
    planes' work); ``dims`` is ``(N, C, H, W, Ho, Wo)``."""
    n_, c_, h, w, ho, wo = dims
    units = n_ * per_sample
    hw, pw = h * w, ho * wo
    for t in prange(parts):
        for u in range(t * units // parts, (t + 1) * units // parts):
            n = u // per_sample
            c0 = (u % per_sample) * c_ // per_sample
            c1 = (u % per_sample + 1) * c_ // per_sample
            cc = c1 - c0
            xt = ws[t, :hw * cc]
            acc = ws[t, hw * cc:(hw + pw) * cc]
            planes_to_rows(x, xt, n * c_ + c0, cc, hw)
            for oy in range(ho):
                output_row(xt, 0, acc, oy * wo * cc, cc, cc, oy, (h, w, wo), kh, kw, sh, sw,
                           pt, pl)
            rows_to_planes(acc, y, n * c_ + c0, cc, pw, False)


@njit(inline="always")
def output_row(x, xb, y, yb, stride, cc, oy, dims, kh, kw, sh, sw, pt, pl):
    """Output row ``oy`` of a max pool on channels-innermost rows: cell ``(iy, ix)``'s
    ``cc`` channels at ``x[xb + (iy*W + ix)*stride:][:cc]``, output pixel ``ox``'s at
    ``y[yb + ox*stride:][:cc]``; ``dims`` is ``(H, W, Wo)``. Each window's cells are
    folded in row-major order, the first maximum kept (``v > m``), a vector of channels
    in a register over the window (simd_window.cells_max)."""
    h, w, wo = dims
    y0 = oy * sh - pt
    ya, yb_ = max(y0, 0), min(y0 + kh, h)
    for ox in range(wo):
        x0 = ox * sw - pl
        xa, xe = max(x0, 0), min(x0 + kw, w)
        cells_max(x, xb + (ya * w + xa) * stride, w * stride, stride, yb_ - ya, xe - xa, y,
                  yb + ox * stride, cc)


@loops
def _MAX_POOL_NHWC(x, y, dims, kh, kw, sh, sw, pt, pl, parts):
    """A max pool of the flat NHWC ``x`` into the flat NHWC ``y`` (``MaxPool2dNHWC``),
    output rows split across the parts; ``dims`` is ``(N, C, H, W, Ho, Wo)``."""
    n_, c_, h, w, ho, wo = dims
    rows = n_ * ho
    for t in prange(parts):
        for r in range(t * rows // parts, (t + 1) * rows // parts):
            n, oy = r // ho, r % ho
            output_row(x, n * h * w * c_, y, r * wo * c_, c_, c_, oy, (h, w, wo), kh, kw, sh,
                       sw, pt, pl)


def plan(x_shape, y_shape, threads) -> tuple:
    """``(parts, per_sample, scratch elements per part)`` of a max pool."""
    n, c, h, w = x_shape
    per_sample = units_of(n, c, threads)
    parts = max(1, min(threads, n * per_sample))
    return parts, per_sample, scratch_elements(c, h, w, y_shape[2], y_shape[3], per_sample)


def bind_nhwc(x, y, op, threads):
    """The step of a channels-last max pool of ``x`` into ``y`` (both NHWC)."""
    (kh, kw), (sh, sw), (pt, pl, _, _) = op.kernel, op.stride, op.padding
    n, h, w, c = x.shape
    dims = (n, c, h, w, y.shape[1], y.shape[2])
    parts = max(1, min(threads, n * y.shape[1]))
    return bound(pick(_MAX_POOL_NHWC, y.size * kh * kw), _view(x, (-1,)), _view(y, (-1,)),
                 dims, kh, kw, sh, sw, pt, pl, parts)


def bind(x, y, op, ws, parts, per_sample):
    """The step of a max pool of ``x`` into ``y``; ``ws`` is ``(parts, scratch)``."""
    (kh, kw), (sh, sw), (pt, pl, _, _) = op.kernel, op.stride, op.padding
    fn = pick(_MAX_POOL_LAST, y.size * kh * kw)
    dims = (*x.shape, *y.shape[2:])
    return bound(fn, _view(x, (-1,)), _view(y, (-1, y.shape[2] * y.shape[3])), dims, kh, kw,
                 sh, sw, pt, pl, ws, parts, per_sample)

"""Convolutions over few columns: dot products instead of a GEMM call per sample.

The last stages of mobile nets and squeezenet at small images run 1x1 convs on 2x2 to
4x4 planes: per sample a product of a large weight (``O x C``, up to 1.6 MB) with 4 to 16
columns. OpenBLAS packs the whole weight for each such call and runs at 30-50 GFLOP/s
there, and one call per sample reads the weight once per sample. Here the batch's columns
are transposed side by side into planned workspace (``N*L x C``, a few KiB), and each
output row ``o`` of the weight is read once for all of them, as dot products four columns
at a time (dots.py: each weight element loaded once for four multiply-adds), which LLVM
vectorises along ``C`` (the sums are reassociated: ``fastmath`` ``reassoc``). Measured at
batch 2 (2026-11-26): 1280x320 weights at 2x2 167 us on one thread against 213 for the
per-sample GEMMs, 71 against 109 on two (the parts split the output rows), 320x960 88
against 152 on one thread.

Convs with larger kernels and many output channels (ResNet's and squeezenet's last 3x3
convs) take the same path: each output pixel's patch (``C*kh*kw`` values, zero where it
reaches into the padding) is gathered into a row of the scratch instead of the transposed
column, and the weight ``O x C*kh*kw`` multiplies the patches the same way.

Each output is one thread's sum in a fixed order, so results do not depend on the thread
count; they differ from BLAS's in the last bits (another summation order).
"""
import numpy as np
from numba import int64, njit, prange, uintp

from ....ops._util import tiled
from .conv_loops import im2col
from .dots import FAST, block_of, products
from .epilogue import conv_epilogue

#: batch x plane (columns) up to which, and input channels from which, pointwise convs
#: take these kernels. Below 256 channels the dot products are too short (96 channels at
#: 4x4, batch 2: 109 us against the GEMMs' 43; 160 at 2x2: 69 against 45)
MAX_COLUMNS, MIN_CHANNELS = 64, 256


#: output channels from which convs with larger kernels run here too, on their patches
#: (``C*kh*kw`` values each, >= MIN_CHANNELS). Gathering the patches costs as much as the
#: im2col it replaces, so the products must be large: measured at batch 2, two threads
#: (2026-11-26), against im2col + GEMM: 512 -> 512 3x3 at 2x2 249 us (523), 256 -> 256 at
#: 2x2 81 (163), 160 -> 320 at 2x2 63 (119), 64 -> 256 at 3x3 54 (73); but 128 -> 32 at
#: 4x4 67 (32), 96 -> 208 at 2x2 32 (29). 0 turns it off.
MIN_PATCH_OUTPUTS = 256


def chosen(gm) -> bool:
    """Whether the conv of geometry ``gm`` (conv.py's ``_Geom``) runs here."""
    larger = 0 < MIN_PATCH_OUTPUTS <= gm.o
    return ((gm.pointwise or larger) and gm.g == 1 and gm.n * gm.l <= MAX_COLUMNS
            and gm.k >= MIN_CHANNELS and tiled(gm.dtype))


def spec(gm):
    """The transposed columns (the patches of a larger kernel), ``(N*L, C*kh*kw)``."""
    return (gm.n * gm.l, gm.k), gm.dtype


def parts_of(gm, threads: int) -> int:
    return max(1, min(threads, gm.o))


@njit(cache=True, nogil=True, parallel=True, error_model="numpy", fastmath=FAST)
def forward(x, x3, w, xt, y3, bias, has_bias, res3, has_res, act, alpha, beta, consts, geo,
            wo, pointwise, parts):
    """``y3[n] = act(conv(x, w)[n] + bias + res3[n])``: ``x`` the ``(N, C, H, W)`` input
    (``x3`` as ``(N, C, H*W)``), ``y3`` the ``(N, O, L)`` output, ``w`` the flat
    ``O x K`` weight (``K = C*kh*kw``), ``xt`` the flat ``N*L x K`` scratch: the
    transposed input when ``pointwise``, else every output pixel's patch (zeros where it
    reaches into the padding), in the weight's ``(c, i, j)`` order: conv_loops' im2col
    written into the transposed rows."""
    n_, c_ = x.shape[0], x.shape[1]
    o_, l_ = y3.shape[1], y3.shape[2]
    k_ = w.shape[0] // o_
    rows = xt[:n_ * l_ * k_].reshape(n_ * l_, k_)
    for n in prange(n_):
        if pointwise:
            for c in range(c_):
                for q in range(l_):
                    xt[uintp((n * l_ + q) * c_ + c)] = x3[n, c, q]
        else:  # conv_loops' im2col, written into the transposed rows of the sample
            im2col(x, x3, int64(n), rows[n * l_:(n + 1) * l_].T, geo, l_ // wo, wo)
    for t in prange(parts):
        o0, o1 = block_of(t, parts, o_)
        products(w, xt, y3, o0, o1, k_)
    for n in prange(n_):
        conv_epilogue(y3[n], bias, has_bias, res3[n] if has_res else y3[n], has_res, act,
                      alpha, beta, consts)

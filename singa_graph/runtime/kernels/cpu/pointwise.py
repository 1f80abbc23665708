"""1x1 convolutions over few columns: dot products instead of a GEMM call per sample.

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

Each output is one thread's sum in a fixed order, so results do not depend on the thread
count; they differ from BLAS's in the last bits (another summation order).
"""
import numpy as np
from numba import njit, prange, uintp

from .dots import FAST, block_of, products
from .epilogue import conv_epilogue

#: batch x plane (columns) up to which, and input channels from which, pointwise convs
#: take these kernels. Below 256 channels the dot products are too short (96 channels at
#: 4x4, batch 2: 109 us against the GEMMs' 43; 160 at 2x2: 69 against 45)
MAX_COLUMNS, MIN_CHANNELS = 64, 256


def chosen(gm) -> bool:
    """Whether the conv of geometry ``gm`` (conv.py's ``_Geom``) runs here."""
    return (gm.pointwise and gm.g == 1 and gm.n * gm.l <= MAX_COLUMNS
            and gm.c >= MIN_CHANNELS and gm.dtype in (np.float32, np.float64))


def spec(gm):
    """The transposed columns, ``(N*L, C)``."""
    return (gm.n * gm.l, gm.c), gm.dtype


def parts_of(gm, threads: int) -> int:
    return max(1, min(threads, gm.o))


@njit(cache=True, nogil=True, parallel=True, error_model="numpy", fastmath=FAST)
def forward(x3, w, xt, y3, bias, has_bias, res3, has_res, act, alpha, beta, consts, parts):
    """``y3[n] = act(w @ x3[n] + bias + res3[n])``: ``x3``/``y3`` are ``(N, C, L)`` and
    ``(N, O, L)``, ``w`` the flat ``O x C`` weight, ``xt`` the flat ``N*L x C`` scratch."""
    n_, c_, l_ = x3.shape
    o_ = y3.shape[1]
    for n in prange(n_):
        for c in range(c_):
            for q in range(l_):
                xt[uintp((n * l_ + q) * c_ + c)] = x3[n, c, q]
    for t in prange(parts):
        o0, o1 = block_of(t, parts, o_)
        products(w, xt, y3, o0, o1, c_)
    for n in prange(n_):
        conv_epilogue(y3[n], bias, has_bias, res3[n] if has_res else y3[n], has_res, act,
                      alpha, beta, consts)

"""``x @ W (+ bias)`` by a constant weight (``MatMulDirect``, made by passes/direct.py in
CPU inference plans): the register tiles of conv_direct.py with the rows of ``x`` as
pixels and its columns as input channels.

A transformer's or ConvNeXt's linear layers over few rows (ConvNeXt's last stage at 64x64
and batch 2: 8 rows by 3072 x 768 weights, 9.4 MB) are products that BLAS runs as thin
GEMMs, packing the weight on every call, at 30-60 GFLOP/s. Here each thread takes a range
of columns and multiplies all rows with it from registers, 32 columns at a time, reading
``W`` where it is: 18.9 M multiply-adds took 167-172 us on two threads whatever the
shape, 8x3072x768 (671 us before) as 512x384x96, about the cores' peak. A copy of ``W``
in blocks of columns read it faster from memory (8x768x3072 with the weight out of cache:
236 against 433 us) but would double the plan's weight bytes. The output rows are
written in place (they are already ``(rows, columns)``), then the bias is added to the
part's columns while they are in cache: the same two roundings as a MatMul followed by an
Add.

Every output is one fused-multiply-add chain in ``K`` order, whatever the thread count.
"""
from numba import prange

from ....runtime import threads
from ...registry import carve, carved_bytes, kernel
from . import simd
from .conv_direct import columns
from .loops import PARALLEL_WORK, bound, loops


def _product(x, w, y, offs, bias, has_bias, parts, lanes):
    """``y = x @ W + bias`` on the 2-d ``x`` (M, K) and ``y`` (M, N), ``w`` the flat
    ``(K, N)`` weight; ``offs`` M row offsets of scratch."""
    m_, k_ = x.shape
    n_ = y.shape[1]
    nv = (n_ + lanes - 1) // lanes
    xf, yf = x.reshape(-1), y.reshape(-1)
    for q in range(m_):
        offs[q] = q * k_
    for t in prange(parts):
        o0 = min(n_, lanes * (t * nv // parts))
        o1 = min(n_, lanes * ((t + 1) * nv // parts))
        columns(xf, offs, m_, w, lanes, n_, lanes, yf, n_, 0, k_, 1, 1, 0, 0, 1, o0, o1, lanes)
        if has_bias:
            for r in range(m_):
                for c in range(o0, o1):
                    y[r, c] = y[r, c] + bias[c]


_PRODUCT = loops(_product, error_model="numpy")


def _workspace(op, ins, outs):
    return carved_bytes(((outs[0].size // ins[1].shape[1],), "int64"))


@kernel("MatMulDirect", workspace=_workspace)
def matmul_direct(op, ins, outs, ws):
    x, w = ins[0], ins[1]  # w: (K, N)
    (y,) = outs
    k, n = w.shape
    lanes = simd.lanes(y.dtype)
    x2, y2 = x.reshape(-1, k), y.reshape(-1, n)
    bias = ins[2] if op.bias else w.reshape(-1)[:0]
    (offs,) = carve(ws, ((x2.shape[0],), "int64"))
    parts = max(1, min(threads.num_threads(), -(-n // (2 * lanes))))
    fn = _PRODUCT[parts > 1 and y.size * k >= PARALLEL_WORK]
    return bound(fn, x2, w.reshape(-1), y2, offs, bias, op.bias, parts, lanes)

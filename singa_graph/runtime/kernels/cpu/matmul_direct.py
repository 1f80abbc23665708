"""``x @ W (+ bias)`` by a constant weight (``MatMulDirect``, made by passes/direct.py in
CPU inference plans): the register tiles of conv_direct.py with the rows of ``x`` as
pixels and its columns as input channels. :func:`product` also runs the channels-last
pointwise convs over few pixels (conv_channels_last.py), with the whole conv epilogue.

A transformer's or ConvNeXt's linear layers over few rows (ConvNeXt's last stage at 64x64
and batch 2: 8 rows by 3072 x 768 weights, 9.4 MB) are products that BLAS runs as thin
GEMMs, packing the weight on every call, at 30-60 GFLOP/s. Here each thread takes a range
of columns (or, for a small weight, of rows) and multiplies it from registers, 32 columns
by 8 rows at a time, reading ``W`` where it is: 18.9 M multiply-adds took 167-172 us on
two threads whatever the shape, 8x3072x768 (671 us before) as 512x384x96, about the
cores' peak. A copy of ``W`` in blocks of columns (``blocked``) reads faster from memory
(8x768x3072 with the weight out of cache: 236 against 433 us) but holds the weight twice,
so passes/direct.py makes one only for a Gemm's ``(N, K)`` weight (copied anyway) and for
weights of 1 MB or more over few rows, which stream from memory on every call. The
output rows are written in place (they are already ``(rows, columns)``), then
the epilogue (a bias: the same two roundings as a MatMul followed by an Add) runs on the
part's block while it is in cache.

Every output is one fused-multiply-add chain in ``K`` order, whatever the thread count.
"""
from numba import prange

from ....runtime import threads
from ...registry import carve, carved_bytes, kernel
from . import simd
from .conv_direct import SPLIT_WEIGHT_BYTES, columns, columns_in_place
from .epilogue import act_args, rows_range_epilogue
from .loops import PARALLEL_WORK, bound, loops


#: rows a part multiplies before finishing them with the epilogue: its block of output
#: rows and of ``x`` stay in cache while every block of columns of ``W`` passes over them
ROWS_BLOCK = 256


def product(x, w, y, offs, bias, has_bias, res, has_res, act, alpha, beta, consts, parts,
            by_rows, lanes, blocked=False):
    """``y = act(x @ W + bias + res)`` (the conv epilogue's steps, rows_epilogue) on the 2-d
    ``x`` (M, K), ``y`` and ``res`` (M, N), ``w`` the flat ``(K, N)`` weight read in place
    (or, ``blocked``, ``(ceil(N/lanes), K, lanes)``: MatMulDirect's copy in blocks);
    ``offs`` is M row offsets of scratch. Part ``t`` takes a range of rows (``by_rows``, for
    many rows) or of column vectors; a part's rows go in blocks of :data:`ROWS_BLOCK`, each
    finished while it is in cache."""
    m_, k_ = x.shape
    n_ = y.shape[1]
    nv = (n_ + lanes - 1) // lanes
    xf, yf = x.reshape(-1), y.reshape(-1)
    # where a vector of columns starts, and the steps to the next row and vector
    wstep, wrow, wvec = (k_ * lanes, lanes, k_ * lanes) if blocked else (lanes, n_, lanes)
    for q in range(m_):
        offs[q] = q * k_
    for t in prange(parts):
        r0, r1, o0, o1 = 0, m_, 0, n_
        if by_rows:
            r0, r1 = t * m_ // parts, (t + 1) * m_ // parts
        else:
            o0 = min(n_, lanes * (t * nv // parts))
            o1 = min(n_, lanes * ((t + 1) * nv // parts))
        for b0 in range(r0, r1, ROWS_BLOCK):
            b1 = min(b0 + ROWS_BLOCK, r1)
            if blocked:
                columns(xf, offs[b0:], b1 - b0, w, wstep, wrow, wvec, yf[b0 * n_:], n_, 0,
                        k_, 1, 1, 0, 0, 1, o0, o1, lanes, n_, 0, 0)
            else:
                columns_in_place(xf, offs[b0:], b1 - b0, w, wstep, wrow, wvec, yf[b0 * n_:],
                                 n_, 0, k_, 1, 1, 0, 0, 1, o0, o1, lanes, n_, 0, 0)
            rows_range_epilogue(y, res, b0, b1, o0, o1, bias, has_bias, has_res, act,
                                alpha, beta, consts)


PRODUCT = loops(product, error_model="numpy")


def split(m, n, lanes, nt, weight_bytes) -> tuple:
    """``(parts, by_rows)`` of :func:`product` for ``m`` rows by ``n`` columns on ``nt``
    threads: by rows where each part gets a full tile of them and every part can read the
    whole weight (under conv_direct.SPLIT_WEIGHT_BYTES) or the columns are too few to
    share out, else by columns (each part reads its share of the weight once)."""
    vectors = -(-n // lanes)
    if m >= 8 * nt and (weight_bytes < SPLIT_WEIGHT_BYTES or vectors < 2 * nt):
        return max(1, min(nt, m // 8)), True
    return max(1, min(nt, -(-vectors // 2))), False


def _workspace(op, ins, outs):
    return carved_bytes(((outs[0].size // outs[0].shape[-1],), "int64"))


@kernel("MatMulDirect", workspace=_workspace)
def matmul_direct(op, ins, outs, ws):
    x, w = ins[0], ins[1]  # w: (K, N), or (N/B, K, B) with op.columns
    (y,) = outs
    blocked = op.columns is not None
    k, n = (w.shape[1], op.columns) if blocked else w.shape
    lanes = simd.lanes(y.dtype)
    if blocked and w.shape[2] != lanes:
        raise ValueError(f"MatMulDirect's kernel reads blocks of {lanes} columns, not "
                         f"{w.shape[2]}")
    x2, y2 = x.reshape(-1, k), y.reshape(-1, n)
    bias = ins[2] if op.bias else w.reshape(-1)[:0]
    (offs,) = carve(ws, ((x2.shape[0],), "int64"))
    parts, by_rows = split(x2.shape[0], n, lanes, threads.num_threads(), w.nbytes)
    fn = PRODUCT[parts > 1 and y.size * k >= PARALLEL_WORK]
    alpha, beta, consts = act_args(op, y.dtype)
    return bound(fn, x2, w.reshape(-1), y2, offs, bias, op.bias, y2, False, 0, alpha, beta,
                 consts, parts, by_rows, lanes, blocked)

"""Row-wise activation kernels (softmax and friends), plus the Numba plumbing that the loss
and dropout kernels share. The elementwise activations are generated from their formulas
(:mod:`.elementwise`).

Row-wise ops (softmax and friends) view the array as ``(outer, n, inner)``
so that a non-last axis needs no transposed copy, and run one row function per slice; their
driver exists in a serial and a ``parallel=True`` version, the parallel one picked only for
arrays big enough to repay starting the threads (a few microseconds per call).

Numba cannot cache closures or functions passed as arguments (their hash changes with every
process), so the drivers select the row function by an integer code instead.
"""
import numpy as np
from numba import njit, prange, uintp

from ....errors import UnsupportedOpError
from ....runtime import threads
from ...registry import kernel
from .attention import run_max, sum64
from .vexp import exp as _exp
from .loops import bound, flat_view

# Elements from which the row-wise ops run their rows in parallel.
PARALLEL_ROWS = 1 << 15


# ---------------------------------------------------------------------- shared plumbing
def contiguous(factory):
    """Let a factory that needs C-contiguous arrays accept any: the plan's buffers are
    contiguous, so this only copies through scratch arrays in the rare other case (a view
    reshaped with ``reshape(-1)`` would otherwise silently detach from the real buffer).
    Also refuses float16, which Numba cannot compute with, with a clear error."""

    def wrapped(op, ins, outs):
        if any(a.dtype == np.float16 for a in (*ins, *outs)):
            raise UnsupportedOpError(f"no cpu kernel for {op.type} in float16")
        if all(a.flags.c_contiguous for a in (*ins, *outs)):
            return factory(op, ins, outs)
        cins = [np.ascontiguousarray(a) if not a.flags.c_contiguous else a for a in ins]
        couts = [np.empty(a.shape, a.dtype) if not a.flags.c_contiguous else a for a in outs]
        pin = [(c, a) for c, a in zip(cins, ins) if c is not a]
        pout = [(a, c) for c, a in zip(couts, outs) if c is not a]
        inner = factory(op, cins, couts)

        def step():
            for c, a in pin:
                np.copyto(c, a)
            inner()
            for a, c in pout:
                np.copyto(a, c)
        return step

    return wrapped


def _noop():
    pass


def rowwise(code):
    """Kernel factory running row function number ``code`` (see :func:`_row`) along
    ``op.axis``."""

    @contiguous
    def factory(op, ins, outs):
        shape, ax = outs[0].shape, op.axis
        s3 = (int(np.prod(shape[:ax])), shape[ax], int(np.prod(shape[ax + 1:])))
        a = ins[0].reshape(s3)
        b = (ins[1] if len(ins) > 1 else ins[0]).reshape(s3)
        y = outs[0].reshape(s3)
        if y.size == 0:
            return _noop
        big = y.size >= PARALLEL_ROWS and s3[0] * s3[2] > 1
        if code == SOFTMAX and s3[2] == 1:  # rows along the last axis: contiguous
            rows, n = s3[0], s3[1]
            inplace = a.ctypes.data == y.ctypes.data  # else the plan never overlaps them
            if not big:
                return bound(_softmax_span, flat_view(a), flat_view(y), inplace, 0, rows, n)
            parts = max(1, min(threads.num_threads(), rows))
            return bound(_softmax_rows_parallel, flat_view(a), flat_view(y), inplace, rows, n, parts)
        drive = _rows_parallel if big else _rows_serial
        return bound(drive, code, a, b, y)
    return factory


# ---------------------------------------------------------------------- row-wise
@njit(cache=True)
def _row_lse(a):
    """log(sum(exp(a))) of a 1-d row, shifted by the max; accumulated in float64."""
    m = a[0]
    for k in range(1, a.shape[0]):
        m = max(m, a[k])
    s = 0.0
    for k in range(a.shape[0]):
        s += np.exp(a[k] - m)
    return m + np.log(s)


# The row functions take the (outer, n, inner) arrays and the row's (p, i) rather than a
# sliced row: a slice is a refcounted view, and threads bumping one shared refcount contend.
# exp runs in the array's dtype (expf for float32 is twice as fast); sums are float64.
@njit(cache=True)
def _max(a, p, i):
    m = a[p, 0, i]
    for k in range(1, a.shape[1]):
        m = max(m, a[p, k, i])
    return m


@njit(cache=True)
def _softmax_row(x, _, y, p, i):
    # the exponentials are kept in y and rescaled: one exp per element, not two
    m, s = _max(x, p, i), 0.0
    for k in range(x.shape[1]):
        e = np.exp(x[p, k, i] - m)
        y[p, k, i] = e
        s += e
    inv = 1.0 / s
    for k in range(x.shape[1]):
        y[p, k, i] = y[p, k, i] * inv


@njit(cache=True)
def _log_softmax_row(x, _, y, p, i):
    m, s = _max(x, p, i), 0.0
    for k in range(x.shape[1]):
        s += np.exp(x[p, k, i] - m)
    lse = m + np.log(s)
    for k in range(x.shape[1]):
        y[p, k, i] = x[p, k, i] - lse


@njit(cache=True)
def _softmax_grad_row(dy, y, dx, p, i):
    dot = 0.0
    for k in range(y.shape[1]):
        dot += dy[p, k, i] * y[p, k, i]
    for k in range(y.shape[1]):
        dx[p, k, i] = y[p, k, i] * (dy[p, k, i] - dot)


@njit(cache=True)
def _log_softmax_grad_row(dy, y, dx, p, i):
    s = 0.0
    for k in range(y.shape[1]):
        s += dy[p, k, i]
    for k in range(y.shape[1]):
        dx[p, k, i] = dy[p, k, i] - np.exp(y[p, k, i]) * s


SOFTMAX, LOG_SOFTMAX, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD = range(4)


# Rows of a span are taken a block at a time, a block being about this many elements (16
# KiB of float32, so the three passes over it stay in L1): the exponentials run as one loop
# over the whole block, not one loop a row, whose vector remainder (a 65-wide row is four
# 16-lane vectors and one element) went scalar in every row.
SOFTMAX_BLOCK = 4096


@njit(cache=True, nogil=True, error_model="numpy")
def _softmax_span(x, y, inplace, r0, r1, n):
    """Softmax of the rows ``r0 .. r1-1`` of the flat ``(rows, n)`` arrays ``x`` into ``y``
    (``inplace``: ``y`` is ``x``) in loops that LLVM vectorises: each row shifted by its
    max (:func:`.attention.run_max`), cpu/vexp.py's float32 exp of a block of rows at once,
    the rows' sums in float64 (:func:`.attention.sum64`), then the scale. Rows are found by
    offset, not sliced: a slice is a reference-counted view, and the threads of the
    parallel driver bumped one shared count for every row. A small ViT's in-place softmax
    over (2, 4, 65, 65), one thread: 63-67 -> 36-38 us a call (the max's chains and the
    block-wide exp, 2026-12-02)."""
    block = max(1, SOFTMAX_BLOCK // max(n, 1))
    for q0 in range(r0, r1, block):
        q1 = min(q0 + block, r1)
        for r in range(q0, q1):
            b = uintp(r * n)
            sh = y.dtype.type(run_max(x, b, n))
            if inplace:  # one array: LLVM's overlap check between x and y sent it scalar
                for k in range(n):
                    u = b + uintp(k)
                    y[u] = y[u] - sh
            else:
                for k in range(n):
                    u = b + uintp(k)
                    y[u] = x[u] - sh
        for u in range(uintp(q0 * n), uintp(q1 * n)):
            y[u] = _exp(y[u])
        for r in range(q0, q1):
            b = uintp(r * n)
            # the scale in the rows' dtype: scaling float32 rows by a float64 1/sum
            # (rounding once, not twice) took a 65-wide softmax from 93 to 131 us a call
            inv = y.dtype.type(1.0 / sum64(y, b, n))
            for k in range(n):
                u = b + uintp(k)
                y[u] = y[u] * inv


@njit(cache=True, parallel=True)
def _softmax_rows_parallel(x, y, inplace, rows, n, parts):
    for t in prange(parts):
        _softmax_span(x, y, inplace, t * rows // parts, (t + 1) * rows // parts, n)


@njit(cache=True)
def _row(code, a, b, out, p, i):
    if code == SOFTMAX:
        _softmax_row(a, b, out, p, i)
    elif code == LOG_SOFTMAX:
        _log_softmax_row(a, b, out, p, i)
    elif code == SOFTMAX_GRAD:
        _softmax_grad_row(a, b, out, p, i)
    else:
        _log_softmax_grad_row(a, b, out, p, i)


@njit(cache=True)
def _rows_serial(code, a, b, out):
    outer, _, inner = a.shape
    for r in range(outer * inner):
        _row(code, a, b, out, r // inner, r % inner)


@njit(cache=True, parallel=True)
def _rows_parallel(code, a, b, out):
    outer, _, inner = a.shape
    for r in prange(outer * inner):
        _row(code, a, b, out, r // inner, r % inner)


def _half_staged(code):
    """The rowwise kernel, also for float16: it runs in float32 on staged copies in the
    workspace (Numba cannot compute in float16) and rounds the result once."""
    from .conv import _staged

    inner = rowwise(code)
    return _staged(lambda op, ins, outs: 0, lambda op, ins, outs, ws: inner(op, ins, outs))


for _name, _code in (("Softmax", SOFTMAX), ("LogSoftmax", LOG_SOFTMAX),
                     ("SoftmaxGrad", SOFTMAX_GRAD), ("LogSoftmaxGrad", LOG_SOFTMAX_GRAD)):
    _ws, _make = _half_staged(_code)
    kernel(_name, workspace=_ws)(_make)

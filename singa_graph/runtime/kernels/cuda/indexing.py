"""CUDA kernels of the indexing ops of :mod:`..cpu.layout` (ops/indexing.py): Gather and
Take with their gradients, GatherElements, ScatterElements, OneHot, ConstantOfShape and
NonZero.

Indices. An index ``j`` of an axis of extent ``n`` reads entry ``j mod n`` (Python's modulo),
which is what the CPU kernels compute for every index they accept: negative indices count
from the end. The CPU kernels raise for indices outside ``[-n, n)`` (Gather's op checks its
constant indices at build time, Take checks its input at every run); a kernel cannot raise
without a device-to-host copy per step, so on the GPU such an index of Take, TakeGrad,
GatherElements or ScatterElements wraps around the axis instead, never reading or writing
outside its arrays.

Gather's indices are an op constant. Up to :data:`.layout.SMALL` of them travel as a launch
argument; more are declared as workspace and copied there from the host at every run (a
factory may not keep device memory of its own).

Scatter-adds. GatherGrad has constant indices, so its factory sorts them once on the host
into, for each entry of the axis, the list of positions that read it; the kernel then
*gathers* ``dx[.., j, ..] = sum of dy[.., k, ..]`` over that list in ascending ``k``: no
atomics, each output written once, and the same summation order as the CPU's ``np.add.at``.
TakeGrad's indices are device data that differ every run (an embedding's word ids), so
sorting them would cost more than the update: it adds with ``cuda.atomic.add`` (repeated
indices are common: the same word twice in a batch), which makes float sums depend on the
order the threads arrive in; results match the CPU within rounding, not bit for bit.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from ....errors import UnsupportedOpError
from ...registry import carve, carved_bytes, kernel
from .launch import (MAXD, _fill, contiguous_strides, copy_step, flat, noop, padded, scalar,
                     sequence, step)
from .layout import SMALL


def _split(x_shape, axis):
    """``(n, inner)``: the extent of ``axis`` and the size of the axes after it (a kernel
    views an array as (outer, n, inner))."""
    return int(x_shape[axis]), int(np.prod(x_shape[axis + 1:], dtype=np.int64))


# ---------------------------------------------------------------------- Gather / Take
@cuda.jit(cache=True)
def _gather(x, idx, y, n, q, inner):
    # y viewed (outer, q, inner) from x viewed (outer, n, inner); idx: array or tuple
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        r = i % inner
        t = i // inner
        k = t % q
        y[i] = x[((t // q) * n + idx[k] % n) * inner + r]


def _small(indices):
    """The indices as a :data:`SMALL`-tuple launch argument (padded with a valid index)."""
    vals = tuple(int(v) for v in indices.reshape(-1))
    return vals + (0,) * (SMALL - len(vals))


def _gather_ws(op, ins, outs):
    size = op.indices.size
    return 0 if size <= SMALL else carved_bytes(((size,), np.int64))


@kernel("Gather", "cuda", workspace=_gather_ws)
def gather(op, ins, outs, ws=None):
    (x,), (y,) = ins, outs
    n, inner = _split(tuple(x.shape), op.axis)
    q = op.indices.size
    if y.size == 0:
        return noop
    if q <= SMALL:
        return step(_gather, y.size, flat(x), _small(op.indices), flat(y), n, q, inner)
    (dev,) = carve(ws, ((q,), np.int64))
    host = np.ascontiguousarray(op.indices.reshape(-1), np.int64)
    launch = step(_gather, y.size, flat(x), dev, flat(y), n, q, inner)

    def run():
        dev.copy_to_device(host)
        launch()
    return run


@kernel("Take", "cuda")
def take(op, ins, outs):
    x, idx = ins
    (y,) = outs
    n, inner = _split(tuple(x.shape), op.axis)
    if y.size == 0:
        return noop
    if n == 0:  # no entry to read (the CPU raises); keep the output defined
        return step(_fill, y.size, flat(y), scalar(y.dtype, 0))
    return step(_gather, y.size, flat(x), flat(idx), flat(y), n, idx.size, inner)


@cuda.jit(cache=True)
def _gather_grad_scan(dy, idx, dx, n, q, inner, zero):
    # few indices: each dx element scans them all, in order
    for i in range(cuda.grid(1), dx.shape[0], cuda.gridsize(1)):
        r = i % inner
        t = i // inner
        j = t % n
        base = (t // n) * q * inner + r
        s = zero
        for k in range(q):
            if idx[k] % n == j:
                s += dy[base + k * inner]
        dx[i] = s


@cuda.jit(cache=True)
def _gather_grad_csr(dy, start, order, dx, n, q, inner, zero):
    # positions k reading entry j: order[start[j]:start[j + 1]], ascending
    for i in range(cuda.grid(1), dx.shape[0], cuda.gridsize(1)):
        r = i % inner
        t = i // inner
        j = t % n
        base = (t // n) * q * inner + r
        s = zero
        for p in range(start[j], start[j + 1]):
            s += dy[base + order[p] * inner]
        dx[i] = s


def _csr(indices, n):
    """``(start, order)``: the positions of ``indices`` (mod ``n``) grouped by entry."""
    j = np.mod(indices.reshape(-1).astype(np.int64), n)
    order = np.argsort(j, kind="stable")
    start = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(j, minlength=n), out=start[1:])
    return start, order.astype(np.int64)


def _gather_grad_ws(op, ins, outs):
    q, n = op.indices.size, op.shape[op.axis]
    return 0 if q <= SMALL else carved_bytes(((n + 1,), np.int64), ((q,), np.int64))


@kernel("GatherGrad", "cuda", workspace=_gather_grad_ws)
def gather_grad(op, ins, outs, ws=None):
    (dy,), (dx,) = ins, outs
    n, inner = _split(tuple(dx.shape), op.axis)
    q = op.indices.size
    zero = scalar(dx.dtype, 0)  # sums start from +0, as the CPU's zeroed dx
    if dx.size == 0:
        return noop
    if dy.size == 0:  # nothing gathered: the gradient is zero
        return step(_fill, dx.size, flat(dx), zero)
    if q <= SMALL:
        return step(_gather_grad_scan, dx.size, flat(dy), _small(op.indices), flat(dx), n, q,
                    inner, zero)
    start, order = _csr(op.indices, n)
    d_start, d_order = carve(ws, ((n + 1,), np.int64), ((q,), np.int64))
    launch = step(_gather_grad_csr, dx.size, flat(dy), d_start, d_order, flat(dx), n, q,
                  inner, zero)

    def run():
        d_start.copy_to_device(start)
        d_order.copy_to_device(order)
        launch()
    return run


@cuda.jit(cache=True)
def _take_grad(dy, idx, dx, n, q, inner):
    for i in range(cuda.grid(1), dy.shape[0], cuda.gridsize(1)):
        r = i % inner
        t = i // inner
        k = t % q
        cuda.atomic.add(dx, ((t // q) * n + idx[k] % n) * inner + r, dy[i])


@kernel("TakeGrad", "cuda")
def take_grad(op, ins, outs):
    dy, idx = ins
    (dx,) = outs
    n, inner = _split(tuple(dx.shape), op.axis)
    if dx.size == 0:  # also an axis of extent 0, where no index is valid (the CPU raises)
        return noop
    zero = step(_fill, dx.size, flat(dx), scalar(dx.dtype, 0))
    add = step(_take_grad, dy.size, flat(dy), flat(idx), flat(dx), n, idx.size, inner)

    return sequence([zero, add])


# ---------------------------------------------------------------------- along an axis
@cuda.jit(device=True)
def _along(i, shape, strides, axis, j):
    """The offset, in an array of ``strides``, of element ``i`` of an array of ``shape``
    with its coordinate along ``axis`` replaced by ``j``."""
    off = 0
    for d in range(MAXD - 1, -1, -1):
        n = shape[d]
        off += (j if d == axis else i % n) * strides[d]
        i //= n
    return off


@cuda.jit(cache=True)
def _gather_elements(x, idx, y, shape, xstrides, axis, n):
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        y[i] = x[_along(i, shape, xstrides, axis, idx[i] % n)]


def _axis_args(op, x, idx):
    """Padded shape of ``idx``, padded strides of ``x``, the padded axis and its extent."""
    nd = len(x.shape)
    return (padded(idx.shape), padded(contiguous_strides(x.shape), 0), op.axis + MAXD - nd,
            int(x.shape[op.axis]))


@kernel("GatherElements", "cuda")
def gather_elements(op, ins, outs):
    x, idx = ins
    (y,) = outs
    shape, strides, axis, n = _axis_args(op, x, idx)
    if n == 0 and y.size:
        return step(_fill, y.size, flat(y), scalar(y.dtype, 0))
    return step(_gather_elements, y.size, flat(x), flat(idx), flat(y), shape, strides, axis,
                n)


@cuda.jit(cache=True)
def _scatter_elements(upd, idx, y, shape, ystrides, axis, n, along):
    # numpy writes repeated targets in order, so the last update wins; repeats share every
    # coordinate but the axis one, so an update is skipped when a later one along the axis
    # hits the same target (no two threads write one element)
    for i in range(cuda.grid(1), upd.shape[0], cuda.gridsize(1)):
        j = idx[i] % n
        k = (i // along) % shape[axis]
        last = True
        for k2 in range(1, shape[axis] - k):
            if idx[i + k2 * along] % n == j:
                last = False
                break
        if last:
            y[_along(i, shape, ystrides, axis, j)] = upd[i]


@kernel("ScatterElements", "cuda")
def scatter_elements(op, ins, outs):
    x, idx, upd = ins
    (y,) = outs
    if getattr(op, "reduction", "none") != "none":
        raise UnsupportedOpError(f"ScatterElements with reduction={op.reduction!r} has no "
                                 "CUDA kernel yet (the CPU runs it)")
    shape, strides, axis, n = _axis_args(op, x, idx)
    along = contiguous_strides(idx.shape)[op.axis] if len(idx.shape) else 1
    copy = copy_step(x, y)
    if idx.size == 0 or n == 0:
        return copy
    write = step(_scatter_elements, upd.size, flat(upd), flat(idx), flat(y), shape, strides,
                 axis, n, along)

    return sequence([copy, write])


# ---------------------------------------------------------------------- constants
@cuda.jit(cache=True)
def _onehot(ind, y, depth, inner, off, on):
    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):
        r = i % inner
        t = i // inner
        c = t % depth
        v = int(ind[(t // depth) * inner + r])  # truncated, as astype(int64)
        y[i] = on if v % depth == c else off


@kernel("OneHot", "cuda")
def onehot(op, ins, outs):
    (ind,), (y,) = ins, outs
    inner = int(np.prod(tuple(ind.shape)[op.axis:], dtype=np.int64))
    off, on = (scalar(y.dtype, v) for v in op.values)
    return step(_onehot, y.size, flat(ind), flat(y), op.depth, max(inner, 1), off, on)


@kernel("ConstantOfShape", "cuda")
def constant_of_shape(op, ins, outs):
    (y,) = outs
    return step(_fill, y.size, flat(y), scalar(y.dtype, op.value))


@kernel("NonZero", "cuda")
def nonzero(op, ins, outs):
    """NonZero's output shape depends on the values of ``x``, so the op exists only for
    concrete tensors (eager mode): the step copies ``x`` to the host, finds the indices
    with numpy and copies them back. Not a kernel, and it synchronises with the device."""
    (x,), (y,) = ins, outs

    def run():
        if y.size == 0:
            return
        host = np.empty(tuple(x.shape), x.dtype)
        x.copy_to_host(host)
        y.copy_to_device(np.ascontiguousarray(np.array(np.nonzero(host), np.int64)))
    return run



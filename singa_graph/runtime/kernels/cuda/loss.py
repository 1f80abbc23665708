"""CUDA kernels of :mod:`..cpu.loss`: the losses (one (1,) output each, accumulated in
float64), their fused gradients, and ArgMax.

SoftmaxCrossEntropy gives each row of logits to a group of threads (:func:`.reduce.width`:
one thread per row of ten classes, a block per row of thousands): the row's max and sum of
exponentials are shared-memory trees, lane 0 of each group keeps the sum of its rows' terms,
and a block tree adds those up. CrossEntropy and MeanSquareError stride each block over the
flat arrays and end in a block tree. A loss over a small batch is then one block and one
launch; a big one spreads over several blocks, whose partials (workspace) a second launch of
:mod:`.reduce`'s kernel adds up and divides by the batch.

The gradients are one launch each: SoftmaxCrossEntropyGrad recomputes each row's
log-sum-exp as the forward does; the others are elementwise. The scalar incoming gradient
``dy`` is read on the device. Class labels are checked against the class count when they are
fed (runtime/checks.py); a label out of range that gets here all the same cannot raise on a
GPU, so its row's loss term and gradient become NaN where the CPU kernel raises.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda, float32, float64, int64

from ...registry import carve, carved_bytes, kernel
from .activation import row_max, rows3, typed
from .launch import TPB, flat, launcher, noop, step
from .reduce import (F0, FILL, MEAN, SPLIT_MIN, grid, partials_step, tree_sum, tree_sum2,
                     width)

NAN = math.nan
INF = math.inf


def _batch(shape) -> float:
    """SINGA's divisor N: the first dimension (1 for a scalar, never 0)."""
    return float(max(shape[0], 1) if len(shape) else 1)


def loss_blocks(groups: int, w: int, size: int) -> int:
    """Blocks for a loss over ``size`` elements in ``groups`` groups of ``w`` threads: one
    (and one launch) below ``2 * SPLIT_MIN`` elements, else enough to spread the work, at
    most :data:`.reduce.FILL`."""
    if size < 2 * SPLIT_MIN:
        return 1
    return max(1, min(grid(groups, w), -(-size // SPLIT_MIN), FILL))


@cuda.jit(device=True)
def _block_total(acc, out, part, vb, nb, div, shd):
    """Add ``acc`` over the block; thread 0 writes the loss (``nb`` == 1) or the partial of
    virtual block ``vb``."""
    t = cuda.threadIdx.x
    acc = tree_sum(shd, acc, t, TPB)
    if t == 0:
        if nb == 1:
            out[0] = acc / div
        else:
            part[vb] = acc


# ---------------------------------------------------------------------- softmax cross-entropy
@cuda.jit(device=True)
def _sce_body(x, t, labels, out, part, nb, nrows, c, w, div, shv, shd, sh2):
    tid = cuda.threadIdx.x
    lane = tid % w
    per = TPB // w
    for vb in range(cuda.blockIdx.x, nb, cuda.gridDim.x):
        acc = _sce_rows(x, t, labels, vb, nb, nrows, c, w, lane, per, shv, shd, sh2)
        _block_total(acc, out, part, vb, nb, div, shd)


@cuda.jit(device=True)
def _sce_rows(x, t, labels, vb, nb, nrows, c, w, lane, per, shv, shd, sh2):
    """The sum of the loss terms of virtual block ``vb``'s rows, in lane 0 of each group."""
    tid = cuda.threadIdx.x
    acc = F0
    for r0 in range(vb * per, nrows, nb * per):
        r = r0 + tid // w
        live = r < nrows
        base = r * c if live else 0
        m = row_max(x, base, c, 1, live, lane, w, shv)
        s = F0
        st = F0
        stx = F0
        if live:
            for k in range(lane, c, w):
                v = x[base + k]
                s += math.exp(v - m)
                if not labels:
                    tv = t[base + k]
                    st += tv
                    stx += tv * v
        if labels:
            s = tree_sum(shd, s, lane, w)
        else:
            s, st = tree_sum2(sh2, s, st, lane, w)
            stx = tree_sum(shd, stx, lane, w)
        if live and lane == 0:
            lse = m + math.log(s)
            if labels:
                k = int(t[r])  # int() lets the probabilities' variant compile this too
                acc += lse - x[base + k] if 0 <= k < c else NAN
            else:  # sum_c t_c (lse - x_c)
                acc += lse * st - stx
    return acc


@cuda.jit(cache=True)
def _sce_f32(x, t, labels, out, part, nb, nrows, c, w, div):
    shv = cuda.shared.array(TPB, float32)
    shd = cuda.shared.array(TPB, float64)
    sh2 = cuda.shared.array((2, TPB), float64)
    _sce_body(x, t, labels, out, part, nb, nrows, c, w, div, shv, shd, sh2)


@cuda.jit(cache=True)
def _sce_f64(x, t, labels, out, part, nb, nrows, c, w, div):
    shv = cuda.shared.array(TPB, float64)
    shd = cuda.shared.array(TPB, float64)
    sh2 = cuda.shared.array((2, TPB), float64)
    _sce_body(x, t, labels, out, part, nb, nrows, c, w, div, shv, shd, sh2)


def _sce_blocks(x):
    n, c = (int(s) for s in x.shape)
    return loss_blocks(n, width(c), n * c)


def _partials_ws(blocks_of):
    def workspace(op, ins, outs):
        nb = blocks_of(ins[0])
        return carved_bytes(((nb,), np.float64)) if nb > 1 else 0
    return workspace


def _loss_step(kern, nb, head, tail, out, ws, div):
    """A loss step: ``kern(*head, out, part, nb, *tail, div)`` over ``nb`` blocks, then,
    when there are several, the sum of their partials divided by ``div`` into ``out``.

    The kernels loop over ``nb`` *virtual* blocks, so what they compute does not depend on
    the grid they run on."""
    fo = flat(out)
    if nb == 1:
        launch = launcher(kern, 1, TPB)
        return lambda: launch(*head, fo, fo, 1, *tail, div)
    part = carve(ws, ((nb,), np.float64))[0]
    launch = launcher(kern, nb, TPB)
    finish = partials_step(part, fo, 1, nb, MEAN, div)

    def run():
        launch(*head, fo, part, nb, *tail, div)
        finish()
    return run


@kernel("SoftmaxCrossEntropy", "cuda", workspace=_partials_ws(_sce_blocks))
def softmax_cross_entropy(op, ins, outs, ws):
    x, t = ins
    n, c = (int(s) for s in x.shape)
    kern = typed((_sce_f32, _sce_f64), op, x.dtype)
    labels = np.dtype(t.dtype).kind != "f"
    w = width(c)
    return _loss_step(kern, _sce_blocks(x), (flat(x), flat(t), labels), (n, c, w), outs[0],
                      ws, _batch(x.shape))


@cuda.jit(device=True)
def _sce_grad_body(x, t, labels, dy, div, dx, nrows, c, w, shv, sh2):
    tid = cuda.threadIdx.x
    lane = tid % w
    per = TPB // w
    g = dy[0] / div
    for r0 in range(cuda.blockIdx.x * per, nrows, cuda.gridDim.x * per):
        r = r0 + tid // w
        live = r < nrows
        base = r * c if live else 0
        m = row_max(x, base, c, 1, live, lane, w, shv)
        s = F0
        st = F0
        if live:
            for k in range(lane, c, w):
                s += math.exp(x[base + k] - m)
                if not labels:
                    st += t[base + k]
        s, st = tree_sum2(sh2, s, st, lane, w)
        if live:
            lse = m + math.log(s)
            if labels:
                lab = t[r]
                bad = lab < 0 or lab >= c
                for k in range(lane, c, w):
                    v = math.exp(x[base + k] - lse) * g
                    if k == lab:
                        v -= g
                    dx[base + k] = NAN if bad else v
            else:
                for k in range(lane, c, w):
                    dx[base + k] = (math.exp(x[base + k] - lse) * st - t[base + k]) * g


@cuda.jit(cache=True)
def _sce_grad_f32(x, t, labels, dy, div, dx, nrows, c, w):
    shv = cuda.shared.array(TPB, float32)
    sh2 = cuda.shared.array((2, TPB), float64)
    _sce_grad_body(x, t, labels, dy, div, dx, nrows, c, w, shv, sh2)


@cuda.jit(cache=True)
def _sce_grad_f64(x, t, labels, dy, div, dx, nrows, c, w):
    shv = cuda.shared.array(TPB, float64)
    sh2 = cuda.shared.array((2, TPB), float64)
    _sce_grad_body(x, t, labels, dy, div, dx, nrows, c, w, shv, sh2)


@kernel("SoftmaxCrossEntropyGrad", "cuda")
def softmax_cross_entropy_grad(op, ins, outs):
    x, t, dy = ins
    (dx,) = outs
    n, c = (int(s) for s in x.shape)
    if dx.size == 0:
        return noop
    kern = typed((_sce_grad_f32, _sce_grad_f64), op, x.dtype)
    w = width(c)
    launch = launcher(kern, grid(n, w), TPB)
    args = (flat(x), flat(t), np.dtype(t.dtype).kind != "f", flat(dy), _batch(x.shape),
            flat(dx), n, c, w)
    return lambda: launch(*args)


# ---------------------------------------------------------------------- flat losses
CE, MSE = 0, 1


@cuda.jit(device=True)
def _log(v):
    # IEEE log (-inf at 0, NaN below) without the simulator's math-domain exception
    if v > 0:
        return math.log(v)
    return -INF if v == 0 else NAN


@cuda.jit(cache=True)
def _flat_loss(code, a, b, out, part, nb, n, div):
    shd = cuda.shared.array(TPB, float64)
    for vb in range(cuda.blockIdx.x, nb, cuda.gridDim.x):
        acc = F0
        for i in range(vb * TPB + cuda.threadIdx.x, n, nb * TPB):
            if code == CE:
                if b[i] != 0:  # t == 0 adds nothing, even where y == 0
                    acc -= b[i] * _log(F0 + a[i])
            else:
                d = F0 + a[i] - b[i]
                acc += d * d
        _block_total(acc, out, part, vb, nb, div, shd)


def _flat_blocks(a):
    size = int(np.prod(tuple(a.shape), dtype=np.int64))
    return loss_blocks(-(-size // TPB), TPB, size)


def _flat_factory(code):
    def factory(op, ins, outs, ws):
        a, b = ins
        div = _batch(a.shape) if code == CE else float(max(a.size, 1))
        return _loss_step(_flat_loss, _flat_blocks(a), (code, flat(a), flat(b)), (a.size,),
                          outs[0], ws, div)
    return factory


kernel("CrossEntropy", "cuda", workspace=_partials_ws(_flat_blocks))(_flat_factory(CE))
kernel("MeanSquareError", "cuda", workspace=_partials_ws(_flat_blocks))(_flat_factory(MSE))


@cuda.jit(cache=True)
def _flat_grad(code, a, b, dy, scale, dx):
    g = dy[0] * scale
    for i in range(cuda.grid(1), dx.shape[0], cuda.gridsize(1)):
        if code == CE:  # -t / y (-inf where y == 0 and t > 0, as IEEE), 0 where t == 0
            dx[i] = -b[i] / a[i] * g if b[i] != 0 else 0
        else:
            dx[i] = (a[i] - b[i]) * g


@kernel("CrossEntropyGrad", "cuda")
def cross_entropy_grad(op, ins, outs):
    y, t, dy = ins
    scale = np.float64(1.0 / _batch(y.shape))
    return step(_flat_grad, y.size, CE, flat(y), flat(t), flat(dy), scale, flat(outs[0]))


@kernel("MeanSquareErrorGrad", "cuda")
def mse_grad(op, ins, outs):
    x, t, dy = ins
    scale = np.float64(2.0 / max(x.size, 1))
    return step(_flat_grad, x.size, MSE, flat(x), flat(t), flat(dy), scale, flat(outs[0]))


# ---------------------------------------------------------------------- argmax
@cuda.jit(device=True)
def _better(v, i, bv, bi):
    """Whether (v, i) beats (bv, bi) under np.argmax's rules: the first NaN wins, else the
    largest value, the lowest index on ties."""
    if v != v:
        return bv == bv or i < bi
    if bv != bv:
        return False
    return v > bv or (v == bv and i < bi)


@cuda.jit(device=True)
def _argmax_body(x, y, n, inner, nrows, w, shv, shi):
    t = cuda.threadIdx.x
    lane = t % w
    per = TPB // w
    for r0 in range(cuda.blockIdx.x * per, nrows, cuda.gridDim.x * per):
        r = r0 + t // w
        live = r < nrows
        base = (r // inner) * n * inner + r % inner if live else 0
        bv = x[base]
        bi = n  # no element yet: loses to any
        if live:
            for k in range(lane, n, w):  # increasing k: ties keep the first
                v = x[base + k * inner]
                if bi == n or _better(v, k, bv, bi):
                    bv = v
                    bi = k
        if w > 1:
            shv[t] = bv
            shi[t] = bi
            cuda.syncthreads()
            s = w // 2
            while s > 0:
                if lane < s:
                    oi = shi[t + s]
                    if oi < n and (shi[t] == n or _better(shv[t + s], oi, shv[t], shi[t])):
                        shv[t] = shv[t + s]
                        shi[t] = oi
                cuda.syncthreads()
                s //= 2
            bi = shi[t]
            cuda.syncthreads()
        if live and lane == 0:
            y[r] = bi


@cuda.jit(cache=True)
def _argmax_f32(x, y, n, inner, nrows, w):
    # the values' tree holds their own dtype: float32 compared as float32, as np.argmax
    _argmax_body(x, y, n, inner, nrows, w, cuda.shared.array(TPB, float32),
                 cuda.shared.array(TPB, int64))


@cuda.jit(cache=True)
def _argmax_f64(x, y, n, inner, nrows, w):
    _argmax_body(x, y, n, inner, nrows, w, cuda.shared.array(TPB, float64),
                 cuda.shared.array(TPB, int64))


@cuda.jit(cache=True)
def _argmax_i(x, y, n, inner, nrows, w):
    # integer values compared as integers (int64 beyond 2**53 would not survive float64)
    _argmax_body(x, y, n, inner, nrows, w, cuda.shared.array(TPB, int64),
                 cuda.shared.array(TPB, int64))


@kernel("ArgMax", "cuda")
def argmax(op, ins, outs):
    (x,), (y,) = ins, outs
    outer, n, inner = rows3(x.shape, op.axis)
    nrows = outer * inner
    if nrows == 0:
        return noop
    dt = np.dtype(x.dtype)
    kern = _argmax_i if dt.kind in "biu" else _argmax_f32 if dt == np.float32 else _argmax_f64
    w = width(n)
    launch = launcher(kern, grid(nrows, w), TPB)
    fx, fy = flat(x), flat(y)
    return lambda: launch(fx, fy, n, inner, nrows, w)


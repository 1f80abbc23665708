"""GatherND, ScatterND, TopK, CumProd, ReverseSequence: numpy indexing, ``ufunc.at`` for
the scatter reductions, a stable argsort for TopK (ties keep the lower index first) and
``cumprod`` over (possibly reversed) views; Det by LU in a Numba loop over float64
workspace."""
from __future__ import annotations

import numpy as np
from numba import njit

from ...registry import carve, carved_bytes, kernel

_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@kernel("GatherND")
def gather_nd(op, ins, outs):
    (x, idx), (y,) = ins, outs
    b, k = op.batch_dims, idx.shape[-1]
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    xb = x.reshape((batch,) + x.shape[b:])
    ib = idx.reshape(batch, -1, k)
    yb = y.reshape(batch, ib.shape[1], -1)

    def step():
        for i in range(batch):
            sel = xb[i][tuple(ib[i, :, j] for j in range(k))]
            yb[i] = sel.reshape(yb.shape[1:])
    return step


@kernel("ScatterND")
def scatter_nd(op, ins, outs):
    (x, idx, upd), (y,) = ins, outs
    k = idx.shape[-1]
    idx2 = idx.reshape(-1, k)
    upd2 = upd.reshape((idx2.shape[0],) + x.shape[k:])
    at = _AT.get(op.reduction)

    def step():
        np.copyto(y, x)
        where = tuple(idx2[:, j] for j in range(k))
        if at is None:
            y[where] = upd2
        else:
            at.at(y, where, upd2)
    return step


@kernel("TopK")
def topk(op, ins, outs):
    (x,), (vals, inds) = ins, outs
    a, k = op.axis, op.k
    first = (slice(None),) * a + (slice(0, k),)

    def step():
        if op.largest:  # an order-reversing key: ~x has no overflow at the integers' ends
            key = -x if x.dtype.kind == "f" else ~x
        else:
            key = x
        order = np.argsort(key, axis=a, kind="stable")[first]
        np.copyto(inds, order)
        np.copyto(vals, np.take_along_axis(x, order, a))
    return step


@kernel("CumProd")
def cumprod(op, ins, outs):
    (x,), (y,) = ins, outs
    a = op.axis
    rev = (slice(None),) * a + (slice(None, None, -1),)
    xs, ys = (x[rev], y[rev]) if op.reverse else (x, y)
    head = (slice(None),) * a + (slice(0, 1),)
    if op.exclusive:
        src = xs[(slice(None),) * a + (slice(0, -1),)]
        dst = ys[(slice(None),) * a + (slice(1, None),)]

    def step():
        if x.shape[a] == 0:
            return
        if op.exclusive:
            ys[head] = 1
            np.cumprod(src, axis=a, out=dst)
        else:
            np.cumprod(xs, axis=a, out=ys)
    return step


@kernel("ReverseSequence")
def reverse_sequence(op, ins, outs):
    (x, lengths), (y,) = ins, outs
    b, t = op.batch_axis, op.time_axis

    def step():
        np.copyto(y, x)
        for i, n in enumerate(lengths):
            n = int(n)
            xi, yi = np.take(x, i, axis=b), np.moveaxis(y, b, 0)[i]
            t2 = t if t < b else t - 1
            src = np.moveaxis(xi, t2, 0)[:n][::-1]
            np.moveaxis(yi, t2, 0)[:n] = src
    return step


@kernel("Unique")
def unique(op, ins, outs):
    from ....ops.by_value import unique_values

    (x,) = ins

    def step():
        for o, v in zip(outs, unique_values(x, op.axis, op.sorted)):
            np.copyto(o, v)
    return step


@kernel("NonMaxSuppression")
def non_max_suppression(op, ins, outs):
    (boxes, scores), (y,) = ins, outs
    return lambda: np.copyto(y, op.select(boxes, scores))


@njit(cache=True)
def _det(a, out):
    """``out[i] = det(a[i])`` by LU with partial pivoting, in place in ``a``."""
    m, n = a.shape[0], a.shape[1]
    for i in range(m):
        d = 1.0
        for c in range(n):
            p = c
            for r in range(c + 1, n):
                if abs(a[i, r, c]) > abs(a[i, p, c]):
                    p = r
            if a[i, p, c] == 0.0:
                d = 0.0
                break
            if p != c:
                for j in range(n):
                    a[i, c, j], a[i, p, j] = a[i, p, j], a[i, c, j]
                d = -d
            d *= a[i, c, c]
            for r in range(c + 1, n):
                f = a[i, r, c] / a[i, c, c]
                for j in range(c + 1, n):
                    a[i, r, j] -= f * a[i, c, j]
        out[i] = d


def _det_spec(op, ins, outs):
    return [(tuple(ins[0].shape), np.float64), (tuple(outs[0].shape), np.float64)]


@kernel("Det", workspace=lambda op, ins, outs: carved_bytes(*_det_spec(op, ins, outs)))
def det(op, ins, outs, ws):
    (x,), (y,) = ins, outs
    a, d = carve(ws, *_det_spec(op, ins, outs))
    n = x.shape[-1]
    a3, d1 = a.reshape(-1, n, n), d.reshape(-1)

    def step():
        np.copyto(a, x)
        _det(a3, d1)
        np.copyto(y, d)
    return step


@kernel("TfIdfVectorizer")
def tfidf_vectorizer(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.copyto(y, op.counts(x))


@kernel("TreeEnsemble")
def tree_ensemble(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.copyto(y, op.predict(x))

"""N-d max/average/Lp pooling with dilations: the input padded into planned workspace, then
one numpy ufunc per tap over strided views of it (a window of k taps is k passes over the
output, each contiguous along the last axis)."""
from __future__ import annotations

import numpy as np

from ...registry import carve, carved_bytes, kernel


def _cdtype(x):
    return np.float32 if x.dtype == np.float16 else x.dtype


def _specs(op, ins, outs):
    x, y = ins[0], outs[0]
    specs = [(op.padded_shape(x.shape), _cdtype(x)), (tuple(y.shape), _cdtype(x))]
    return specs + [(tuple(y.shape), np.bool_)] if getattr(op, "indices", False) else specs


def _tap_indices(op, x_shape, offsets):
    """Per tap, the flat spatial index in x of each window's tap, shape (1, 1, *out)."""
    k = len(op.kernel)
    spatial = x_shape[2:]
    out = []
    for offs in offsets:
        coords = [np.arange(o) * s + t * d - op.pads[i] for i, (o, s, t, d) in
                  enumerate(zip(op.out_spatial, op.strides, offs, op.dilations))]
        grid = np.meshgrid(*coords, indexing="ij")
        if getattr(op, "storage_order", 0):  # column-major: the first axis varies fastest
            flat = np.ravel_multi_index(grid[::-1], spatial[::-1], mode="clip")
        else:
            flat = np.ravel_multi_index(grid, spatial, mode="clip")
        out.append(flat.reshape((1, 1) + op.out_spatial))
    return out


@kernel("PoolNd", workspace=lambda op, ins, outs: carved_bytes(*_specs(op, ins, outs)))
def pool_nd(op, ins, outs, ws):
    (x,), y = ins, outs[0]
    parts = carve(ws, *_specs(op, ins, outs))
    pad, acc = parts[:2]
    if len(outs) > 1:
        return _max_with_indices(op, x, y, outs[1], pad, acc, parts[2])
    if y.dtype == acc.dtype:
        acc = y
    k = len(op.kernel)
    inner = pad[(slice(None),) * 2 + tuple(slice(b, b + n) for b, n in
                                           zip(op.pads[:k], x.shape[2:]))]
    if op.kind == "max":
        fill = -np.inf if pad.dtype.kind == "f" else np.iinfo(pad.dtype).min
    else:
        fill = 0
    views = []
    for offs in np.ndindex(*op.kernel):
        views.append(pad[(slice(None),) * 2 + tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offs, op.dilations, op.strides, y.shape[2:]))])
    counts = op.counts(x.shape).astype(acc.dtype) if op.kind == "avg" else None
    combine = np.maximum if op.kind == "max" else np.add

    def step():
        pad.fill(fill)
        np.copyto(inner, x, casting="unsafe")
        if op.kind == "lp":
            np.abs(pad, out=pad)
            np.power(pad, op.p, out=pad)
        np.copyto(acc, views[0])
        for v in views[1:]:
            combine(acc, v, out=acc)
        if counts is not None:
            np.divide(acc, counts, out=acc)
        elif op.kind == "lp":
            np.power(acc, 1.0 / op.p, out=acc)
        if acc is not y:
            np.copyto(y, acc, casting="unsafe")
    return step


def _col2im_spec(op, ins, outs):
    y = outs[0]
    return [(op.padded_shape(y.shape[0], y.shape[1]), y.dtype)]


@kernel("Col2Im", workspace=lambda op, ins, outs: carved_bytes(*_col2im_spec(op, ins, outs)))
def col2im(op, ins, outs, ws):
    (x,), (y,) = ins, outs
    (pad,) = carve(ws, *_col2im_spec(op, ins, outs))
    k = len(op.block)
    n, c = y.shape[:2]
    wins = op.windows()
    cols = x.reshape((n, c) + op.block + wins)
    inner = pad[(slice(None),) * 2 + tuple(slice(b, b + s) for b, s in
                                           zip(op.pads[:k], op.image))]
    pairs = []
    for offs in np.ndindex(*op.block):
        dst = pad[(slice(None),) * 2 + tuple(
            slice(o * d, o * d + s * (w - 1) + 1, s)
            for o, d, s, w in zip(offs, op.dilations, op.strides, wins))]
        pairs.append((dst, cols[(slice(None),) * 2 + offs]))

    def step():
        pad.fill(0)
        for dst, src in pairs:
            np.add(dst, src, out=dst)
        np.copyto(y, inner)
    return step


def _max_with_indices(op, x, y, ind, pad, acc, mask):
    k = len(op.kernel)
    inner = pad[(slice(None),) * 2 + tuple(slice(b, b + n) for b, n in
                                           zip(op.pads[:k], x.shape[2:]))]
    offsets = list(np.ndindex(*op.kernel))
    views = [pad[(slice(None),) * 2 + tuple(
        slice(o * d, o * d + s * (n - 1) + 1, s)
        for o, d, s, n in zip(offs, op.dilations, op.strides, y.shape[2:]))]
        for offs in offsets]
    taps = _tap_indices(op, x.shape, offsets)
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * plane).reshape(
        x.shape[:2] + (1,) * k)
    low = -np.inf if pad.dtype.kind == "f" else np.iinfo(pad.dtype).min

    def step():
        pad.fill(low)
        np.copyto(inner, x, casting="unsafe")
        np.copyto(acc, views[0])
        np.copyto(ind, taps[0])
        for v, t in zip(views[1:], taps[1:]):
            np.greater(v, acc, out=mask)  # strictly: the first maximum keeps its index
            np.copyto(acc, v, where=mask)
            np.copyto(ind, t, where=mask)
        np.add(ind, base, out=ind)
        if acc is not y:
            np.copyto(y, acc, casting="unsafe")
    return step

"""Kernels of ops/layout.py and ops/indexing.py: numpy copies through views prepared once
(broadcast views for Tile/Upsample, reshaped-transposed views for Depth/SpaceToDepth)."""
import numpy as np

from ....errors import ShapeError
from ...registry import kernel
from .shape import reshape as _reshape_kernel

kernel("Squeeze")(_reshape_kernel)
kernel("Unsqueeze")(_reshape_kernel)


@kernel("Shape")
def shape(op, ins, outs):
    (y,) = outs
    value = op._value
    return lambda: np.copyto(y, value)


@kernel("Slice")
def slice_(op, ins, outs):
    (x,), (y,) = ins, outs
    src = x[op._index]
    return lambda: np.copyto(y, src)


@kernel("SliceGrad")
def slice_grad(op, ins, outs):
    (dy,), (dx,) = ins, outs
    dst = dx[op._index]

    def step():
        dx.fill(0)
        np.copyto(dst, dy)
    return step


def _broadcast_copy(op, ins, outs):
    (x,), (y,) = ins, outs
    y_view, x_view = op._views
    dst, src = y.reshape(y_view), x.reshape(x_view)
    return lambda: np.copyto(dst, src)


kernel("Tile")(_broadcast_copy)
kernel("Upsample")(_broadcast_copy)


@kernel("DepthToSpace")
@kernel("SpaceToDepth")
def block_move(op, ins, outs):
    (x,), (y,) = ins, outs
    src = x.reshape(op._src).transpose(op._perm)
    dst = y.reshape(op._dst)
    return lambda: np.copyto(dst, src)


@kernel("Pad")
def pad(op, ins, outs):
    (x,), (y,) = ins, outs
    n = x.ndim
    begin, end = op.pads[:n], op.pads[n:]
    centre = y[tuple(np.s_[b:b + s] for b, s in zip(begin, x.shape))]
    # numpy's order: axis by axis, each over the full extent of the axes already padded
    fills = []
    for a in range(n):
        b, e, s = begin[a], end[a], x.shape[a]
        if op.mode == "constant" or not (b or e):
            continue
        lead = tuple(np.s_[:] for _ in range(a))
        tail = tuple(np.s_[bb:bb + ss] for bb, ss in zip(begin[a + 1:], x.shape[a + 1:]))
        view = y[lead + (np.s_[:],) + tail]
        if op.mode == "edge":
            fills.append((view[(np.s_[:],) * a + (np.s_[:b],)],
                          view[(np.s_[:],) * a + (np.s_[b:b + 1],)]))
            fills.append((view[(np.s_[:],) * a + (np.s_[b + s:],)],
                          view[(np.s_[:],) * a + (np.s_[b + s - 1:b + s],)]))
        else:  # reflect: full index i < b takes 2b - i; i >= b + s takes 2(b + s - 1) - i
            fills.append((view[(np.s_[:],) * a + (np.s_[:b],)],
                          view[(np.s_[:],) * a + (np.s_[2 * b:b:-1],)]))
            last = b + s - 1
            stop = last - e - 1
            fills.append((view[(np.s_[:],) * a + (np.s_[b + s:],)],
                          view[(np.s_[:],) * a + (np.s_[last - 1:stop if stop >= 0 else None:-1],)]))
    constant = y.dtype.type(op.constant)

    def step():
        if op.mode == "constant":
            y.fill(constant)
        np.copyto(centre, x)
        for dst, src in fills:
            np.copyto(dst, src)
    return step


@kernel("Gather")
def gather(op, ins, outs):
    (x,), (y,) = ins, outs
    idx = op.indices
    # indices are range-checked by the op, so 'wrap' only maps negatives (and avoids the copy
    # numpy makes for mode='raise' with out=)
    return lambda: np.take(x, idx, axis=op.axis, out=y, mode="wrap")


@kernel("GatherGrad")
def gather_grad(op, ins, outs):
    (dy,), (dx,) = ins, outs
    index = (np.s_[:],) * op.axis + (op.indices,)

    def step():
        dx.fill(0)
        np.add.at(dx, index, dy)
    return step


def _check_range(idx, n):
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ShapeError(f"take: indices out of range [-{n}, {n})")


@kernel("Take")
def take(op, ins, outs):
    x, idx = ins
    (y,) = outs
    n = x.shape[op.axis]

    def step():
        _check_range(idx, n)
        np.take(x, idx, axis=op.axis, out=y, mode="wrap")
    return step


@kernel("TakeGrad")
def take_grad(op, ins, outs):
    dy, idx = ins
    (dx,) = outs
    lead = (np.s_[:],) * op.axis

    def step():
        dx.fill(0)
        np.add.at(dx, lead + (idx,), dy)
    return step


@kernel("GatherElements")
def gather_elements(op, ins, outs):
    x, idx = ins
    (y,) = outs
    return lambda: np.copyto(y, np.take_along_axis(x, idx, op.axis))


@kernel("ScatterElements")
def scatter_elements(op, ins, outs):
    x, idx, upd = ins
    (y,) = outs

    at = {"add": np.add, "mul": np.multiply, "max": np.maximum,
          "min": np.minimum}.get(getattr(op, "reduction", "none"))

    def step():
        np.copyto(y, x)
        if at is None:
            np.put_along_axis(y, idx, upd, op.axis)
            return
        where = list(np.indices(idx.shape, sparse=True))
        where[op.axis] = np.where(idx < 0, idx + x.shape[op.axis], idx)
        at.at(y, tuple(where), upd)
    return step


@kernel("NonZero")
def nonzero(op, ins, outs):
    (x,), (y,) = ins, outs

    def step():
        for row, ix in zip(y, np.nonzero(x)):
            row[...] = ix
    return step


@kernel("ConstantOfShape")
def constant_of_shape(op, ins, outs):
    (y,) = outs
    return lambda: y.fill(op.value)


@kernel("OneHot")
def onehot(op, ins, outs):
    (ind,), (y,) = ins, outs
    off, on = op.values
    shape = [1] * y.ndim
    shape[op.axis] = op.depth
    classes = np.arange(op.depth).reshape(shape)

    def step():
        hot = np.expand_dims(np.mod(ind.astype(np.int64), op.depth), op.axis) == classes
        np.copyto(y, np.where(hot, on, off))
    return step

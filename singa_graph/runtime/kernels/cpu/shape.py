"""Data-movement kernels. Reshape/Flatten outputs alias their input inside a plan, so the
kernel only copies when the memory planner (or eager mode) gave them separate buffers."""
import numpy as np

from ...registry import kernel


def _noop():
    pass


@kernel("Reshape")
@kernel("Flatten")
def reshape(op, ins, outs):
    (x,), (y,) = ins, outs
    if np.shares_memory(x, y):
        return _noop
    xf = x.reshape(y.shape)
    return lambda: np.copyto(y, xf)


@kernel("Identity")
def identity(op, ins, outs):
    (x,), (y,) = ins, outs
    if np.shares_memory(x, y):
        return _noop
    return lambda: np.copyto(y, x)


@kernel("Transpose")
def transpose(op, ins, outs):
    (x,), (y,) = ins, outs
    xt = x.transpose(op.perm)
    return lambda: np.copyto(y, xt)


@kernel("Concat")
def concat(op, ins, outs):
    (y,) = outs
    return lambda: np.concatenate(ins, axis=op.axis, out=y)


@kernel("Split")
def split(op, ins, outs):
    (x,) = ins
    bounds = np.cumsum((0,) + op.parts)
    idx = [(slice(None),) * op.axis + (slice(int(s), int(e)),)
           for s, e in zip(bounds[:-1], bounds[1:])]
    views = [x[i] for i in idx]
    pairs = list(zip(outs, views))

    def step():
        for o, v in pairs:
            np.copyto(o, v)
    return step

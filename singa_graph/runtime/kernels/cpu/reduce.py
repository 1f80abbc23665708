"""Reduction kernels (numpy's pairwise summation: accurate and vectorised)."""
import numpy as np

from ...registry import kernel


def _reduce(fn):
    def factory(op, ins, outs):
        (x,), (y,) = ins, outs
        axes = tuple(range(x.ndim)) if op.axes is None else op.axes
        kept = y.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
        return lambda: fn(x, axis=axes, keepdims=True, out=kept)
    return factory


kernel("Sum")(_reduce(np.sum))
kernel("Mean")(_reduce(np.mean))

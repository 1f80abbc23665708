"""Dropout kernel: numpy's Generator fills the mask buffer with uniforms, one fused Numba
loop turns them into the scaled mask and applies it."""
import numpy as np
from numba import njit

from ...registry import kernel
from .activation import contiguous
from .loops import flat_view


@njit(cache=True)
def _apply(x, m, y, ratio, scale):
    zero = m.dtype.type(0)  # a float64 literal would make the select a branch
    for i in range(x.shape[0]):
        v = scale if m[i] >= ratio else zero
        m[i] = v
        y[i] = x[i] * v


@kernel("Dropout")
@contiguous
def dropout(op, ins, outs):
    x = ins[0]
    if not op.training:
        (y,) = outs
        if np.shares_memory(x, y):
            return lambda: None
        return lambda: np.copyto(y, x)
    x, y, m = flat_view(x), flat_view(outs[0]), flat_view(outs[1])
    dt = x.dtype.type
    ratio, scale = dt(op.ratio), dt(1.0 / (1.0 - op.ratio))
    # created here, not per step: the plan's step then walks one reproducible stream
    rng = np.random.default_rng(op.seed)

    def step():
        rng.random(out=m, dtype=m.dtype)
        _apply(x, m, y, ratio, scale)
    return step

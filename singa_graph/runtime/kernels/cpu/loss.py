"""Loss kernels: fused Numba loops that never materialise softmax or ``(x - t)^2``.

Sums accumulate in float64 whatever the dtype, so a float32 loss over a large batch does not
drift. The scalar incoming gradient ``dy`` is read inside the loop (it is only known when
the step runs), through a 1-element view.
"""
import numpy as np
from numba import njit

from ...registry import kernel
from .activation import _row_lse, contiguous
from .loops import flat_view


def _inv_batch(shape):
    return 1.0 / (max(shape[0], 1) if shape else 1)


@njit(cache=True)
def _sce_labels(x, lab, out, inv_n):
    total = 0.0
    for r in range(x.shape[0]):
        k = lab[r]
        if k < 0 or k >= x.shape[1]:
            raise ValueError("SoftmaxCrossEntropy: class label out of range")
        total += _row_lse(x[r]) - x[r, k]
    out[0] = total * inv_n


@njit(cache=True)
def _sce_probs(x, t, out, inv_n):
    total = 0.0
    for r in range(x.shape[0]):
        lse = _row_lse(x[r])
        for c in range(x.shape[1]):
            total += t[r, c] * (lse - x[r, c])
    out[0] = total * inv_n


@njit(cache=True)
def _sce_grad_labels(x, lab, dy, inv_n, dx):
    g = dy[0] * inv_n
    for r in range(x.shape[0]):
        k = lab[r]
        if k < 0 or k >= x.shape[1]:  # checked again: the write below must stay in bounds
            raise ValueError("SoftmaxCrossEntropyGrad: class label out of range")
        lse = _row_lse(x[r])
        for c in range(x.shape[1]):
            dx[r, c] = np.exp(x[r, c] - lse) * g
        dx[r, k] -= g


@njit(cache=True)
def _sce_grad_probs(x, t, dy, inv_n, dx):
    g = dy[0] * inv_n
    for r in range(x.shape[0]):
        lse = _row_lse(x[r])
        st = 0.0
        for c in range(x.shape[1]):
            st += t[r, c]
        for c in range(x.shape[1]):
            dx[r, c] = (np.exp(x[r, c] - lse) * st - t[r, c]) * g


@kernel("SoftmaxCrossEntropy")
@contiguous
def softmax_cross_entropy(op, ins, outs):
    x, t = ins
    out, inv_n = flat_view(outs[0]), _inv_batch(x.shape)
    fn = _sce_probs if t.dtype.kind == "f" else _sce_labels
    return lambda: fn(x, t, out, inv_n)


@kernel("SoftmaxCrossEntropyGrad")
@contiguous
def softmax_cross_entropy_grad(op, ins, outs):
    x, t, dy = ins
    (dx,), d1, inv_n = outs, flat_view(dy), _inv_batch(x.shape)
    fn = _sce_grad_probs if t.dtype.kind == "f" else _sce_grad_labels
    return lambda: fn(x, t, d1, inv_n, dx)


@njit(cache=True)
def _mse(x, t, out, scale):
    total = 0.0
    for i in range(x.shape[0]):
        d = np.float64(x[i]) - t[i]
        total += d * d
    out[0] = total * scale


@njit(cache=True)
def _mse_grad(x, t, dy, inv_n, dx):
    g = dy[0] * inv_n
    for i in range(x.shape[0]):
        dx[i] = (x[i] - t[i]) * g


@kernel("MeanSquareError")
@contiguous
def mse(op, ins, outs):
    x, t = flat_view(ins[0]), flat_view(ins[1])
    out, scale = flat_view(outs[0]), 1.0 / max(x.size, 1)
    return lambda: _mse(x, t, out, scale)


@kernel("MeanSquareErrorGrad")
@contiguous
def mse_grad(op, ins, outs):
    x, t, dy = (flat_view(a) for a in ins)
    dx, two_over_n = flat_view(outs[0]), 2.0 / max(x.size, 1)
    return lambda: _mse_grad(x, t, dy, two_over_n, dx)


@njit(cache=True, error_model="numpy")
def _ce(y, t, out, inv_n):
    total = 0.0
    for i in range(y.shape[0]):
        if t[i] != 0:
            total -= t[i] * np.log(np.float64(y[i]))
    out[0] = total * inv_n


@njit(cache=True, error_model="numpy")  # y == 0 where t != 0: -inf, as IEEE (and PyTorch)
def _ce_grad(y, t, dy, inv_n, dx):
    g = dy[0] * inv_n
    for i in range(y.shape[0]):
        dx[i] = -t[i] / y[i] * g if t[i] != 0 else 0.0


@kernel("CrossEntropy")
@contiguous
def cross_entropy(op, ins, outs):
    y, t = flat_view(ins[0]), flat_view(ins[1])
    out, inv_n = flat_view(outs[0]), _inv_batch(ins[0].shape)
    return lambda: _ce(y, t, out, inv_n)


@kernel("CrossEntropyGrad")
@contiguous
def cross_entropy_grad(op, ins, outs):
    y, t, dy = (flat_view(a) for a in ins)
    dx, inv_n = flat_view(outs[0]), _inv_batch(ins[0].shape)
    return lambda: _ce_grad(y, t, dy, inv_n, dx)


@kernel("ArgMax")
@contiguous
def argmax(op, ins, outs):
    (x,), (y,) = ins, outs
    kept = y.reshape(x.shape[:op.axis] + (1,) + x.shape[op.axis + 1:])
    return lambda: np.argmax(x, axis=op.axis, out=kept, keepdims=True)

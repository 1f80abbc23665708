"""SINGA's functional ops (the functions of ``singa.autograd``), below the layers.

:mod:`singa_graph.autograd` re-exports everything here together with ``backward`` and the
layer classes under their SINGA 2.x names; the layers (:mod:`singa_graph.layer`) call these
functions, so this module imports no layer.

``training`` (default False, as SINGA) selects the train or eval behaviour of BatchNorm and
Dropout; it is set through ``autograd.training = ...`` and read with :func:`is_training`.
"""
from __future__ import annotations

import sys

from . import ops as _ops
from .ops.dropout import __name__ as _dropout_module_name

_flag = {"training": False}


def is_training() -> bool:
    """The value of ``autograd.training``."""
    return _flag["training"]


def set_training(value) -> None:
    """Set ``autograd.training`` (also the default mode of the dropout op)."""
    _flag["training"] = bool(value)
    sys.modules[_dropout_module_name].training = bool(value)


# Ops whose SINGA signature is ours as well are the ops themselves (one definition, one
# docstring); the functions below adapt the others. ``conv2d`` takes our attributes where
# SINGA's takes a cuDNN/DNNL handle.
relu, leakyrelu, sigmoid, tanh = _ops.relu, _ops.leakyrelu, _ops.sigmoid, _ops.tanh
softmax, log_softmax = _ops.softmax, _ops.log_softmax
add, sub, div, pow = _ops.add, _ops.sub, _ops.div, _ops.pow
log, sqrt, sign, identity = _ops.log, _ops.sqrt, _ops.sign, _ops.identity
reshape, flatten = _ops.reshape, _ops.flatten
mse_loss, argmax = _ops.mse_loss, _ops.argmax
conv2d, max_pool2d, avg_pool2d = _ops.conv2d, _ops.max_pool2d, _ops.avg_pool2d


# ---------------------------------------------------------------------- arithmetic
def matmul(x, w):
    """Matrix product ``x @ w``."""
    return _ops.matmul(x, w)


def add_bias(x, b, axis=0):
    """Add the vector ``b`` to every row (``axis=0``) or every column (``axis=1``) of ``x``.
    A ``(1, n)`` or ``(n, 1)`` bias (as in SINGA's examples) is used as a vector."""
    if b.ndim != 1:
        b = _ops.reshape(b, (b.size,))
    return _ops.add_bias(x, b, axis)


def gemm(A, B, C=None, alpha=1.0, beta=1.0, transA=0, transB=0):
    """``alpha * op(A) @ op(B) + beta * C`` (ONNX Gemm)."""
    return _ops.gemm(A, B, C, alpha, beta, bool(transA), bool(transB))


def mul(x, y):
    """Elementwise product (broadcasting)."""
    return _ops.mul(x, y)


def exp(a):
    return _ops.exp(a)


def abs(a):
    return _ops.abs(a)


def negative(x):
    return _ops.neg(x)


def reciprocal(x):
    return _ops.div(1.0, x)


def cast(x, to):
    """``x`` converted to dtype ``to``."""
    return _ops.cast(x, to)


def sum(*l):
    """SINGA's ``sum``: the elementwise sum of the given tensors (see :func:`reduce_sum`)."""
    y = l[0]
    for x in l[1:]:
        y = _ops.add(y, x)
    return y


add_all = sum


def mean(*l):
    """SINGA's ``mean``: the elementwise mean of the given tensors."""
    return _ops.div(sum(*l), float(len(l))) if len(l) > 1 else _ops.identity(l[0])


def reduce_sum(x, axes=None, keepdims=1):
    """Sum over ``axes`` (all when None)."""
    return _ops.sum(x, axes, bool(keepdims))


def reduce_mean(x, axes=None, keepdims=1):
    """Mean over ``axes`` (all when None)."""
    return _ops.mean(x, axes, bool(keepdims))


# ---------------------------------------------------------------------- shapes
def transpose(x, shape=None):
    """Permute the axes by ``shape`` (SINGA's name for the permutation)."""
    return _ops.transpose(x, shape)


def cat(xs, axis=0):
    """Concatenate a list of tensors along ``axis``."""
    return _ops.cat(list(xs), axis)


def split(x, axis, parts, num_output=None):
    """Split along ``axis`` into pieces of sizes ``parts`` (or ``num_output`` equal ones)."""
    if isinstance(parts, int) or parts is None:
        n = num_output or parts
        parts = [x.shape[axis] // n] * n
    return _ops.split(x, axis, parts)


# ---------------------------------------------------------------------- losses
def softmax_cross_entropy(x, t):
    """Mean over the batch of the cross-entropy of ``softmax(x)``; ``t`` holds int labels
    (N,) or one-hot/probability rows (N, C). Integer one-hot rows (SINGA's examples cast
    targets to int32) are converted to ``x``'s dtype."""
    return _ops.softmax_cross_entropy(x, _float_targets(x, t))


def _float_targets(x, t):
    if t.ndim == 2 and t.shape == x.shape and t.dtype.kind in "iu":
        return _ops.cast(t, x.dtype)
    return t


def cross_entropy(x, t):
    """Cross-entropy of probabilities ``x`` and targets ``t``."""
    return _ops.cross_entropy(x, t)


# ---------------------------------------------------------------------- nn
def dropout(x, seed=None, ratio=0.5, training=None):
    """Inverted dropout while ``training`` (default: the module flag), identity otherwise.
    SINGA ignores ``seed``; here a given seed fixes the mask of this call."""
    return _ops.dropout(x, ratio, _flag["training"] if training is None else training, seed)


def batchnorm_2d(x, scale, bias, running_mean, running_var, momentum=0.9, eps=1e-5,
                 training=None):
    """Batch normalisation; ``training`` defaults to the module flag."""
    return _ops.batchnorm_2d(x, scale, bias, running_mean, running_var, momentum, eps,
                             _flag["training"] if training is None else training)


def globalaveragepool(x, data_format="channels_first"):
    """Mean over the spatial axes (kept as size 1) of an NCHW input."""
    if data_format != "channels_first":
        raise NotImplementedError("globalaveragepool: only channels_first (NCHW) inputs")
    return _ops.global_average_pool(x)


global_average_pool = globalaveragepool


__all__ = sorted(n for n, v in list(globals().items())
                 if not n.startswith("_") and callable(v)
                 and getattr(v, "__module__", "").startswith("singa_graph"))

"""SINGA's functional ops (the functions of ``singa.autograd``), below the layers.

:mod:`singa_graph.autograd` re-exports everything here together with ``backward`` and the
layer classes under their SINGA 2.x names; the layers (:mod:`singa_graph.layer`) call these
functions, so this module imports no layer.

``training`` (default False, as SINGA) selects the train or eval behaviour of BatchNorm and
Dropout; it is set through ``autograd.training = ...`` and read with :func:`is_training`.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

from . import ops as _ops
from .ops.dropout import __name__ as _dropout_module_name

_flag = {"training": False}


class _ThreadMode(threading.local):
    override = None  # a Model running in this thread sets its own mode here


_thread_mode = _ThreadMode()


@contextlib.contextmanager
def training_mode(value: bool):
    """Inside the block, ``autograd.training`` reads ``value`` in this thread only, so models
    in different threads (one training, one evaluating) do not see each other's mode."""
    old = _thread_mode.override
    _thread_mode.override = bool(value)
    try:
        yield
    finally:
        _thread_mode.override = old


def is_training() -> bool:
    """The value of ``autograd.training`` (this thread's :func:`training_mode` if one is
    active)."""
    mode = _thread_mode.override
    return _flag["training"] if mode is None else mode


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
argmax = _ops.argmax
conv2d, max_pool2d, avg_pool2d = _ops.conv2d, _ops.max_pool2d, _ops.avg_pool2d
sin, cos, tan, asin, acos, atan = _ops.sin, _ops.cos, _ops.tan, _ops.asin, _ops.acos, _ops.atan
sinh, cosh, asinh, acosh, atanh = _ops.sinh, _ops.cosh, _ops.asinh, _ops.acosh, _ops.atanh
erf, ceil, floor, round, rounde = _ops.erf, _ops.ceil, _ops.floor, _ops.round, _ops.rounde
reciprocal = _ops.reciprocal
selu, elu, hardsigmoid, prelu, gelu = _ops.selu, _ops.elu, _ops.hardsigmoid, _ops.prelu, _ops.gelu
softplus, softsign = _ops.softplus, _ops.softsign
greater, less, equal = _ops.greater, _ops.less, _ops.equal
_and, _or, _xor, _not = _ops.logical_and, _ops.logical_or, _ops.logical_xor, _ops.logical_not
max, min = _ops.maximum, _ops.minimum
shape = _ops.shape_of
unsqueeze, tile, expand, pad, upsample = (_ops.unsqueeze, _ops.tile, _ops.expand, _ops.pad,
                                          _ops.upsample)
depth_to_space, space_to_depth = _ops.depth_to_space, _ops.space_to_depth
gather, nonzero, onehot = _ops.gather, _ops.nonzero, _ops.onehot
layer_norm, scaled_dot_product_attention = _ops.layer_norm, _ops.scaled_dot_product_attention


# ---------------------------------------------------------------------- arithmetic
def matmul(x, w):
    """Matrix product ``x @ w``."""
    return _ops.matmul(x, w)


def add_bias(x, b, axis=0):
    """Add the vector ``b`` to every row (``axis=0``) or every column (``axis=1``) of ``x``.
    A ``(1, n)`` or ``(n, 1)`` bias (as in SINGA's examples) is used as a vector."""
    _expect(axis in (0, 1), "add_bias", f"axis must be 0 or 1, got {axis!r}")
    _expect(x.ndim == 2, "add_bias", f"x must be 2-d, got shape {x.shape}")
    _expect(b.ndim == 1 or (b.ndim == 2 and 1 in b.shape), "add_bias",
            f"b must be a vector, got shape {b.shape}")
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
    """SINGA's ``mean``: the elementwise mean of the given tensors (one op, so
    ``y.creator.backward(dy)`` gives each tensor its ``dy / n``, as SINGA's)."""
    return _ops.mean_of(*l) if len(l) > 1 else _ops.identity(l[0])


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
def _expect(ok, fn, what):
    """SINGA asserts its functional arguments; so do we, with an error that is both a
    ShapeError and an AssertionError."""
    if not ok:
        from .errors import ArgumentShapeError

        raise ArgumentShapeError(f"{fn}: {what}")


def _loss_ranks(fn, x, t):
    _expect(x.ndim == 2, fn, f"1st arg must be a 2-d tensor, got shape {x.shape}")
    _expect(t.ndim <= 2, fn, f"2nd arg must be a tensor of at most 2 dimensions, got shape "
                             f"{t.shape}")


def softmax_cross_entropy(x, t):
    """Mean over the batch of the cross-entropy of ``softmax(x)``.

    ``x``: (N, C) logits. ``t``, as SINGA's: N class labels, (N,) or (N, 1), of any integer
    or float dtype (SINGA reads a target of N values as labels), or one-hot/probability rows
    (N, C) (integer one-hot rows, as SINGA's examples cast them, are converted to ``x``'s
    dtype). ``x`` must be 2-d and ``t`` at most 2-d, or an :class:`ArgumentShapeError` (an
    AssertionError, as SINGA's) is raised."""
    _loss_ranks("softmax_cross_entropy", x, t)
    return _ops.softmax_cross_entropy(x, _float_targets(x, t))


def _float_targets(x, t):
    if t.ndim == 2 and t.shape == x.shape and t.dtype.kind in "iu":
        return _ops.cast(t, x.dtype)
    n = x.shape[0] if x.ndim else 1
    if t.size == n and t.shape != x.shape:  # SINGA: N values are class labels
        if t.ndim != 1:
            t = _ops.reshape(t, (n,))
        if t.dtype.kind not in "iu":
            t = _ops.cast(t, np.int32)
    return t


def cross_entropy(x, t):
    """Cross-entropy of probabilities ``x`` and targets ``t`` (``x`` 2-d, ``t`` at most
    2-d, as SINGA asserts)."""
    _loss_ranks("cross_entropy", x, t)
    return _ops.cross_entropy(x, t)


def mse_loss(x, t):
    """SINGA 3.1's mean squared error: ``sum((x - t)^2) / x.size`` (the mean over every
    element; SINGA before 3.1 halved the sum and divided by the batch). ``x`` and ``t``
    must have one shape (an AssertionError otherwise, as SINGA's)."""
    _expect(x.shape == t.shape, "mse_loss",
            f"input and target shape different: {x.shape}, {t.shape}")
    return _ops.mse_loss(x, t)


# ---------------------------------------------------------------------- nn
def dropout(x, seed=None, ratio=0.5, training=None):
    """Inverted dropout while ``training`` (default: the module flag), identity otherwise.
    SINGA ignores ``seed``; here a given seed fixes the mask of this call."""
    return _ops.dropout(x, ratio, is_training() if training is None else training, seed)


def batchnorm_2d(x, scale, bias, running_mean, running_var, momentum=0.9, eps=1e-5,
                 training=None):
    """Batch normalisation; ``training`` defaults to the module flag."""
    return _ops.batchnorm_2d(x, scale, bias, running_mean, running_var, momentum, eps,
                             is_training() if training is None else training)


def globalaveragepool(x, data_format="channels_first"):
    """Mean over the spatial axes, kept as size 1: (N, C, H, W) -> (N, C, 1, 1) for
    ``channels_first``, (N, H, W, C) -> (N, 1, 1, C) for ``channels_last``."""
    if data_format == "channels_first":
        return _ops.global_average_pool(x)
    if data_format not in ("channels_last", "channel_last"):
        raise ValueError(f"globalaveragepool: data_format must be channels_first or "
                         f"channels_last, got {data_format!r}")
    return _ops.mean(x, tuple(range(1, x.ndim - 1)), True)


global_average_pool = globalaveragepool



# ---------------------------------------------------------------------- SINGA 3 extras
def _tensor(v, like, dtype=None):
    """A constant tensor from a list/array (SINGA passes them for conditions and indices)."""
    from .ir.tensor import Tensor

    if isinstance(v, Tensor):
        return v
    return Tensor(data=np.asarray(v, dtype or like.dtype), device=like.device,
                  requires_grad=False)


def where(x, y, condition):
    """SINGA's ``where(x, y, condition)``: ``x`` where ``condition`` is true, else ``y``;
    ``condition`` may be a Tensor, a list or an array."""
    return _ops.where(_tensor(condition, x), x, y)


def clip(x, min=None, max=None):
    """Limit ``x`` to ``[min, max]`` (either bound may be None); the gradient passes where
    ``x`` lies inside, bounds included (SINGA)."""
    y = x
    if min is not None:
        y = _ops.maximum(y, _tensor(np.asarray(min), x))
    if max is not None:
        y = _ops.minimum(y, _tensor(np.asarray(max), x))
    return y if y is not x else _ops.identity(x)


def squeeze(x, axis=[]):  # noqa: B006  (SINGA's default; never mutated here)
    """Remove the size-1 axes ``axis`` (all of them when empty)."""
    return _ops.squeeze(x, axis)


def slice(x, starts, ends, axes=None, steps=None):
    """``x[starts:ends:steps]`` along ``axes`` (ONNX Slice)."""
    return _ops.slice(x, starts, ends, axes, steps)


def scatter_elements(x, indices, updates, axis=0):
    """``x`` with ``updates`` written at ``indices`` along ``axis`` (Tensors or arrays)."""
    return _ops.scatter_elements(x, _tensor(indices, x, np.int64), _tensor(updates, x), axis)


def constant_of_shape(x, value=0):
    """A float32 tensor of shape given by the values of ``x``, filled with ``value``."""
    return _ops.constant_of_shape(x, value)


def embedding(x, w):
    """Rows of ``w`` at the word ids ``x`` (any integer or integral float tensor):
    output shape ``x.shape + (w.shape[1],)``."""
    if x.dtype.kind == "f":
        x = _ops.cast(x, np.int64)
    return _ops.take(w, x, 0)


def cossim(a, b):
    """Cosine similarity of the rows of two (N, d) tensors, shape (N,)."""
    if a.shape != b.shape or a.ndim != 2:
        from .errors import ShapeError

        raise ShapeError(f"cossim needs two (N, d) tensors of one shape, got {a.shape} and "
                         f"{b.shape}")
    dot = _ops.sum(_ops.mul(a, b), 1)
    na = _ops.sqrt(_ops.sum(_ops.mul(a, a), 1))
    nb = _ops.sqrt(_ops.sum(_ops.mul(b, b), 1))
    return _ops.div(dot, _ops.mul(na, nb))


def ranking_loss(pos, neg, M=0.2):
    """``sum(max(0, M - pos + neg)) / N`` with N = ``pos.shape[0]`` (SINGA)."""
    _expect(pos.shape == neg.shape, "ranking_loss",
            f"pos {pos.shape} and neg {neg.shape} differ in shape")
    hinge = _ops.relu(_ops.add(_ops.sub(neg, pos), float(M)))
    loss = _ops.div(_ops.sum(hinge), float(pos.shape[0] if pos.ndim else 1))
    return _ops.reshape(loss, (1,))  # SINGA's loss shape


def binary_cross_entropy(x, t):
    """``-sum(t log x + (1 - t) log(1 - x)) / N`` on probabilities ``x`` (SINGA)."""
    t = _ops.cast(t, x.dtype) if t.dtype != x.dtype else t
    ll = _ops.add(_ops.mul(t, _ops.log(x)),
                  _ops.mul(_ops.sub(1.0, t), _ops.log(_ops.sub(1.0, x))))
    loss = _ops.div(_ops.neg(_ops.sum(ll)), float(x.shape[0] if x.ndim else 1))
    return _ops.reshape(loss, (1,))  # SINGA's loss shape


__all__ = sorted(n for n, v in list(globals().items())
                 if not n.startswith("_") and callable(v)
                 and getattr(v, "__module__", "").startswith("singa_graph"))

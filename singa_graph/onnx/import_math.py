"""ONNX -> singa_graph: elementwise arithmetic, activations and reductions.

Ops that the op library does not have yet but that are exact compositions of ops it has are
composed here (Clip, Max, Min, Sum, Mean, Reciprocal, the Reduce* family, PRelu, Elu, ...);
when the library gains a dedicated op (see :mod:`.pending`), its entry switches to it.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from ..ir.tensor import Tensor
from .program import constant
from .registry import importer

# ---------------------------------------------------------------------- elementwise


def _binary(op_type, fn):
    @importer(op_type)
    def imp(n):
        return fn(n.t(0), n.t(1))
    imp.__name__ = op_type.lower()
    return imp


for _t, _f in {"Add": ops.add, "Sub": ops.sub, "Mul": ops.mul}.items():
    _binary(_t, _f)


@importer("Div")
def div(n):
    a, b = n.t(0), n.t(1)
    if a.dtype.kind != "f":
        n.fail("integer division")
    return ops.div(a, b)


@importer("Pow")
def pow_(n):
    a, b = n.t(0), n.t(1)
    if b.dtype != a.dtype:  # since opset 12 the exponent may have another type
        b = ops.cast(b, a.dtype)
    return ops.pow(a, b)


def _unary(op_type, fn):
    @importer(op_type)
    def imp(n):
        return fn(n.t(0))
    imp.__name__ = op_type.lower()
    return imp


for _t, _f in {"Neg": ops.neg, "Exp": ops.exp, "Log": ops.log, "Sqrt": ops.sqrt,
               "Abs": ops.abs, "Sign": ops.sign, "Relu": ops.relu, "Sigmoid": ops.sigmoid,
               "Tanh": ops.tanh, "Identity": ops.identity}.items():
    _unary(_t, _f)


@importer("Reciprocal")
def reciprocal(n):
    x = n.t(0)
    return ops.div(constant(np.ones((), x.dtype)), x)


@importer("LeakyRelu")
def leaky_relu(n):
    return ops.leakyrelu(n.t(0), n.attr("alpha", 0.01))


def _scalar(v, like):
    return constant(np.asarray(v, dtype=like.dtype))


def _max2(a, b):
    """``max(a, b) = a + relu(b - a)``, with broadcasting."""
    return ops.add(a, ops.relu(ops.sub(b, a)))


def _min2(a, b):
    """``min(a, b) = a - relu(a - b)``."""
    return ops.sub(a, ops.relu(ops.sub(a, b)))


def _variadic(n, fn):
    xs = [n.t(i) for i in range(n.n_inputs) if n.has(i)]
    y = xs[0]
    for x in xs[1:]:
        y = fn(y, x)
    return y if len(xs) > 1 else ops.identity(y)


@importer("Max")
def max_(n):
    if n.t(0).dtype.kind != "f":
        n.fail("Max of integers")
    return _variadic(n, _max2)


@importer("Min")
def min_(n):
    if n.t(0).dtype.kind != "f":
        n.fail("Min of integers")
    return _variadic(n, _min2)


@importer("Sum")
def sum_(n):
    return _variadic(n, ops.add)


@importer("Mean")
def mean_(n):
    y = _variadic(n, ops.add)
    k = sum(1 for i in range(n.n_inputs) if n.has(i))
    return ops.div(y, _scalar(k, y)) if k > 1 else y


def _clip(n, x, lo, hi):
    if x.dtype.kind != "f":
        n.fail("Clip of integers")
    if lo is not None:
        x = _max2(x, lo if isinstance(lo, Tensor) else _scalar(lo, x))
    if hi is not None:
        x = _min2(x, hi if isinstance(hi, Tensor) else _scalar(hi, x))
    return x if lo is not None or hi is not None else ops.identity(x)


@importer("Clip", since=1)
def clip_1(n):
    return _clip(n, n.t(0), n.attr("min"), n.attr("max"))


@importer("Clip", since=11)
def clip_11(n):
    x = n.t(0)
    lo = n.t(1) if n.has(1) else None
    hi = n.t(2) if n.has(2) else None
    return _clip(n, x, lo, hi)


# ---------------------------------------------------------------------- activations made of ops

@importer("PRelu")
def prelu(n):
    x, slope = n.t(0), n.t(1)
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] == x.shape[1] != x.shape[-1]:
        slope = ops.reshape(slope, (slope.shape[0],) + (1,) * (x.ndim - 2))  # per channel
    return ops.sub(ops.relu(x), ops.mul(slope, ops.relu(ops.neg(x))))


def _elu(x, alpha):
    neg = ops.neg(ops.relu(ops.neg(x)))  # min(x, 0)
    return ops.add(ops.relu(x), ops.mul(_scalar(alpha, x), ops.sub(ops.exp(neg),
                                                                    _scalar(1, x))))


@importer("Elu")
def elu(n):
    return _elu(n.t(0), n.attr("alpha", 1.0))


@importer("Selu")
def selu(n):
    x = n.t(0)
    return ops.mul(_scalar(n.attr("gamma", 1.0507009873554805), x),
                   _elu(x, n.attr("alpha", 1.6732632423543772)))


@importer("Celu")
def celu(n):
    x, a = n.t(0), n.attr("alpha", 1.0)
    e = _elu(ops.div(x, _scalar(a, x)), 1.0)          # elu(x / a) with alpha 1
    return ops.add(ops.relu(x), ops.mul(_scalar(a, x), ops.sub(e, ops.relu(ops.div(
        x, _scalar(a, x))))))


@importer("Softsign")
def softsign(n):
    x = n.t(0)
    return ops.div(x, ops.add(ops.abs(x), _scalar(1, x)))


@importer("Softplus")
def softplus(n):
    x = n.t(0)
    return ops.log(ops.add(ops.exp(x), _scalar(1, x)))


def _hardsigmoid(x, alpha, beta):
    y = ops.add(ops.mul(x, _scalar(alpha, x)), _scalar(beta, x))
    return _min2(ops.relu(y), _scalar(1, x))


@importer("HardSigmoid")
def hardsigmoid(n):
    return _hardsigmoid(n.t(0), n.attr("alpha", 0.2), n.attr("beta", 0.5))


@importer("HardSwish")
def hardswish(n):
    x = n.t(0)
    return ops.mul(x, _hardsigmoid(x, 1 / 6, 0.5))


@importer("Swish")
def swish(n):
    x = n.t(0)
    a = n.attr("alpha", 1.0)
    return ops.mul(x, ops.sigmoid(ops.mul(x, _scalar(a, x)) if a != 1.0 else x))


@importer("Mish")
def mish(n):
    x = n.t(0)
    return ops.mul(x, ops.tanh(ops.log(ops.add(ops.exp(x), _scalar(1, x)))))


@importer("Gelu")
def gelu(n):
    if n.attr("approximate", "none") != "tanh":
        n.fail("Gelu without approximate='tanh' (it needs erf)")
    x = n.t(0)
    inner = ops.mul(_scalar(np.sqrt(2 / np.pi), x),
                    ops.add(x, ops.mul(_scalar(0.044715, x), ops.mul(x, ops.mul(x, x)))))
    return ops.mul(ops.mul(_scalar(0.5, x), x), ops.add(_scalar(1, x), ops.tanh(inner)))


def _softmax(n, fn, legacy):
    x = n.t(0)
    axis = n.attr("axis", 1 if legacy else -1)
    axis = axis + x.ndim if axis < 0 else axis
    if not legacy or axis == x.ndim - 1:
        return fn(x, axis)
    # before opset 13 the input is coerced to 2-d at ``axis``
    y = fn(ops.flatten(x, axis), 1)
    return ops.reshape(y, x.shape)


@importer("Softmax", since=1)
def softmax_1(n):
    return _softmax(n, ops.softmax, True)


@importer("Softmax", since=13)
def softmax_13(n):
    return _softmax(n, ops.softmax, False)


@importer("LogSoftmax", since=1)
def log_softmax_1(n):
    return _softmax(n, ops.log_softmax, True)


@importer("LogSoftmax", since=13)
def log_softmax_13(n):
    return _softmax(n, ops.log_softmax, False)


# ---------------------------------------------------------------------- reductions

def _axes(n, from_input: bool):
    """``(axes or None, reduce nothing?)`` of a Reduce* node."""
    axes = n.const(1) if from_input else n.attr("axes")
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and n.attr("noop_with_empty_axes", 0):
        return None, True
    return (None if axes is None else tuple(int(a) for a in np.ravel(axes))), False


def _reduce(op_type, since_input, body):
    """Register Reduce* for both forms: axes as an attribute, and as an input since
    ``since_input``."""
    def make(from_input):
        def imp(n):
            x = n.t(0)
            axes, noop = _axes(n, from_input)
            if noop:
                return ops.identity(x)
            return body(n, x, axes, bool(n.attr("keepdims", 1)))
        imp.__name__ = f"{op_type.lower()}_{since_input if from_input else 1}"
        return imp

    importer(op_type, 1)(make(False))
    importer(op_type, since_input)(make(True))


def _sum(n, x, axes, keep):
    return ops.sum(x, axes, keep)


def _mean(n, x, axes, keep):
    if x.dtype.kind != "f":
        n.fail("ReduceMean of integers")
    return ops.mean(x, axes, keep)


_reduce("ReduceSum", 13, _sum)
_reduce("ReduceMean", 18, _mean)
_reduce("ReduceSumSquare", 18, lambda n, x, a, k: ops.sum(ops.mul(x, x), a, k))
_reduce("ReduceL1", 18, lambda n, x, a, k: ops.sum(ops.abs(x), a, k))
_reduce("ReduceL2", 18, lambda n, x, a, k: ops.sqrt(ops.sum(ops.mul(x, x), a, k)))
_reduce("ReduceLogSum", 18, lambda n, x, a, k: ops.log(ops.sum(x, a, k)))
_reduce("ReduceLogSumExp", 18, lambda n, x, a, k: ops.log(ops.sum(ops.exp(x), a, k)))


@importer("ArgMax")
def argmax(n):
    if n.attr("select_last_index", 0):
        n.fail("select_last_index=1")
    return ops.argmax(n.t(0), n.attr("axis", 0), bool(n.attr("keepdims", 1)))

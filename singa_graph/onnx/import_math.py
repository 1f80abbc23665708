"""ONNX -> singa_graph: elementwise arithmetic and math, Sum/Mean of several tensors, the
Reduce* family, ArgMax and ArgMin.

Reductions that the op library has no op for are exact compositions of ops it has:
ReduceMax/Min/Prod halve the axis with Split and combine the halves elementwise, ArgMin is
ArgMax of an order-reversed input, and ``select_last_index`` reverses the axis with a
step -1 Slice.
"""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import constant, scalar_like
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


for _t, _f in {"Relu": ops.relu, "Sigmoid": ops.sigmoid, "Tanh": ops.tanh,
               "Softplus": ops.softplus, "Softsign": ops.softsign, "Neg": ops.neg, "Exp": ops.exp, "Log": ops.log, "Sqrt": ops.sqrt,
               "Abs": ops.abs, "Sign": ops.sign, "Identity": ops.identity,
               "Reciprocal": ops.reciprocal, "Sin": ops.sin, "Cos": ops.cos, "Tan": ops.tan,
               "Asin": ops.asin, "Acos": ops.acos, "Atan": ops.atan, "Sinh": ops.sinh,
               "Cosh": ops.cosh, "Asinh": ops.asinh, "Acosh": ops.acosh, "Atanh": ops.atanh,
               "Erf": ops.erf, "Floor": ops.floor, "Ceil": ops.ceil,
               # ONNX rounds halves to even, which is the library's rounde
               "Round": ops.rounde}.items():
    _unary(_t, _f)


def _variadic(n, fn):
    xs = [n.t(i) for i in range(n.n_inputs) if n.has(i)]
    y = xs[0]
    for x in xs[1:]:
        y = fn(y, x)
    return y if len(xs) > 1 else ops.identity(y)


@importer("Sum")
def sum_(n):
    return _variadic(n, ops.add)


@importer("Mean")
def mean_(n):
    xs = [n.t(i) for i in range(n.n_inputs) if n.has(i)]
    return ops.mean_of(*xs) if len(xs) > 1 else ops.identity(xs[0])


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


def _halving(x, axis, fn):
    """``fn``-reduce ``axis`` (kept, size 1) in log2 steps: split the axis into two halves
    (and an odd last slice, carried along) and combine the halves elementwise."""
    size = x.shape[axis]
    while size > 1:
        half, odd = size // 2, size % 2
        parts = ops.split(x, axis, [half, half] + [1] * odd)
        x = fn(parts[0], parts[1])
        x = ops.cat([x, parts[2]], axis) if odd else x
        size = half + odd
    return x


def _fold_axes(fn, identity):
    """A Reduce* body that folds each axis with :func:`_halving`; an empty axis gives the
    reduction's ``identity(dtype)``, as ONNX specifies."""
    def body(n, x, axes, keep):
        axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
        kept = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
        out = kept if keep else tuple(s for i, s in enumerate(x.shape) if i not in axes)
        if any(x.shape[a] == 0 for a in axes):
            return np.full(out, identity(x.dtype), x.dtype)
        y = x
        for a in axes:
            y = _halving(y, a, fn)
        if y is x:
            return ops.identity(x)
        return y if keep or out == kept else ops.reshape(y, out)
    return body


def _lowest(dt):
    return -np.inf if dt.kind == "f" else (False if dt.kind == "b" else np.iinfo(dt).min)


def _highest(dt):
    return np.inf if dt.kind == "f" else (True if dt.kind == "b" else np.iinfo(dt).max)


_reduce("ReduceSum", 13, _sum)
_reduce("ReduceMean", 18, _mean)
_reduce("ReduceSumSquare", 18, lambda n, x, a, k: ops.sum(ops.mul(x, x), a, k))
_reduce("ReduceL1", 18, lambda n, x, a, k: ops.sum(ops.abs(x), a, k))
_reduce("ReduceL2", 18, lambda n, x, a, k: ops.sqrt(ops.sum(ops.mul(x, x), a, k)))
_reduce("ReduceLogSum", 18, lambda n, x, a, k: ops.log(ops.sum(x, a, k)))
_reduce("ReduceLogSumExp", 18, lambda n, x, a, k: ops.log(ops.sum(ops.exp(x), a, k)))
_reduce("ReduceMax", 18, _fold_axes(ops.maximum, _lowest))
_reduce("ReduceMin", 18, _fold_axes(ops.minimum, _highest))
_reduce("ReduceProd", 18, _fold_axes(ops.mul, lambda dt: 1))


def _arg(n, order_reversed):
    """ArgMax, or ArgMin as the ArgMax of an order-reversing map of the input."""
    x = n.t(0)
    axis = n.attr("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    keep = bool(n.attr("keepdims", 1))
    if order_reversed:
        # -x for floats; -x - 1 (= ~x, no overflow at the minimum) for integers
        x = ops.neg(x) if x.dtype.kind == "f" else ops.sub(ops.neg(x), scalar_like(1, x))
    if not n.attr("select_last_index", 0):
        return ops.argmax(x, axis, keep)
    # the first maximum of the reversed axis is the last one of the axis
    size = x.shape[axis]
    first = ops.argmax(ops.slice(x, [-1], [-(2 ** 63)], [axis], [-1]), axis, keep)
    return ops.sub(constant(np.asarray(size - 1, np.int64)), first)


@importer("ArgMax")
def argmax(n):
    return _arg(n, False)


@importer("ArgMin")
def argmin(n):
    return _arg(n, True)

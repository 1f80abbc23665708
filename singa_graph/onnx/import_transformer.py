"""ONNX -> singa_graph: the ops transformer exports bring besides the elementwise ones
(CumSum, Einsum; Attention lives in :mod:`.import_attention`).

CumSum is a log-step prefix sum (each step adds the running sum shifted by 1, 2, 4 ...
entries), exact for integers and a pairwise order of additions for floats. Einsum is
rewritten into transposes, reshapes, sums and batched MatMuls, one pair of operands at a
time; a label repeated within one operand (a diagonal or trace) multiplies by the
identity first.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..errors import ShapeError
from ..ir.dtypes import NARROW_FLOATS
from .program import constant
from .registry import importer


def _flip(x, axis):
    return ops.slice(x, [-1], [-(2 ** 63)], [axis], [-1])


def _shift(x, axis, k):
    """``x`` moved ``k`` entries along ``axis``, zeros coming in at the start."""
    size = x.shape[axis]
    zeros_shape = list(x.shape)
    zeros_shape[axis] = min(k, size)
    zeros = constant(np.zeros(zeros_shape, x.dtype))
    if k >= size:
        return ops.broadcast_to(zeros, x.shape)
    return ops.cat([zeros, ops.slice(x, [0], [size - k], [axis])], axis)


@importer("CumSum")
def cumsum(n):
    x = n.t(0)
    axis = int(np.ravel(n.const(1))[0])
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        n.fail(f"axis {axis} of a {x.ndim}-d input")
    size = x.shape[axis]
    if size == 0 or x.size == 0:
        return ops.identity(x)
    reverse, exclusive = n.attr("reverse", 0), n.attr("exclusive", 0)
    y = _flip(x, axis) if reverse else x
    if exclusive:
        y = _shift(y, axis, 1)
    k = 1
    while k < size:
        y = ops.add(y, _shift(y, axis, k))
        k *= 2
    y = _flip(y, axis) if reverse else y
    return y if y is not x else ops.identity(x)


# ---------------------------------------------------------------------- Einsum

def _terms(n, equation, ranks):
    """``(input label lists, output labels)``; ``...`` becomes digit labels, aligned to the
    right as numpy broadcasts them."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        n.fail(f"equation {equation!r} for {len(ranks)} operand(s)")
    n_ell = max([r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t], default=0)
    ell = [str(d) for d in range(n_ell)]
    out = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            head, tail = t.split("...")
            k = r - len(head) - len(tail)
            labels = list(head) + ell[n_ell - k:] + list(tail)
        else:
            labels = list(t)
        if len(labels) != r:
            n.fail(f"term {t!r} of {equation!r} for a {r}-d operand")
        out.append(labels)
    if arrow:
        result = list(rhs.replace("...", "".join(ell)))
    else:  # implicit output: the ellipsis, then labels seen once, alphabetically
        counts = {}
        for labels in out:
            for c in labels:
                counts[c] = counts.get(c, 0) + 1
        result = ell + sorted(c for c, k in counts.items() if k == 1 and not c.isdigit())
    if len(set(result)) != len(result):
        n.fail(f"a label repeated in the output of {equation!r}")
    return out, result


def _diagonal(x, labels):
    """Take the diagonal of each label repeated within one term (``ii->i``): multiply by
    the identity over the two axes and sum the second away (adds exact zeros)."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        if x.shape[i] != x.shape[j]:
            raise ShapeError(f"label {c!r} has sizes {x.shape[i]} and {x.shape[j]}")
        eye_shape = [1] * x.ndim
        eye_shape[i] = eye_shape[j] = x.shape[i]
        eye = np.eye(x.shape[i], dtype=x.dtype).reshape(eye_shape)
        x = ops.sum(ops.mul(x, constant(eye)), (j,), False)
        del labels[j]
    return x, labels


def _sum_out(x, labels, keep):
    """Sum the axes of ``x`` whose labels are not in ``keep``."""
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return ops.sum(x, axes, False), [c for c in labels if c in keep]


def _permute(x, labels, order):
    perm = [labels.index(c) for c in order]
    return x if perm == list(range(len(perm))) else ops.transpose(x, perm)


def _contract(a, la, b, lb, keep):
    """``einsum`` of two operands keeping the labels in ``keep``; returns (tensor, labels)
    with the labels in order batch, free of ``a``, free of ``b``."""
    a, la = _sum_out(a, la, set(keep) | set(lb))
    b, lb = _sum_out(b, lb, set(keep) | set(la))
    size = {}
    for x, ls in ((a, la), (b, lb)):
        for c, s in zip(ls, x.shape):
            size[c] = max(size.get(c, 1), s)
    shared = [c for c in la if c in lb]
    batch = [c for c in shared if c in keep]
    inner = [c for c in shared if c not in keep]
    free_a = [c for c in la if c not in lb]
    free_b = [c for c in lb if c not in la]

    def prepared(x, ls, order):
        full = tuple(size[c] if c in shared else s for c, s in zip(ls, x.shape))
        x = ops.broadcast_to(x, full) if full != tuple(x.shape) else x  # size-1 labels
        return _permute(x, ls, order)

    def prod(cs):
        return int(math.prod(size[c] for c in cs))

    a = ops.reshape(prepared(a, la, batch + free_a + inner),
                    (prod(batch), prod(free_a), prod(inner)))
    b = ops.reshape(prepared(b, lb, batch + inner + free_b),
                    (prod(batch), prod(inner), prod(free_b)))
    y = ops.matmul(a, b)
    labels = batch + free_a + free_b
    return ops.reshape(y, tuple(size[c] for c in labels)), labels


@importer("Einsum")
def einsum(n):
    xs = [n.t(i) for i in range(n.n_inputs) if n.has(i)]
    narrow = xs[0].dtype if xs and xs[0].dtype in NARROW_FLOATS else None
    if narrow is not None:  # bfloat16/float8: contracted in float32, rounded once
        xs = [ops.cast(x, np.float32) for x in xs]
        return ops.cast(_einsum(n, xs), narrow)
    return _einsum(n, xs)


def _einsum(n, xs):
    terms, result = _terms(n, n.attr("equation"), [x.ndim for x in xs])
    diag = [_diagonal(x, t) for x, t in zip(xs, terms)]
    xs, terms = [d[0] for d in diag], [d[1] for d in diag]
    for c in result:
        if not any(c in t for t in terms):
            n.fail(f"output label {c!r} that no operand has")
    x, lx = _sum_out(xs[0], terms[0], set(result).union(*terms[1:]))
    for i in range(1, len(xs)):
        keep = set(result).union(*terms[i + 1:])
        x, lx = _contract(x, lx, xs[i], terms[i], keep)
    x, lx = _sum_out(x, lx, set(result))
    y = _permute(x, lx, result)
    return y if y is not xs[0] else ops.identity(y)

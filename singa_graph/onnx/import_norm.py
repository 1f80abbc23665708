"""ONNX -> singa_graph: normalisations other than BatchNormalization.

LayerNormalization is the library's fused LayerNorm op; InstanceNormalization,
GroupNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization and LRN are
exact compositions of the library's elementwise ops and reductions, so they train like any
other imported graph.
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops
from .program import constant, scalar_like
from .registry import importer


def _per_channel(t, ndim):
    """A ``(C,)`` tensor shaped ``(C, 1, ..., 1)`` to broadcast over ``(N, C, ...)``."""
    return ops.reshape(t, (t.shape[0],) + (1,) * (ndim - 2))


def _standardise(x, axes, eps):
    """``((x - mean) / sqrt(var + eps), mean, 1 / sqrt(var + eps))`` over ``axes``."""
    mean = ops.mean(x, axes, True)
    centred = ops.sub(x, mean)
    var = ops.mean(ops.mul(centred, centred), axes, True)
    inv_std = ops.reciprocal(ops.sqrt(ops.add(var, scalar_like(eps, x))))
    return ops.mul(centred, inv_std), mean, inv_std


@importer("LayerNormalization")
def layer_norm(n):
    """The library's fused LayerNorm (one kernel forward, one backward) for float32 and
    float64; float16 is composed from elementwise ops and reductions."""
    x = n.t(0)
    axis = n.attr("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    eps = n.attr("epsilon", 1e-5)
    inner = tuple(x.shape[axis:])
    if x.dtype in (np.float32, np.float64) and x.size:
        scale = n.t(1)
        scale = scale if tuple(scale.shape) == inner else ops.broadcast_to(scale, inner)
        bias = n.t(2) if n.has(2) else constant(np.zeros(inner, x.dtype))
        bias = bias if tuple(bias.shape) == inner else ops.broadcast_to(bias, inner)
        y, mean, rstd = ops.LayerNorm(axis, eps)(x, scale, bias)
        if n.n_outputs == 1:
            return [y]
        kept = tuple(x.shape[:axis]) + (1,) * len(inner)  # ONNX keeps the reduced axes
        return [y, ops.reshape(mean, kept), ops.reshape(rstd, kept)]
    y, mean, inv_std = _standardise(x, tuple(range(axis, x.ndim)), eps)
    y = ops.mul(y, n.t(1))
    y = ops.add(y, n.t(2)) if n.has(2) else y
    return [y, mean, inv_std]


@importer("InstanceNormalization")
def instance_norm(n):
    x = n.t(0)
    y, _, _ = _standardise(x, tuple(range(2, x.ndim)), n.attr("epsilon", 1e-5))
    return ops.add(ops.mul(y, _per_channel(n.t(1), x.ndim)), _per_channel(n.t(2), x.ndim))


@importer("GroupNormalization", since=21)
def group_norm(n):
    """Scale and bias per channel. (Opset 18's per-group form is deprecated; the checker
    rejects models that use it, so it has no import.)"""
    x = n.t(0)
    g = int(n.attr("num_groups"))
    if x.shape[1] % g:
        n.fail(f"{x.shape[1]} channels in {g} groups")
    grouped = ops.reshape(x, (x.shape[0], g, -1))
    y, _, _ = _standardise(grouped, (2,), n.attr("epsilon", 1e-5))
    y = ops.reshape(y, x.shape)
    return ops.add(ops.mul(y, _per_channel(n.t(1), x.ndim)), _per_channel(n.t(2), x.ndim))


@importer("RMSNormalization")
def rms_norm(n):
    x = n.t(0)
    axis = n.attr("axis", -1)
    axes = tuple(range(axis + x.ndim if axis < 0 else axis, x.ndim))
    ms = ops.mean(ops.mul(x, x), axes, True)
    inv = ops.reciprocal(ops.sqrt(ops.add(ms, scalar_like(n.attr("epsilon", 1e-5), x))))
    return ops.mul(ops.mul(x, inv), n.t(1))


@importer("MeanVarianceNormalization")
def mean_variance_norm(n):
    """ONNX's function body: ``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)``."""
    x = n.t(0)
    axes = tuple(int(a) for a in n.attr("axes", [0, 2, 3]))
    mean = ops.mean(x, axes, True)
    var = ops.sub(ops.mean(ops.mul(x, x), axes, True), ops.mul(mean, mean))
    return ops.div(ops.sub(x, mean), ops.add(ops.sqrt(var), scalar_like(1e-9, x)))


@importer("LpNormalization")
def lp_norm(n):
    x = n.t(0)
    axis, p = n.attr("axis", -1), n.attr("p", 2)
    if p == 1:
        norm = ops.sum(ops.abs(x), axis, True)
    elif p == 2:
        norm = ops.sqrt(ops.sum(ops.mul(x, x), axis, True))
    else:
        n.fail(f"p={p} (ONNX allows 1 and 2)")
    # a zero norm means x is 0 along the axis, and the result is 0: divide by 1 there
    zero = ops.equal(norm, scalar_like(0, x))
    return ops.div(x, ops.where(zero, scalar_like(1, x), norm))


@importer("LRN")
def lrn(n):
    """``x / (bias + alpha / size * sum of x^2 over a window of channels) ** beta``; the
    window sum adds ``size`` shifted slices of the zero-padded squares."""
    x = n.t(0)
    size = int(n.attr("size"))
    alpha, beta, bias = n.attr("alpha", 1e-4), n.attr("beta", 0.75), n.attr("bias", 1.0)
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    pads = [0] * (2 * x.ndim)
    pads[1], pads[1 + x.ndim] = before, after
    sq = ops.mul(x, x)
    padded = ops.pad(sq, "constant", pads) if before or after else sq
    c = x.shape[1]
    total = None
    for k in range(size):
        part = ops.slice(padded, [k], [k + c], [1]) if size > 1 else padded
        total = part if total is None else ops.add(total, part)
    scale = ops.add(scalar_like(bias, x), ops.mul(scalar_like(alpha / size, x), total))
    return ops.div(x, ops.pow(scale, scalar_like(beta, x)))

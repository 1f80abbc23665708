"""ONNX -> singa_graph: the optimiser steps of the ``ai.onnx.preview.training`` domain
(Adagrad, Adam, Momentum) as compositions of elementwise ops, one update per (X, G, state)
group; and two ``ai.onnx.ml`` ops that are plain tensor ops (Binarizer,
ArrayFeatureExtractor). The step count T decides the formula (bias correction from the
second step on), so its value must be known while building."""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import scalar_like
from .registry import importer

TRAINING = "ai.onnx.preview.training"


def _groups(n, per):
    """``(R, T value, [(tensors of one group)...])`` of an optimiser node whose inputs
    after R and T come in ``per`` lists of equal length."""
    r = n.t(0)
    t = int(np.asarray(n.const(1)).ravel()[0])
    rest = [n.t(i) for i in range(2, n.n_inputs)]
    k = len(rest) // per
    return r, t, [tuple(rest[j * k + i] for j in range(per)) for i in range(k)]


def _c(v, like):
    return scalar_like(v, like)


def _lr(r, x):
    return r if r.dtype == x.dtype else ops.cast(r, x.dtype)


@importer("Adagrad", domain=TRAINING)
def adagrad(n):
    r, t, groups = _groups(n, 3)
    decay, eps = float(n.attr("decay_factor", 0.0)), float(n.attr("epsilon", 0.0))
    norm = float(n.attr("norm_coefficient", 0.0))
    xs, hs = [], []
    for x, g, h in groups:
        rate = ops.div(_lr(r, x), _c(1 + t * decay, x))
        g = ops.add(ops.mul(_c(norm, x), x), g)
        h = ops.add(h, ops.mul(g, g))
        xs.append(ops.sub(x, ops.div(ops.mul(rate, g), ops.add(ops.sqrt(h), _c(eps, x)))))
        hs.append(h)
    return xs + hs


@importer("Adam", domain=TRAINING)
def adam(n):
    r, t, groups = _groups(n, 4)
    alpha, beta = float(n.attr("alpha", 0.9)), float(n.attr("beta", 0.999))
    eps, norm = float(n.attr("epsilon", 0.0)), float(n.attr("norm_coefficient", 0.0))
    post = float(n.attr("norm_coefficient_post", 0.0))
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        g = ops.add(ops.mul(_c(norm, x), x), g)
        v = ops.add(ops.mul(_c(alpha, x), v), ops.mul(_c(1 - alpha, x), g))
        h = ops.add(ops.mul(_c(beta, x), h), ops.mul(_c(1 - beta, x), ops.mul(g, g)))
        rate = _lr(r, x)
        if t > 0:  # bias correction of both moments
            rate = ops.mul(rate, _c(np.sqrt(1 - beta ** t) / (1 - alpha ** t), x))
        x = ops.sub(x, ops.mul(rate, ops.div(v, ops.add(ops.sqrt(h), _c(eps, x)))))
        xs.append(ops.mul(_c(1 - post, x), x) if post else x)
        vs.append(v)
        hs.append(h)
    return xs + vs + hs


@importer("Momentum", domain=TRAINING)
def momentum(n):
    r, t, groups = _groups(n, 3)
    alpha, beta = float(n.attr("alpha")), float(n.attr("beta"))
    norm, mode = float(n.attr("norm_coefficient", 0.0)), n.attr("mode", "standard")
    xs, vs = [], []
    for x, g, v in groups:
        g = ops.add(ops.mul(_c(norm, x), x), g)
        v = ops.add(ops.mul(_c(alpha, x), v), ops.mul(_c(beta if t > 0 else 1.0, x), g))
        step = ops.add(g, ops.mul(_c(alpha, x), v)) if mode == "nesterov" else v
        xs.append(ops.sub(x, ops.mul(_lr(r, x), step)))
        vs.append(v)
    return xs + vs


@importer("Binarizer", domain="ai.onnx.ml")
def binarizer(n):
    x = n.t(0)
    return ops.cast(ops.greater(x, _c(n.attr("threshold", 0.0), x)), x.dtype)


@importer("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(n):
    x = n.t(0)
    idx = np.asarray(n.const(1)).ravel().astype(np.int64)
    return ops.gather(x, x.ndim - 1, idx)

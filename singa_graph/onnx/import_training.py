"""ONNX -> singa_graph: the optimiser steps of the ``ai.onnx.preview.training`` domain
(Adagrad, Adam, Momentum) as compositions of elementwise ops, one update per (X, G, state)
group; and ``ai.onnx.ml`` Binarizer and ArrayFeatureExtractor (plain tensor ops) and
TreeEnsemble (its op walks the trees on the host). The step count T decides the formula (bias correction from the
second step on), so its value must be known while building."""
from __future__ import annotations

import numpy as np
import onnx

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


@importer("TreeEnsemble", domain="ai.onnx.ml")
def tree_ensemble(n):
    def arr(name):
        v = n.attr(name)
        return None if v is None else np.asarray(
            onnx.numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v)

    if n.attr("post_transform", 0):
        n.fail(f"post_transform={n.attr('post_transform')}")
    modes, splits = arr("nodes_modes"), arr("nodes_splits")
    feats, missing = arr("nodes_featureids"), arr("nodes_missing_value_tracks_true")
    members = iter(arr("membership_values") if n.attr("membership_values") is not None
                   else ())
    true_ids, false_ids = arr("nodes_truenodeids"), arr("nodes_falsenodeids")
    true_leaf, false_leaf = arr("nodes_trueleafs"), arr("nodes_falseleafs")
    nodes = {}
    for i, mode in enumerate(modes):
        split = float(splits[i])
        if int(mode) == 6:  # the next NaN-terminated run of set members
            split = set()
            for v in members:
                if np.isnan(v):
                    break
                split.add(float(v))
        nodes[i] = (int(mode), split, int(feats[i]),
                    bool(missing[i]) if missing is not None else False, int(true_ids[i]),
                    int(false_ids[i]), bool(true_leaf[i]), bool(false_leaf[i]))
    leaves = list(zip((float(w) for w in arr("leaf_weights")),
                      (int(t) for t in arr("leaf_targetids"))))
    op = ops.TreeEnsemble(nodes, arr("tree_roots"), leaves, n.attr("n_targets"),
                          n.attr("aggregate_function", 1))
    return op(n.t(0))

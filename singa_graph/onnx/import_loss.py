"""ONNX -> singa_graph: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The library's losses have SINGA's formulas and shapes, so ONNX's are composed: GatherElements
picks each target's log-probability along the class axis, Take picks the class weights, and
targets equal to ``ignore_index`` get weight 0 (they are gathered at class 0, so an
``ignore_index`` outside the classes never indexes out of range).
"""
from __future__ import annotations

import numpy as np

from .. import ops
from .program import constant
from .registry import importer


def _nll(n, logp, target, weight):
    reduction = n.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        n.fail(f"reduction={reduction!r}")
    ignore = n.attr("ignore_index")
    keep = safe = None
    if ignore is not None:
        ignored = ops.equal(target, constant(np.asarray(ignore, target.dtype)))
        safe = ops.where(ignored, constant(np.zeros((), target.dtype)), target)
        keep = ops.cast(ops.logical_not(ignored), logp.dtype)
    safe = target if safe is None else safe
    picked = ops.gather_elements(logp, ops.unsqueeze(safe, [1]), 1)
    loss = ops.neg(ops.reshape(picked, target.shape))
    w = ops.take(weight, safe, 0) if weight is not None else None
    w = keep if w is None else (w if keep is None else ops.mul(w, keep))
    if w is not None:
        loss = ops.mul(loss, w)
    if reduction == "none":
        return loss
    total = ops.sum(loss)
    if reduction == "sum":
        return total
    if w is None:
        return ops.div(total, constant(np.asarray(max(loss.size, 1), logp.dtype)))
    return ops.div(total, ops.sum(w))


@importer("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(n):
    return _nll(n, n.t(0), n.t(1), n.t(2) if n.has(2) else None)


@importer("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(n):
    logp = ops.log_softmax(n.t(0), 1)
    loss = _nll(n, logp, n.t(1), n.t(2) if n.has(2) else None)
    return [loss, logp]

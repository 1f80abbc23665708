"""Loss layers: forward(x, t) returns the loss."""
from __future__ import annotations

from .. import functional
from .. import ops as _ops
from .base import _Fn


class SoftMaxCrossEntropy(_Fn):
    """``forward(x, t)``: softmax cross-entropy of logits ``x`` and labels or one-hot ``t``,
    averaged over the batch."""

    fn = staticmethod(lambda x, t: functional.softmax_cross_entropy(x, t))


class MeanSquareError(_Fn):
    """``forward(x, t)``: SINGA's mean squared error."""

    fn = staticmethod(lambda x, t: _ops.mse_loss(x, t))


class CrossEntropy(_Fn):
    """``forward(y, t)``: cross-entropy of probabilities ``y`` and targets ``t``."""

    fn = staticmethod(lambda y, t: _ops.cross_entropy(y, t))


class BinaryCrossEntropy(_Fn):
    """``forward(x, t)``: binary cross-entropy of probabilities ``x`` and targets ``t``."""

    fn = staticmethod(lambda x, t: functional.binary_cross_entropy(x, t))

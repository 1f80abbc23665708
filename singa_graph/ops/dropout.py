"""Dropout: zero each element with probability ``ratio`` and scale the rest by
``1 / (1 - ratio)`` while training; the identity in evaluation."""
from __future__ import annotations

from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float

__all__ = ["Dropout", "dropout"]

#: Mode read by :func:`dropout` when it is given no ``training`` argument; the user API
#: (``autograd.training``) sets it.
training = True


class Dropout(Operation):
    """Inverted dropout.

    Training: two outputs, ``y = x * mask`` and ``mask`` (dtype of ``x``, holding 0 or
    ``1 / (1 - ratio)``); the gradient is ``dy * mask``. The kernel draws masks from a numpy
    Generator seeded with ``seed`` when the step is built, so a compiled step is reproducible
    while successive runs still draw fresh masks. ``seed=None`` takes one from
    :func:`singa_graph.random.generator`, so ``singa_graph.random.seed`` governs it.

    Evaluation (``training=False``): one output, a copy of ``x``; nothing is drawn.
    """

    inplace = {0: 0}

    def __init__(self, ratio=0.5, training=True, seed=None):
        if not 0.0 <= ratio < 1.0:
            raise ValueError(f"dropout ratio must lie in [0, 1), got {ratio}")
        self.ratio = float(ratio)
        self.training = bool(training)
        if seed is None and self.training:
            from ..random import generator

            seed = int(generator().integers(2 ** 63))
        self.seed = None if seed is None else int(seed)

    def infer(self, x):
        need_float(x)
        spec = TensorSpec(x.shape, x.dtype)
        return [spec, spec] if self.training else [spec]

    def gradient(self, inputs, outputs, dys, needs):
        from .elementwise import mul

        dy = dys[0]
        if dy is None or not self.training:
            return [dy]
        return [mul(dy, outputs[1])]


def dropout(x, ratio=0.5, training=None, seed=None):
    """SINGA's ``dropout``: returns only ``y``. ``training=None`` reads the module flag
    :data:`singa_graph.ops.dropout.training`."""
    if training is None:
        training = globals()["training"]
    out = Dropout(ratio, training, seed)(x)
    return out[0] if isinstance(out, tuple) else out

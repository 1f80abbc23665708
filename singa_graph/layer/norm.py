"""Normalisation and regularisation layers: BatchNorm2d, Dropout."""
from __future__ import annotations

import numpy as np

from .. import initializer
from .. import ops as _ops
from ..errors import ShapeError
from ..ir.tensor import Tensor
from .base import Layer, _float, _param, _training


class BatchNorm2d(Layer):
    """Batch normalisation over channels: params ``scale`` (ones) and ``bias`` (zeros),
    buffers ``running_mean`` (zeros) and ``running_var`` (ones).

    ``BatchNorm2d(momentum=0.9)`` (SINGA 3) or ``BatchNorm2d(num_channels, momentum=0.9)``
    (SINGA 2). Uses batch statistics and updates the running ones while
    ``autograd.training`` is true, the running ones otherwise. ``momentum`` weights the new
    batch, as SINGA's kernels (see :mod:`singa_graph.ops.norm`).
    """

    def __init__(self, *args, momentum=0.9, eps=1e-5, name=None):
        super().__init__(name)
        self.channels = int(args[0]) if args else None
        if len(args) > 1:
            momentum = args[1]
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNorm2d: momentum must lie in [0, 1], got {momentum}")
        self.momentum, self.eps = float(momentum), float(eps)

    def initialize(self, x):
        c = x.shape[1]
        if self.channels is not None and self.channels != c:
            raise ShapeError(f"BatchNorm2d {self.name or ''} was declared with {self.channels} "
                             f"channels, got input of shape {x.shape}")
        self.channels = c
        self.scale = _param((c,), x, initializer.ones)
        self.bias = _param((c,), x, initializer.zeros)
        dt = _float(x.dtype)
        self.register_buffer("running_mean", Tensor((c,), x.device, dt, requires_grad=False))
        self.register_buffer("running_var", Tensor(data=np.ones(c, dt), device=x.device,
                                                   requires_grad=False))

    def forward(self, x):
        return _ops.batchnorm_2d(x, self.scale, self.bias, self.running_mean, self.running_var,
                                 self.momentum, self.eps, _training())


class Dropout(Layer):
    """Zero elements with probability ``ratio`` (scaling the rest by ``1/(1-ratio)``) while
    ``autograd.training`` is true; the identity otherwise."""

    def __init__(self, ratio=0.5):
        super().__init__()
        if not 0.0 <= ratio < 1.0:  # (also refuses NaN)
            raise ValueError(f"Dropout: ratio must lie in [0, 1), got {ratio!r}")
        self.ratio = ratio

    def forward(self, x):
        return _ops.dropout(x, self.ratio, training=_training())

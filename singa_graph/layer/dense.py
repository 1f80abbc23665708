"""Layers with weight matrices: Linear, Gemm, Embedding."""
from __future__ import annotations

import numpy as np

from .. import initializer
from .. import ops as _ops
from ..errors import ShapeError
from .base import Layer, _param


class Linear(Layer):
    """``y = x @ W + b`` with W of shape ``(in, out)``.

    ``Linear(out_features, bias=True)`` (SINGA 3) or ``Linear(in_features, out_features,
    bias=True)`` (SINGA 2); ``in_features`` is taken from the input in any case. W is drawn
    from N(0, 2 / (in + out)) (SINGA; glorot normal), b starts at zero. An input with more
    than 2 dimensions is flattened to ``(N, -1)`` first (SINGA needs 2-d input), so the
    Model-API MLP of the SINGA docs runs on ``(N, 1, H, W)`` images.
    """

    def __init__(self, out_features=None, *args, bias=True, in_features=None, **kwargs):
        super().__init__(kwargs.pop("name", None))
        if kwargs:
            raise TypeError(f"Linear: unexpected arguments {sorted(kwargs)}")
        if args:
            in_features, out_features = out_features, args[0]
            if len(args) > 1:
                bias = args[1]
        if out_features is None:
            raise TypeError("Linear needs out_features")
        self.in_features = in_features
        self.out_features = int(out_features)
        self.bias = bool(bias)

    def initialize(self, x):
        if x.ndim < 2:
            raise ShapeError(f"Linear expects (N, features) input, got shape {x.shape}")
        n_in = int(np.prod(x.shape[1:], dtype=np.int64))
        if self.in_features is not None and self.in_features != n_in:
            raise ShapeError(f"Linear {self.name or ''} was declared with {self.in_features} "
                             f"input features, got input of shape {x.shape}")
        self.in_features = n_in
        self.W = _param((n_in, self.out_features), x, initializer.glorot_normal)
        if self.bias:
            self.b = _param((self.out_features,), x, initializer.zeros)

    def forward(self, x):
        if x.ndim != 2:
            x = _ops.flatten(x, 1)
        y = _ops.matmul(x, self.W)
        return _ops.add_bias(y, self.b, axis=0) if self.bias else y

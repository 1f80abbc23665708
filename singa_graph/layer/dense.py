"""Layers with weight matrices: Linear, Gemm, Embedding."""
from __future__ import annotations

import numpy as np

from .. import initializer
from .. import ops as _ops
from ..errors import ShapeError
from .base import Layer, _int_arg, _param


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
        self.in_features = None if in_features is None else _int_arg(in_features,
                                                                      "Linear: in_features")
        self.out_features = _int_arg(out_features, "Linear: out_features")
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


class Gemm(Layer):
    """``Y = alpha * op(x) @ op(W) + beta * b`` (ONNX Gemm with the weight as a parameter).

    SINGA's ``Gemm(nb_kernels, alpha=1.0, beta=1.0, transA=False, transB=True, bias=True,
    bias_shape=None)``: W has shape ``(nb_kernels, in)`` when ``transB`` (the default) and
    ``(in, nb_kernels)`` otherwise, drawn from N(0, 2 / (in + nb_kernels)); b has
    ``bias_shape`` (default ``(1, nb_kernels)``) and starts at zero.
    """

    def __init__(self, nb_kernels, alpha=1.0, beta=1.0, transA=False, transB=True, bias=True,
                 bias_shape=None):
        super().__init__()
        self.nb_kernels = int(nb_kernels)
        self.alpha, self.beta = float(alpha), float(beta)
        self.transA, self.transB = int(bool(transA)), int(bool(transB))
        self.bias = bool(bias)
        self.bias_shape = None if bias_shape is None else tuple(bias_shape)

    def initialize(self, x):
        if x.ndim != 2:
            raise ShapeError(f"Gemm expects a 2-d input, got shape {x.shape}")
        self.in_features = x.shape[0] if self.transA else x.shape[-1]
        n_in, n_out = self.in_features, self.nb_kernels
        shape = (n_out, n_in) if self.transB else (n_in, n_out)
        self.W = _param(shape, x, initializer.gaussian, std=float(np.sqrt(2.0 / (n_in + n_out))))
        if self.bias:
            self.b = _param(self.bias_shape or (1, n_out), x, initializer.zeros)

    def forward(self, x):
        n_in = x.shape[0] if self.transA else x.shape[-1]
        if n_in != self.in_features:
            raise ShapeError(f"Gemm expects {self.in_features} input features, got input of "
                             f"shape {x.shape}")
        return _ops.gemm(x, self.W, self.b if self.bias else None, self.alpha, self.beta,
                         bool(self.transA), bool(self.transB))


class Embedding(Layer):
    """Rows of a ``(input_dim, output_dim)`` table W at integer word ids: ``(N, T)`` ids give
    ``(N, T, output_dim)``. W is drawn from N(0, 1) (``initializer="gaussian"``, SINGA's
    default) or U(-1, 1) (``"uniform"``)."""

    def __init__(self, input_dim, output_dim, initializer="gaussian"):
        super().__init__()
        if initializer not in ("gaussian", "uniform"):
            raise ValueError(f"Embedding: initializer must be 'gaussian' or 'uniform', got "
                             f"{initializer!r}")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.initializer = initializer

    def initialize(self, x):
        from ..ir.tensor import Tensor

        like = Tensor.symbolic((), np.float32, x.device)
        if self.initializer == "uniform":
            self.W = _param((self.input_dim, self.output_dim), like, initializer_uniform)
        else:
            self.W = _param((self.input_dim, self.output_dim), like, initializer.gaussian,
                            std=1.0)

    def from_pretrained(self, W, freeze=True):
        """Use the table ``W``; ``freeze`` stops its training (SINGA): the table then is a
        buffer (in ``get_states``, not ``get_params``) that no gradient reaches."""
        self.set_states({self.W.name: W})
        self.W.requires_grad = self.W.stores_grad = not freeze
        if freeze:
            self.register_buffer("W", self.W)

    def forward(self, x):
        from ..functional import embedding

        return embedding(x, self.W)


def initializer_uniform(t):
    return initializer.uniform(t, -1.0, 1.0)

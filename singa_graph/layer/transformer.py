"""Transformer layers: LayerNorm, GELU, MultiHeadAttention, PositionEmbedding and the
pre-norm TransformerBlock built from them, on ``(batch, seq, embed)`` inputs.

Position-wise projections multiply the ``(batch * seq, embed)`` view of their input (a free
reshape) by one weight matrix; attention's queries, keys and values are reshaped, never
transposed, to ``(batch, seq, heads, head_dim)`` (the attention op's ``bshd`` layout).
"""
from __future__ import annotations

import numpy as np

from .. import initializer
from .. import ops as _ops
from ..errors import ShapeError
from .base import Layer, _param


def _label(layer) -> str:
    return type(layer).__name__ + (f" {layer.name}" if layer.name else "")


def _dense_params(n_in, n_out, like, bias):
    """``(W, b)`` of a position-wise projection, PyTorch's ``nn.Linear`` initialisation
    (uniform in ``+-1/sqrt(n_in)``); W has shape ``(n_in, n_out)``."""
    bound = 1.0 / np.sqrt(n_in)
    w = _param((n_in, n_out), like, initializer.uniform, -bound, bound)
    b = _param((n_out,), like, initializer.uniform, -bound, bound) if bias else None
    return w, b


def dense(x, w, b=None):
    """``x @ w + b`` over the last axis of ``x`` (any leading shape)."""
    lead = x.shape[:-1]
    y = _ops.matmul(_ops.reshape(x, (-1, x.shape[-1])), w)
    if b is not None:
        y = _ops.add_bias(y, b, axis=0)
    return _ops.reshape(y, lead + (w.shape[1],))


class LayerNorm(Layer):
    """Normalise over the trailing ``normalized_shape`` axes, then scale (``scale``, ones)
    and shift (``bias``, zeros) elementwise, as ``torch.nn.LayerNorm``."""

    def __init__(self, normalized_shape, eps=1e-5, name=None):
        super().__init__(name)
        if isinstance(normalized_shape, (int, np.integer)):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(n) for n in normalized_shape)
        self.eps = float(eps)

    def initialize(self, x):
        self._check(x)
        self.scale = _param(self.normalized_shape, x, initializer.ones)
        self.bias = _param(self.normalized_shape, x, initializer.zeros)

    def _check(self, x):
        k = len(self.normalized_shape)
        if x.shape[x.ndim - k:] != self.normalized_shape or x.ndim < k:
            raise ShapeError(f"{_label(self)} normalizes shape {self.normalized_shape}, got "
                             f"input of shape {x.shape}")

    def forward(self, x):
        self._check(x)
        return _ops.layer_norm(x, self.scale, self.bias, len(self.normalized_shape), self.eps)


class GELU(Layer):
    """Gaussian error linear unit: ``approximate='none'`` (erf) or ``'tanh'``."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return _ops.gelu(x, self.approximate)


class MultiHeadAttention(Layer):
    """Self-attention over ``(batch, seq, embed_dim)``: projections ``Wq, Wk, Wv, Wo``
    (``(embed, embed)`` each, with biases ``bq, bk, bv, bo`` when ``bias``), ``num_heads``
    heads of ``embed_dim // num_heads`` dims, one attention op.

    ``forward(x, mask=None)``: ``mask`` broadcasts to ``(batch, heads, seq, seq)``; a
    floating mask is added to the scores, a boolean one keeps the True positions. ``causal``
    lets position i attend to positions ``<= i`` only. ``dropout`` applies to the output
    projection's input while training."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, causal=False, bias=True,
                 name=None):
        super().__init__(name)
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        if self.num_heads < 1 or self.embed_dim % self.num_heads:
            raise ShapeError(f"{_label(self)}: embed_dim {self.embed_dim} is not divisible "
                             f"by num_heads {self.num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must lie in [0, 1), got {dropout!r}")
        self.dropout, self.causal, self.bias = float(dropout), bool(causal), bool(bias)

    def initialize(self, x, mask=None):
        self._check(x, mask)
        e = self.embed_dim
        self.Wq, self.bq = _dense_params(e, e, x, self.bias)
        self.Wk, self.bk = _dense_params(e, e, x, self.bias)
        self.Wv, self.bv = _dense_params(e, e, x, self.bias)
        self.Wo, self.bo = _dense_params(e, e, x, self.bias)

    def _check(self, x, mask):
        if x.ndim != 3 or x.shape[2] != self.embed_dim:
            raise ShapeError(f"{_label(self)} expects (batch, seq, {self.embed_dim}) input, "
                             f"got {x.shape}")
        if mask is not None:
            b, s = x.shape[:2]
            full = (b, self.num_heads, s, s)
            if mask.ndim > 4 or any(m not in (1, f) for m, f in
                                    zip(mask.shape[::-1], full[::-1])):
                raise ShapeError(f"{_label(self)}: mask of shape {mask.shape} does not "
                                 f"broadcast to (batch, heads, seq, seq) = {full}")

    def forward(self, x, mask=None):
        self._check(x, mask)
        b, s, e = x.shape
        heads = (b, s, self.num_heads, e // self.num_heads)
        q, k, v = (_ops.reshape(dense(x, w, bb), heads) for w, bb in
                   ((self.Wq, self.bq), (self.Wk, self.bk), (self.Wv, self.bv)))
        y = _ops.scaled_dot_product_attention(q, k, v, mask, self.causal, layout="bshd")
        y = _ops.reshape(y, (b, s, e))
        if self.dropout:
            from ..functional import is_training

            y = _ops.dropout(y, self.dropout, training=is_training())
        return dense(y, self.Wo, self.bo)


class PositionEmbedding(Layer):
    """Adds a learned ``(max_len, dim)`` table's first ``seq`` rows to ``(batch, seq, dim)``
    inputs (N(0, 0.02^2) initialisation, as GPT-2)."""

    def __init__(self, max_len, dim, name=None):
        super().__init__(name)
        self.max_len, self.dim = int(max_len), int(dim)

    def initialize(self, x):
        self._check(x)
        self.W = _param((self.max_len, self.dim), x, initializer.gaussian, std=0.02)

    def _check(self, x):
        if x.ndim != 3 or x.shape[2] != self.dim:
            raise ShapeError(f"{_label(self)} expects (batch, seq, {self.dim}) input, got "
                             f"{x.shape}")
        if x.shape[1] > self.max_len:
            raise ShapeError(f"{_label(self)}: sequence of {x.shape[1]} positions is longer "
                             f"than the position table ({self.max_len})")

    def forward(self, x):
        self._check(x)
        return _ops.add(x, _ops.slice(self.W, [0], [x.shape[1]], [0]))


class TransformerBlock(Layer):
    """Pre-norm transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))`` with
    ``mlp = W2 gelu(W1 .)``: ``torch.nn.TransformerEncoderLayer(norm_first=True,
    activation='gelu', batch_first=True)`` without dropout."""

    def __init__(self, d_model, num_heads, dim_feedforward=None, causal=False, eps=1e-5,
                 approximate="none", name=None):
        super().__init__(name)
        self.d_model = int(d_model)
        self.dim_feedforward = int(dim_feedforward or 4 * d_model)
        self.ln1 = LayerNorm(self.d_model, eps)
        self.attn = MultiHeadAttention(self.d_model, num_heads, causal=causal)
        self.ln2 = LayerNorm(self.d_model, eps)
        self.gelu = GELU(approximate)

    def initialize(self, x, mask=None):
        self.W1, self.b1 = _dense_params(self.d_model, self.dim_feedforward, x, True)
        self.W2, self.b2 = _dense_params(self.dim_feedforward, self.d_model, x, True)

    def forward(self, x, mask=None):
        x = _ops.add(x, self.attn(self.ln1(x), mask))
        h = self.gelu(dense(self.ln2(x), self.W1, self.b1))
        return _ops.add(x, dense(h, self.W2, self.b2))

"""Transformer ops: layer normalisation and scaled dot-product attention.

Each is one op with a fused forward that saves what its backward needs (LayerNorm: the mean
and the reciprocal standard deviation of each row; attention: the logsumexp of each row of
scores) and one fused backward op.

Attention works on ``(batch, heads, seq, head_dim)`` tensors (``layout='bhsd'``, as
PyTorch's ``scaled_dot_product_attention``) or on ``(batch, seq, heads, head_dim)``
(``layout='bshd'``): the layout a linear projection of ``(batch, seq, embed)`` gives after a
free reshape, so multi-head attention needs no transposes. The kernels view each
``(batch, head)`` slice in place; the ``seq x seq`` scores live only in the kernel's planned
workspace.

A mask broadcasts to ``(batch, heads, seq_q, seq_k)``: a floating mask is added to the
scaled scores, a boolean mask keeps the positions where it is True (PyTorch's convention for
``scaled_dot_product_attention``). ``causal`` keeps key ``j <= i`` for query ``i``.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float, same_dtype

__all__ = ["LayerNorm", "LayerNormGrad", "ScaledDotProductAttention",
           "ScaledDotProductAttentionGrad", "layer_norm", "scaled_dot_product_attention"]


# ---------------------------------------------------------------------- layer norm
def _norm_shapes(x, scale, bias, axis):
    if not 0 <= axis < x.ndim:
        raise ShapeError(f"normalized axes start at {axis}, out of range for {x.shape}")
    inner = x.shape[axis:]
    for t in (scale, bias):
        if t.shape != inner:
            raise ShapeError(f"scale/bias of shape {t.shape} does not match the normalized "
                             f"shape {inner} of input {x.shape}")
    need_float(x)
    return same_dtype(x, scale, bias), x.shape[:axis]


class LayerNorm(Operation):
    """``y = (x - mean) * rstd * scale + bias`` over the axes from ``axis`` on, with
    ``rstd = 1 / sqrt(var + eps)`` (biased variance, as PyTorch and ONNX).

    Inputs: x, scale, bias (both of shape ``x.shape[axis:]``). Outputs: y and the saved
    ``mean`` and ``rstd`` of shape ``x.shape[:axis]``."""

    def __init__(self, axis=-1, eps=1e-5):
        self.axis = int(axis)
        self.eps = float(eps)

    def infer(self, x, scale, bias):
        if self.axis < 0:
            self.axis += x.ndim
        dt, outer = _norm_shapes(x, scale, bias, self.axis)
        return [TensorSpec(x.shape, dt), TensorSpec(outer, dt), TensorSpec(outer, dt)]

    def gradient(self, inputs, outputs, dys, needs):
        dy = dys[0]
        if dy is None:  # gradients reaching mean / rstd are ignored: they are saved state
            return [None] * 3
        x, scale, _ = inputs
        dx, ds, db = LayerNormGrad(self.axis)(dy, x, scale, outputs[1], outputs[2])
        return [dx if needs[0] else None, ds if needs[1] else None, db if needs[2] else None]


class LayerNormGrad(Operation):
    """``(dx, dscale, dbias)`` of :class:`LayerNorm` from ``(dy, x, scale, mean, rstd)``."""

    def __init__(self, axis=-1):
        self.axis = int(axis)

    def infer(self, dy, x, scale, mean, rstd):
        dt, outer = _norm_shapes(x, scale, scale, self.axis)
        if dy.shape != x.shape or mean.shape != outer or rstd.shape != outer:
            raise ShapeError(f"dy {dy.shape}, mean {mean.shape}, rstd {rstd.shape} do not "
                             f"match x {x.shape}")
        same_dtype(dy, x, mean, rstd)
        return [TensorSpec(x.shape, dt), TensorSpec(scale.shape, dt),
                TensorSpec(scale.shape, dt)]


def layer_norm(x, scale, bias, normalized_ndim=1, eps=1e-5):
    """Layer normalisation over the last ``normalized_ndim`` axes of ``x``; returns y."""
    return LayerNorm(x.ndim - int(normalized_ndim), eps)(x, scale, bias)[0]


# ---------------------------------------------------------------------- attention
def _bhsd(shape, layout):
    """``(batch, heads, seq, dim)`` of a q/k/v shape in ``layout``."""
    return shape if layout == "bhsd" else (shape[0], shape[2], shape[1], shape[3])


def _check_attention(q, k, v, mask, layout):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ShapeError(f"{name} must be 4-d ({layout}), got {t.shape}")
    need_float(q)
    dt = same_dtype(q, k, v)
    (b, h, sq, d), (bk, hk, sk, dk), (bv, hv, sv, dv) = (_bhsd(t.shape, layout)
                                                         for t in (q, k, v))
    if (bk, hk, dk) != (b, h, d) or (bv, hv, sv) != (b, h, sk):
        raise ShapeError(f"q {q.shape}, k {k.shape} and v {v.shape} do not agree ({layout})")
    if mask is not None:
        full = (b, h, sq, sk)
        ok = mask.ndim <= 4 and all(m in (1, f) for m, f in
                                    zip(mask.shape[::-1], full[::-1]))
        if not ok:
            raise ShapeError(f"mask of shape {mask.shape} does not broadcast to the scores "
                             f"{full} (batch, heads, seq_q, seq_k)")
        if mask.dtype != np.bool_ and mask.dtype != dt:
            raise DTypeError(f"mask has dtype {mask.dtype}; bool or {dt} is required")
    return dt, (b, h, sq, sk, dv)


class ScaledDotProductAttention(Operation):
    """``softmax(q k^T * scale + mask) v`` per batch and head, the softmax fused and
    numerically stable. Inputs: q, k, v[, mask]; outputs: the attention output (q's layout,
    v's head dim) and the saved logsumexp of each row of scores, ``(batch, heads, seq_q)``.
    ``scale`` defaults to ``1/sqrt(head_dim)``."""

    def __init__(self, causal=False, scale=None, layout="bhsd"):
        if layout not in ("bhsd", "bshd"):
            raise ValueError(f"attention layout must be 'bhsd' or 'bshd', got {layout!r}")
        self.causal = bool(causal)
        self.scale = None if scale is None else float(scale)
        self.layout = layout

    def infer(self, q, k, v, mask=None):
        dt, (b, h, sq, sk, dv) = _check_attention(q, k, v, mask, self.layout)
        if self.scale is None:
            self.scale = 1.0 / float(np.sqrt(q.shape[-1]))
        out = (b, h, sq, dv) if self.layout == "bhsd" else (b, sq, h, dv)
        return [TensorSpec(out, dt), TensorSpec((b, h, sq), dt)]

    def gradient(self, inputs, outputs, dys, needs):
        if dys[0] is None:
            return [None] * len(inputs)
        grads = ScaledDotProductAttentionGrad(self.causal, self.scale, self.layout)(
            dys[0], *inputs[:3], outputs[0], outputs[1], *inputs[3:])
        return [g if n else None for g, n in zip(grads, needs[:3])] + [None] * (len(inputs) - 3)


class ScaledDotProductAttentionGrad(Operation):
    """``(dq, dk, dv)`` from ``(dout, q, k, v, out, lse[, mask])``: the probabilities are
    recomputed from the saved logsumexp, never stored between forward and backward."""

    def __init__(self, causal=False, scale=1.0, layout="bhsd"):
        self.causal = bool(causal)
        self.scale = float(scale)
        self.layout = layout

    def infer(self, dout, q, k, v, out, lse, mask=None):
        dt, (b, h, sq, sk, dv) = _check_attention(q, k, v, mask, self.layout)
        if dout.shape != out.shape or lse.shape != (b, h, sq):
            raise ShapeError(f"dout {dout.shape}, out {out.shape} or lse {lse.shape} does "
                             f"not match q {q.shape}")
        same_dtype(dout, out, lse, q)
        return [TensorSpec(q.shape, dt), TensorSpec(k.shape, dt), TensorSpec(v.shape, dt)]


def scaled_dot_product_attention(q, k, v, mask=None, causal=False, scale=None, layout="bhsd"):
    """Attention of queries ``q`` over keys ``k`` and values ``v`` (see the module
    docstring for layouts and masks); returns the output only."""
    op = ScaledDotProductAttention(causal, scale, layout)
    ins = (q, k, v) if mask is None else (q, k, v, mask)
    return op(*ins)[0]

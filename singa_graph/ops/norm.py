"""Batch normalisation over the channel axis 1 of ``(N, C, ...)`` inputs (NCHW, or NC).

Running statistics follow SINGA's CPU (DNNL) and cuDNN code, where ``momentum`` weights the
*new* batch (cuDNN's ``exponentialAverageFactor``)::

    running_mean = (1 - momentum) * running_mean + momentum * batch_mean
    running_var  = (1 - momentum) * running_var  + momentum * batch_var * M / (M - 1)

with ``M = N*H*W`` (the unbiased batch variance, as SINGA, cuDNN and PyTorch use). Note
that ONNX BatchNormalization's ``momentum`` is the opposite weight (``1 - momentum`` here).
"""
from __future__ import annotations

from ..errors import ShapeError, UnsupportedOpError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import need_float, same_dtype

__all__ = ["BatchNorm2d", "BatchNorm2dGrad", "batchnorm_2d"]


def _check(x, *per_channel):
    if x.ndim < 2:
        raise ShapeError(f"batch norm needs an (N, C, ...) input, got {x.shape}")
    for t in per_channel:
        if t.shape != (x.shape[1],):
            raise ShapeError(f"per-channel tensor of shape {t.shape} does not match the "
                             f"{x.shape[1]} channels of input {x.shape}")
    need_float(x)
    return same_dtype(x, *per_channel)


class BatchNorm2d(Operation):
    """``y = (x - mean) / sqrt(var + eps) * scale + bias`` per channel.

    Inputs: x, scale, bias, running_mean, running_var (the last four of shape ``(C,)``).
    Training: mean and var are the batch's (biased) statistics; outputs are
    ``(y, saved_mean, saved_inv_std)`` and the running statistics are updated in place.
    Eval (``training=False``): the running statistics are used; one output ``y``.
    """

    def __init__(self, momentum=0.9, eps=1e-5, training=True, relu=False):
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.training = bool(training)
        # set by the fusion pass (passes/fuse.py) on a compiled graph: y = max(bn(x), 0)
        self.relu = bool(relu)

    @property
    def mutates(self):
        # only training writes the running stats; in eval the backward reads them, and a
        # declared write would make the scheduler order that read before this node
        return (3, 4) if self.training else ()

    def infer(self, x, scale, bias, running_mean, running_var):
        dt = _check(x, scale, bias, running_mean, running_var)
        c = (x.shape[1],)
        if self.training:
            return [TensorSpec(x.shape, dt), TensorSpec(c, dt), TensorSpec(c, dt)]
        return [TensorSpec(x.shape, dt)]

    def gradient(self, inputs, outputs, dys, needs):
        # gradients reaching saved_mean / saved_inv_std are ignored: they are saved state
        if self.relu:
            raise UnsupportedOpError("a BatchNorm2d fused with ReLU has no gradient rule: "
                                     "fusion runs after autodiff")
        x, scale, bias, rm, rv = inputs
        dy = dys[0]
        if dy is None:
            return [None] * 5
        if self.training:
            dx, ds, db = BatchNorm2dGrad()(dy, x, scale, outputs[1], outputs[2])
            return [dx if needs[0] else None, ds if needs[1] else None,
                    db if needs[2] else None, None, None]
        return self._eval_gradient(x, scale, rm, rv, dy, needs)

    def _eval_gradient(self, x, scale, rm, rv, dy, needs):
        # eval is an affine map per channel: y = (x - rm) * inv * scale + bias
        from .elementwise import add, div, mul, sqrt, sub
        from .reduce import sum as _sum
        from .shape import reshape

        axes = (0,) + tuple(range(2, x.ndim))
        bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        inv = div(1.0, sqrt(add(rv, self.eps)))
        dx = mul(dy, reshape(mul(scale, inv), bshape)) if needs[0] else None
        ds = (_sum(mul(dy, mul(sub(x, reshape(rm, bshape)), reshape(inv, bshape))), axes)
              if needs[1] else None)
        db = _sum(dy, axes) if needs[2] else None
        return [dx, ds, db, None, None]


class BatchNorm2dGrad(Operation):
    """``(dx, dscale, dbias)`` of training-mode BatchNorm2d from
    ``(dy, x, scale, saved_mean, saved_inv_std)``.

    With ``relu=True`` (set by the fusion pass) a sixth input ``z``, the output of a ReLU
    that followed the BatchNorm, masks the incoming gradient: ``dy * (z > 0)`` is used in
    place of ``dy``, which folds the ReLU's backward into this op."""

    def __init__(self, relu=False):
        self.relu = bool(relu)

    def infer(self, dy, x, scale, mean, inv_std, z=None):
        dt = _check(x, scale, mean, inv_std)
        if dy.shape != x.shape:
            raise ShapeError(f"dy {dy.shape} does not match x {x.shape}")
        if (z is not None) != self.relu:
            raise ShapeError("BatchNorm2dGrad takes the ReLU output z exactly when relu=True")
        if z is not None and z.shape != x.shape:
            raise ShapeError(f"ReLU output {z.shape} does not match x {x.shape}")
        same_dtype(dy, x)
        c = (x.shape[1],)
        return [TensorSpec(x.shape, dt), TensorSpec(c, dt), TensorSpec(c, dt)]


def batchnorm_2d(x, scale, bias, running_mean, running_var, momentum=0.9, eps=1e-5,
                 training=True):
    """Batch normalisation; returns ``y``. In training the running stats are updated in
    place (``momentum`` weights the batch statistics, see the module docstring)."""
    out = BatchNorm2d(momentum, eps, training)(x, scale, bias, running_mean, running_var)
    return out[0] if training else out

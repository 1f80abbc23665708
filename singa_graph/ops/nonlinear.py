"""More activations: SeLU, Elu, HardSigmoid, Softplus, Softsign, Gelu (ONNX names and
attributes) and PRelu.

The unary ones share one backward op, :class:`ActivationGrad`, that holds the forward op's
type and attributes and computes ``dy * f'(x)`` in one fused kernel.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import broadcast_shape, need_float, same_dtype
from .elementwise import mul, sub, sum_to

__all__ = ["Selu", "Elu", "HardSigmoid", "Softplus", "Softsign", "Gelu", "PRelu",
           "ActivationGrad", "selu", "elu", "hardsigmoid", "softplus", "softsign", "gelu",
           "prelu"]


class _Act(Operation):
    """``y = f(x)`` elementwise; the backward is one :class:`ActivationGrad` op."""

    def infer(self, x):
        need_float(x, narrow=hasattr(self, "formula"))
        return [TensorSpec(x.shape, x.dtype)]

    def gradient(self, inputs, outputs, dys, needs):
        return [ActivationGrad(self)(dys[0], inputs[0])]


class ActivationGrad(Operation):
    """``dy * f'(x)`` for the activation ``of`` (its type) with that op's attributes."""

    inplace = {0: 0}

    def __init__(self, of):
        self.of = of.type if isinstance(of, Operation) else str(of)
        self.alpha = float(getattr(of, "alpha", 0.0))
        self.gamma = float(getattr(of, "gamma", getattr(of, "beta", 0.0)))
        self.approximate = getattr(of, "approximate", "none")

    @property
    def formula(self):
        base = {"Selu": "selu", "Elu": "elu", "HardSigmoid": "hardsigmoid",
                "Softplus": "softplus", "Softsign": "softsign", "Gelu": "gelu"}.get(self.of)
        if base == "gelu" and self.approximate == "tanh":
            base = "gelu_tanh"
        return None if base is None else base + "_grad"

    def infer(self, dy, x):
        if dy.shape != x.shape:
            raise ShapeError(f"gradient of shape {dy.shape} does not match {x.shape}")
        return [TensorSpec(x.shape, same_dtype(dy, x))]


class Selu(_Act):
    """``gamma * x`` for ``x > 0``, ``gamma * alpha * (exp(x) - 1)`` otherwise."""

    formula = "selu"

    def __init__(self, alpha=1.67326, gamma=1.0507):
        self.alpha, self.gamma = float(alpha), float(gamma)


class Elu(_Act):
    """``x`` for ``x >= 0``, ``alpha * (exp(x) - 1)`` otherwise."""

    formula = "elu"

    def __init__(self, alpha=1.0):
        self.alpha = float(alpha)


class HardSigmoid(_Act):
    """``max(0, min(1, alpha * x + beta))``."""

    formula = "hardsigmoid"

    def __init__(self, alpha=0.2, beta=0.5):
        self.alpha, self.beta = float(alpha), float(beta)


class Softplus(_Act):
    """``log(1 + exp(x))``, computed without overflow."""

    formula = "softplus"


class Softsign(_Act):
    """``x / (1 + |x|)``."""

    formula = "softsign"


class Gelu(_Act):
    """``x * Phi(x)`` (``approximate="none"``, with erf) or its tanh approximation."""

    def __init__(self, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    @property
    def formula(self):
        return "gelu_tanh" if self.approximate == "tanh" else "gelu"


class PRelu(Operation):
    """``x`` for ``x >= 0``, ``slope * x`` otherwise. ``x`` and ``slope`` broadcast against
    each other as numpy's (SINGA's PRelu: x (1, 4, 1, 6) and slope (3, 1, 5, 6) give
    (3, 4, 5, 6)); ONNX's PRelu, where only ``slope`` broadcasts, is the common case."""

    formula = "prelu"

    def infer(self, x, slope):
        need_float(x)
        try:
            shape = broadcast_shape(x.shape, slope.shape)
        except ShapeError:
            raise ShapeError(f"slope {slope.shape} and x {x.shape} do not broadcast") from None
        return [TensorSpec(shape, same_dtype(x, slope))]

    def gradient(self, inputs, outputs, dys, needs):
        from .logic import less

        x, slope = inputs
        neg_mask = less(x, 0.0)
        dy = dys[0]
        dx = mul(dy, sub(1.0, mul(neg_mask, sub(1.0, slope)))) if needs[0] else None
        if dx is not None and dx.shape != x.shape:  # x broadcast against the slope
            dx = sum_to(dx, x.shape)
        ds = sum_to(mul(dy, mul(x, neg_mask)), slope.shape) if needs[1] else None
        return [dx, ds]


def selu(x, alpha=1.67326, gamma=1.0507):
    """SINGA's ``selu``."""
    return Selu(alpha, gamma)(x)


def elu(x, alpha=1.0):
    """SINGA's ``elu``."""
    return Elu(alpha)(x)


def hardsigmoid(x, alpha=0.2, gamma=0.5):
    """SINGA's ``hardsigmoid``: ``max(0, min(1, alpha * x + gamma))``."""
    return HardSigmoid(alpha, gamma)(x)


def softplus(x):
    return Softplus()(x)


def softsign(x):
    return Softsign()(x)


def gelu(x, approximate="none"):
    """Gaussian error linear unit (ONNX ``Gelu``)."""
    return Gelu(approximate)(x)


def prelu(x, slope):
    """SINGA's ``prelu``: ``x`` for ``x >= 0``, ``slope * x`` otherwise."""
    return PRelu()(x, slope)

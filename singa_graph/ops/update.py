"""Optimizer updates as graph ops.

Each op writes a parameter and its optimizer state in place (``mutates``) and returns a
zero-cost alias of the updated parameter, which makes the update reachable from the graph's
outputs. Hyperparameters are 0-d tensor *inputs*, not attributes, so changing the learning
rate between steps needs no recompilation: the kernel reads the current value at run time.
Only structural choices (nesterov, whether a momentum buffer exists) are attributes.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec

__all__ = ["SGDUpdate", "AdamUpdate", "RMSPropUpdate", "AdaGradUpdate"]


class _Update(Operation):
    alias = {0: 0}
    differentiable = False
    run_asap = True
    n_state = 0
    n_hyper = 0

    def infer(self, p, g, *rest):
        n = self.n_state + self.n_hyper
        if len(rest) != n:
            raise ShapeError(f"{self.type} takes param, grad, {self.n_state} state and "
                             f"{self.n_hyper} hyperparameter tensors; got {2 + len(rest)}")
        for t in (g,) + rest[:self.n_state]:
            if t.shape != p.shape:
                raise ShapeError(f"{t.name} has shape {t.shape}, param {p.name} has {p.shape}")
        for h in rest[self.n_state:]:
            if h.shape != ():
                raise ShapeError(f"hyperparameter {h.name} must be 0-d, got {h.shape}")
        return [TensorSpec(p.shape, p.dtype)]


class SGDUpdate(_Update):
    """SGD as PyTorch and SINGA define it. Inputs: p, g, [buf], lr, momentum, dampening,
    weight_decay. ``g' = g + wd*p``; with momentum ``buf = m*buf + (1-dampening)*g'`` (buf = g'
    on the first step is approximated by a zero-initialised buffer, as SINGA does), then
    ``p -= lr * (g' + m*buf if nesterov else buf)``."""

    def __init__(self, momentum: bool = True, nesterov: bool = False):
        self.momentum = bool(momentum)
        self.nesterov = bool(nesterov)

    n_hyper = 4

    @property
    def n_state(self):
        return 1 if self.momentum else 0

    @property
    def mutates(self):
        return (0, 2) if self.momentum else (0,)


class AdamUpdate(_Update):
    """Adam (Kingma & Ba) with bias correction and L2 weight decay. Inputs: p, g, m, v, then
    0-d tensors step, lr, beta1, beta2, eps, weight_decay. ``step`` is per-parameter state
    that the kernel increments, as PyTorch keeps ``state['step']``."""

    mutates = (0, 2, 3, 4)
    n_state = 2
    n_hyper = 6


class RMSPropUpdate(_Update):
    """RMSProp: ``s = rho*s + (1-rho)*g'^2; p -= lr * g' / (sqrt(s) + eps)``. Inputs: p, g, s,
    lr, rho, eps, weight_decay."""

    mutates = (0, 2)
    n_state = 1
    n_hyper = 4


class AdaGradUpdate(_Update):
    """AdaGrad: ``h += g'^2; p -= lr * g' / (sqrt(h) + eps)``. Inputs: p, g, h, lr, eps,
    weight_decay."""

    mutates = (0, 2)
    n_state = 1
    n_hyper = 3

"""SINGA's ``autograd`` module: functional ops, ``backward``, the ``training`` flag and the
layer classes under their SINGA 2.x names.

Eager use, as in SINGA's docs::

    from singa_graph import autograd, tensor
    autograd.training = True
    x = autograd.relu(autograd.add_bias(autograd.matmul(inputs, w0), b0))
    loss = autograd.softmax_cross_entropy(x, target)
    for p, g in autograd.backward(loss):     # each pair as soon as g is final
        p.data -= 0.05 * g.data

The same functions called on Placeholders build a graph instead (no data needed).

``training`` (default False, as SINGA) selects the train or eval behaviour of BatchNorm and
Dropout; layers read it when they are called. Setting it also sets
``singa_graph.ops.dropout.training``, the default of :func:`singa_graph.ops.dropout`. Unlike
SINGA, ``training = False`` does not stop ops from recording the backward graph; use
:func:`no_grad` for that.
"""
from __future__ import annotations

import sys
import types

from . import functional
from .functional import *  # noqa: F401,F403
from .functional import _and, _float_targets, _not, _or, _xor  # noqa: F401
from .ir.op import Operation, no_grad  # noqa: F401
from .layer import (LSTM, RNN, AvgPool1d, AvgPool2d, BatchNorm2d, Conv2d,  # noqa: F401
                    Dropout, Flatten, Layer, Linear, MaxPool1d, MaxPool2d, Pooling2d, ReLU,
                    RNN_Base, SeparableConv2d, Sigmoid, Tanh)
from .passes.autodiff import backward  # noqa: F401

Operator = Operation


class _AutogradModule(types.ModuleType):
    """Makes ``autograd.training = x`` set the flag that layers and dropout read."""

    @property
    def training(self) -> bool:
        return functional.is_training()

    @training.setter
    def training(self, value):
        functional.set_training(value)


sys.modules[__name__].__class__ = _AutogradModule


class _Gradients(dict):
    """``{param: grad}`` that SINGA code may also index by ``id(param)``."""

    def __missing__(self, key):
        if isinstance(key, int):
            for p, g in self.items():
                if id(p) == key:
                    return g
        raise KeyError(key)


def gradients(y, dy=None) -> dict:
    """``{param: grad}`` for every ``stores_grad`` tensor ``y`` depends on (eager); SINGA's
    ``grads[id(param)]`` works too."""
    return _Gradients(backward(y, dy))

"""Parameter initialisers (SINGA's ``initializer`` module, itself adapted from Keras).

Every function fills a concrete Tensor in place and returns it. Samples come from the global
generator of :mod:`singa_graph.random`, so ``singa_graph.random.seed(s)`` makes them
reproducible. Fans follow SINGA's layouts: a 2-d weight is ``(in, out)`` (Linear), a 4-d one
``(out, in/group, kh, kw)`` (Conv2d)::

    from singa_graph import initializer, tensor
    w = tensor.Tensor((3, 5))
    initializer.he_uniform(w)
"""
from __future__ import annotations

import math

import numpy as np

from .random import generator

__all__ = ["eye", "orthogonal", "lecun_uniform", "lecun_normal", "glorot_uniform",
           "glorot_normal", "xavier_uniform", "xavier_normal", "he_uniform", "he_normal",
           "kaiming_uniform", "kaiming_normal", "gaussian", "uniform", "constant", "zeros",
           "ones", "xavier", "glorot", "msra", "compute_fans", "get"]


def compute_fans(shape) -> tuple[float, float]:
    """``(fan_in, fan_out)`` of a weight shape: ``(in, out)`` for 2-d, ``(out, in, *k)`` for
    convolution kernels, ``sqrt(size)`` for both otherwise."""
    shape = tuple(shape)
    if len(shape) == 2:
        return float(shape[0]), float(shape[1])
    if len(shape) in (3, 4, 5):
        rf = float(np.prod(shape[2:]))
        return shape[1] * rf, shape[0] * rf
    n = math.sqrt(float(np.prod(shape))) if shape else 1.0
    return n, n


def _fill(t, arr):
    t.data = np.ascontiguousarray(arr, dtype=t.dtype).reshape(t.shape)
    return t


def _random_fill(t, scale, mode, distribution):
    fan_in, fan_out = compute_fans(t.shape)
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    scale /= max(1.0, n)
    if distribution == "normal":
        return _fill(t, generator().normal(0.0, math.sqrt(scale), t.shape))
    limit = math.sqrt(3.0 * scale)
    return _fill(t, generator().uniform(-limit, limit, t.shape))


def lecun_uniform(t):
    """U(-l, l) with ``l = sqrt(3 / fan_in)``."""
    return _random_fill(t, 1.0, "fan_in", "uniform")


def lecun_normal(t):
    """N(0, 1 / fan_in)."""
    return _random_fill(t, 1.0, "fan_in", "normal")


def glorot_uniform(t):
    """Xavier/Glorot uniform: U(-l, l) with ``l = sqrt(6 / (fan_in + fan_out))``."""
    return _random_fill(t, 1.0, "fan_avg", "uniform")


def glorot_normal(t):
    """Xavier/Glorot normal: N(0, 2 / (fan_in + fan_out))."""
    return _random_fill(t, 1.0, "fan_avg", "normal")


def he_uniform(t):
    """He/Kaiming uniform: U(-l, l) with ``l = sqrt(6 / fan_in)``."""
    return _random_fill(t, 2.0, "fan_in", "uniform")


def he_normal(t):
    """He/Kaiming normal: N(0, 2 / fan_in)."""
    return _random_fill(t, 2.0, "fan_in", "normal")


xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


def gaussian(t, fan_in=0, fan_out=0, mean=None, std=None):
    """SINGA's (deprecated) ``gaussian(t, fan_in, fan_out)``: N(0, 2*avg/(fan_in+fan_out)),
    avg = 2 when both fans are given, else 1. With ``std`` (and optionally ``mean``) given it
    is a plain N(mean, std^2) fill."""
    if std is None:
        if fan_in <= 0 and fan_out <= 0:
            fan_in, fan_out = compute_fans(t.shape)
        avg = 1 if fan_in * fan_out == 0 else 2
        std = math.sqrt(2.0 * avg / (fan_in + fan_out))
    return _fill(t, generator().normal(mean or 0.0, std, t.shape))


def uniform(t, low=-1.0, high=1.0):
    """Plain U(low, high) fill."""
    return _fill(t, generator().uniform(low, high, t.shape))


def constant(t, value=0.0):
    """Fill with ``value``."""
    return _fill(t, np.full(t.shape, value))


def zeros(t):
    return constant(t, 0.0)


def ones(t):
    return constant(t, 1.0)


def xavier(t):
    """SINGA's (deprecated) ``xavier``: U(-l, l) with ``l = sqrt(6 / (shape[0] + shape[1]))``."""
    scale = math.sqrt(6.0 / (t.shape[0] + t.shape[1]))
    return uniform(t, -scale, scale)


def glorot(t):
    """SINGA's (deprecated) ``glorot``: N(0, 2 / (shape[0] + shape[1]))."""
    return gaussian(t, std=math.sqrt(2.0 / (t.shape[0] + t.shape[1])))


def msra(t):
    """SINGA's (deprecated) ``msra``: N(0, 2 / shape[0])."""
    return gaussian(t, std=math.sqrt(2.0 / t.shape[0]))


def eye(t):
    """Ones on the diagonal of a 2-d tensor, zeros elsewhere."""
    if len(t.shape) != 2:
        raise ValueError(f"eye: only 2-d tensors are supported, got shape {t.shape}")
    return _fill(t, np.eye(*t.shape))


def orthogonal(t, gain=1.0):
    """A random orthogonal 2-d matrix times ``gain``."""
    if len(t.shape) != 2:
        raise ValueError(f"orthogonal: only 2-d tensors are supported, got shape {t.shape}")
    a = generator().normal(0.0, 1.0, t.shape)
    u, _, v = np.linalg.svd(a, full_matrices=False)
    return _fill(t, (u if u.shape == t.shape else v) * gain)


def get(name_or_fn):
    """The initialiser named ``name_or_fn`` (e.g. ``'he_uniform'``), or the callable itself."""
    if callable(name_or_fn):
        return name_or_fn
    key = str(name_or_fn).lower()
    fn = globals().get(key)
    if fn is None or key not in __all__ or key in ("get", "compute_fans"):
        raise ValueError(f"unknown initializer {name_or_fn!r}; known: "
                         + ", ".join(n for n in __all__ if n not in ("get", "compute_fans")))
    return fn

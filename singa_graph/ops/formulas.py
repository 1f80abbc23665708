"""Scalar formulas of elementwise activations, written once as plain Python.

Each function takes and returns one scalar and uses only arithmetic, comparisons and
:mod:`math` (and calls no other function here: a device function may only call compiled
functions), so that ``numba.njit`` and ``numba.cuda.jit(device=True)`` both compile it:
CPU loops, CUDA kernels and fused epilogues (runtime/kernels/cpu/epilogue.py) call the same
definition. Where a branch returns a constant the value is exact (0, 1, 6), so a result
stored into a float32 array is the same whichever float type the branch was typed in.

The expressions follow the existing kernels operation for operation (same literals, same
order), so a fused epilogue that stores each op's result before applying the next one
rounds exactly as the unfused graph does.
"""
from __future__ import annotations

import math

__all__ = ["relu", "relu6", "hardsigmoid", "hardswish", "sigmoid", "silu"]


def relu(x):
    """``max(x, 0)`` as ``np.maximum(x, 0)`` computes it: NaN stays NaN, -0.0 stays -0.0."""
    return x if (x >= 0 or x != x) else 0.0


def relu6(x):
    """``min(max(x, 0), 6)`` (ONNX ``Clip(x, 0, 6)``), NaN kept, as ``np.minimum`` after
    ``np.maximum``."""
    if x <= 0:
        return x if x == 0 else 0.0  # -0.0 and 0.0 stay as they are, as np.maximum keeps x
    return x if (x <= 6 or x != x) else 6.0


def hardsigmoid(x, alpha, beta):
    """``min(1, max(0, alpha * x + beta))`` (ONNX HardSigmoid; the CPU kernel's expression)."""
    return min(1.0, max(0.0, alpha * x + beta))


def hardswish(x):
    """``x * hardsigmoid(x, 1/6, 1/2)`` (ONNX HardSwish). A fused kernel that must match the
    two-op graph bit for bit rounds the hardsigmoid to the tensor's dtype before the product
    (see runtime/kernels/cpu/epilogue.py)."""
    return x * min(1.0, max(0.0, (1.0 / 6.0) * x + 0.5))


def sigmoid(x):
    """``1 / (1 + exp(-x))``, taking ``exp`` of a non-positive number only (no overflow)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def silu(x):
    """``x * sigmoid(x)`` (SiLU / Swish, exported by ONNX as Sigmoid then Mul); rounded like
    :func:`hardswish` when fused."""
    if x >= 0:
        return x * (1.0 / (1.0 + math.exp(-x)))
    e = math.exp(x)
    return x * (e / (1.0 + e))

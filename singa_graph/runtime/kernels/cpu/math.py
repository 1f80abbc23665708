"""Kernels of ops/math.py, ops/nonlinear.py and ops/logic.py.

One numpy ufunc with ``out=`` where it does the whole job. The piecewise activations and
their gradients are one fused Numba loop each; to keep the cold compile to two functions
(per dtype) they share one driver selected by an integer code, branching outside the loop.
"""
import math

import numpy as np
from numba import njit

from ...registry import kernel
from .activation import contiguous, flat

# ---------------------------------------------------------------------- ufunc ops
_UNARY = {"Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos,
          "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh, "Asinh": np.arcsinh,
          "Acosh": np.arccosh, "Atanh": np.arctanh, "Ceil": np.ceil, "Floor": np.floor,
          "Round": np.rint, "Reciprocal": np.reciprocal}


def _unary(ufunc):
    def factory(op, ins, outs):
        (x,), (y,) = ins, outs
        return lambda: ufunc(x, out=y)
    return factory


for _name, _uf in _UNARY.items():
    kernel(_name)(_unary(_uf))


def _compare(ufunc):
    def factory(op, ins, outs):
        a, b = ins
        (y,) = outs
        # numpy writes bool results into a float/int out array as 0/1 with casting
        return lambda: ufunc(a, b, out=y, casting="unsafe")
    return factory


for _name, _uf in {"Greater": np.greater, "Less": np.less, "Equal": np.equal,
                   "And": np.logical_and, "Or": np.logical_or,
                   "Xor": np.logical_xor}.items():
    kernel(_name)(_compare(_uf))


@kernel("Not")
def logical_not(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.logical_not(x, out=y, casting="unsafe")


@kernel("Where")
def where(op, ins, outs):
    c, x, y = ins
    (out,) = outs
    if c.dtype == np.bool_:
        return lambda: (np.copyto(out, y), np.copyto(out, x, where=c))
    return lambda: (np.copyto(out, y), np.copyto(out, x, where=c != 0))


def _extreme(ufunc):
    def factory(op, ins, outs):
        (y,) = outs
        first, rest = ins[0], ins[1:]

        def step():
            np.copyto(y, first)
            for x in rest:
                ufunc(y, x, out=y)
        return step
    return factory


kernel("Max")(_extreme(np.maximum))
kernel("Min")(_extreme(np.minimum))


@kernel("PRelu")
def prelu(op, ins, outs):
    x, s = ins
    (y,) = outs
    return lambda: (np.multiply(x, s, out=y), np.copyto(y, x, where=x >= 0))


# ---------------------------------------------------------------------- fused loops
ERF, ROUND_AWAY, SELU, ELU, HARDSIGMOID, SOFTPLUS, SOFTSIGN, GELU, GELU_TANH = range(9)
_CODE = {"Erf": ERF, "RoundHalfAway": ROUND_AWAY, "Selu": SELU, "Elu": ELU,
         "HardSigmoid": HARDSIGMOID, "Softplus": SOFTPLUS, "Softsign": SOFTSIGN, "Gelu": GELU}
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _code(of, op):
    code = _CODE[of]
    return GELU_TANH if code == GELU and getattr(op, "approximate", "none") == "tanh" else code


@njit(cache=True)
def _forward(code, x, y, a, g):
    n = x.shape[0]
    if code == ERF:
        for i in range(n):
            y[i] = math.erf(x[i])
    elif code == ROUND_AWAY:
        for i in range(n):
            v = abs(x[i])
            r = math.floor(v)
            if v - r >= 0.5:  # exact: v - floor(v) has no rounding error
                r += 1.0
            y[i] = r if x[i] >= 0 else -r
    elif code == SELU:
        for i in range(n):
            v = x[i]
            y[i] = g * v if v > 0 else g * a * (math.exp(v) - 1.0)
    elif code == ELU:
        for i in range(n):
            v = x[i]
            y[i] = v if v >= 0 else a * (math.exp(v) - 1.0)
    elif code == HARDSIGMOID:
        for i in range(n):
            y[i] = min(1.0, max(0.0, a * x[i] + g))
    elif code == SOFTPLUS:
        for i in range(n):
            v = x[i]
            y[i] = max(v, 0.0) + math.log1p(math.exp(-abs(v)))
    elif code == SOFTSIGN:
        for i in range(n):
            y[i] = x[i] / (1.0 + abs(x[i]))
    elif code == GELU:
        for i in range(n):
            v = x[i]
            y[i] = 0.5 * v * (1.0 + math.erf(v * _INV_SQRT_2))
    else:
        for i in range(n):
            v = x[i]
            y[i] = 0.5 * v * (1.0 + math.tanh(_SQRT_2_PI * (v + 0.044715 * v * v * v)))


@njit(cache=True)
def _backward(code, dy, x, dx, a, g):
    n = x.shape[0]
    if code == SELU:
        for i in range(n):
            v = x[i]
            dx[i] = dy[i] * (g if v > 0 else g * a * math.exp(v))
    elif code == ELU:
        for i in range(n):
            v = x[i]
            dx[i] = dy[i] * (1.0 if v >= 0 else a * math.exp(v))
    elif code == HARDSIGMOID:
        for i in range(n):
            u = a * x[i] + g
            dx[i] = dy[i] * a if 0.0 < u < 1.0 else 0.0 * dy[i]
    elif code == SOFTPLUS:
        for i in range(n):
            v = x[i]
            e = math.exp(-abs(v))  # sigmoid(v) without overflow
            s = 1.0 / (1.0 + e) if v >= 0 else e / (1.0 + e)
            dx[i] = dy[i] * s
    elif code == SOFTSIGN:
        for i in range(n):
            d = 1.0 + abs(x[i])
            dx[i] = dy[i] / (d * d)
    elif code == GELU:
        for i in range(n):
            v = x[i]
            cdf = 0.5 * (1.0 + math.erf(v * _INV_SQRT_2))
            dx[i] = dy[i] * (cdf + v * _INV_SQRT_2PI * math.exp(-0.5 * v * v))
    else:
        for i in range(n):
            v = x[i]
            t = math.tanh(_SQRT_2_PI * (v + 0.044715 * v * v * v))
            dt = (1.0 - t * t) * _SQRT_2_PI * (1.0 + 3 * 0.044715 * v * v)
            dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * dt)


def _fused_forward(op, ins, outs):
    x, y = flat(ins[0]), flat(outs[0])
    code = _code(op.type, op)
    a = y.dtype.type(getattr(op, "alpha", 0.0))
    g = y.dtype.type(getattr(op, "gamma", getattr(op, "beta", 0.0)))
    return lambda: _forward(code, x, y, a, g)


for _name in _CODE:
    kernel(_name)(contiguous(_fused_forward))


@kernel("ActivationGrad")
@contiguous
def activation_grad(op, ins, outs):
    dy, x = flat(ins[0]), flat(ins[1])
    dx = flat(outs[0])
    code = _code(op.of, op)
    a, g = dx.dtype.type(op.alpha), dx.dtype.type(op.gamma)
    return lambda: _backward(code, dy, x, dx, a, g)

"""The scalar formula of every elementwise op, written once.

Each formula is a plain function of scalars using only ``math``, comparisons and arithmetic,
so that ``numba.njit`` and ``numba.cuda.jit(device=True)`` both compile it; the runtime
generates from it the op's CPU loop, its CUDA kernel and the fused kernels of elementwise
chains (:mod:`singa_graph.runtime.kernels.generate`). An Operation names its formula in the
class attribute ``formula`` (see :func:`formula_of`), so passes see what is fusible without
importing the runtime.

Every formula takes its tensor operands, then ``a`` and ``g`` (the op's two scalar
attributes: alpha and gamma or beta, 0 when unused), then ``k``, the tuple of
:func:`constants` in the data's dtype. numba types a Python float literal as float64 (and an
int literal next to a float32 as float64 too), which would make float32 data compute in
float64; constants passed in the data's dtype keep float32 in float32 and float64 in
float64, on the CPU and the GPU alike. So no formula contains a float literal.
"""
from __future__ import annotations

import math

import numpy as np

#: the names of the entries of ``k``, in order
CONSTANT_NAMES = ("zero", "half", "one", "two", "six", "sixth", "inv_sqrt2", "sqrt_2_pi",
                  "cubic", "cubic3", "inv_sqrt_2pi", "big")


def constants(dtype) -> tuple:
    """``k``: the constants of the formulas as numpy scalars of ``dtype``. ``big`` is the
    magnitude from which every value of a float dtype is an integer (2**23 for float32)."""
    dt = np.dtype(dtype)
    big = 2.0 ** np.finfo(dt).nmant if dt.kind == "f" else 0
    cubic = 0.044715
    values = (0, 0.5, 1, 2, 6, 1 / 6, 1 / math.sqrt(2.0), math.sqrt(2.0 / math.pi), cubic,
              3 * cubic, 1 / math.sqrt(2.0 * math.pi), big)
    return tuple(dt.type(v) for v in values)


# ---------------------------------------------------------------------- binary
def add(x, y, a, g, k):
    return x + y


def sub(x, y, a, g, k):
    return x - y


def mul(x, y, a, g, k):
    return x * y


def div(x, y, a, g, k):
    return x / y


def power(x, y, a, g, k):
    return x ** y


def maximum(x, y, a, g, k):
    return x if x >= y or x != x else y  # a NaN operand wins, as in np.maximum


def minimum(x, y, a, g, k):
    return x if x <= y or x != x else y


def greater(x, y, a, g, k):
    return k[2] if x > y else k[0]


def less(x, y, a, g, k):
    return k[2] if x < y else k[0]


def equal(x, y, a, g, k):
    return k[2] if x == y else k[0]


def logical_and(x, y, a, g, k):
    return k[2] if x != k[0] and y != k[0] else k[0]


def logical_or(x, y, a, g, k):
    return k[2] if x != k[0] or y != k[0] else k[0]


def logical_xor(x, y, a, g, k):
    return k[2] if (x != k[0]) != (y != k[0]) else k[0]


def prelu(x, y, a, g, k):
    return x if x >= k[0] else x * y  # y: the slope


def where(c, x, y, a, g, k):
    return x if c != k[0] else y


# Integer arithmetic (ONNX's integer Div, Mod, BitShift, Bitwise*). Division by zero gives
# 0 here, as numpy's integer ufuncs do, instead of raising inside a kernel.
def trunc_div(x, y, a, g, k):
    if y == k[0]:
        return x - x
    q = x // y  # floor; ONNX and C truncate toward zero
    return q + k[2] if q * y != x and (x < k[0]) != (y < k[0]) else q


def floor_mod(x, y, a, g, k):
    if y == k[0]:
        return x - x
    return x % y  # Python's (and numpy's mod): the sign of the divisor


def int_fmod(x, y, a, g, k):
    return x - trunc_div(x, y, a, g, k) * y  # C's %: the sign of the dividend


def float_fmod(x, y, a, g, k):
    if y == k[0]:
        return math.sqrt(-k[2]) + x  # NaN, as C's fmod (numba's % raises here)
    # the remainder of two non-negative floats is exact; the sign is the dividend's
    return math.copysign(abs(x) % abs(y), x)


def float_mod(x, y, a, g, k):
    r = float_fmod(x, y, a, g, k)  # numpy's mod: fmod moved to the divisor's sign
    if r == k[0]:
        return math.copysign(k[0], y)
    return r + y if (r < k[0]) != (y < k[0]) else r


# ``a``: the bit width of the dtype; shifts by a negative count or by the width or more give
# what ONNX's reference gives (0, or -1 for a negative number shifted right).
def shift_left(x, y, a, g, k):
    return x - x if y < k[0] or y >= a else x << y


def shift_right(x, y, a, g, k):
    if y < k[0] or y >= a:
        return (x >> (a - k[2])) >> k[2]  # -1 for negative x, else 0
    return x >> y


def bitwise_and(x, y, a, g, k):
    return x & y


def bitwise_or(x, y, a, g, k):
    return x | y


def bitwise_xor(x, y, a, g, k):
    return x ^ y


def bitwise_not(x, a, g, k):
    return ~x


# ---------------------------------------------------------------------- unary
def neg(x, a, g, k):
    return -x


def scale(x, a, g, k):
    return a * x


def exp(x, a, g, k):
    return math.exp(x)


def log(x, a, g, k):
    return math.log(x)


def sqrt(x, a, g, k):
    return math.sqrt(x)


def absolute(x, a, g, k):
    return abs(x)


def sign(x, a, g, k):
    zero, one = k[0], k[2]
    return x if x != x else (one if x > zero else (-one if x < zero else zero))


def sin(x, a, g, k):
    return math.sin(x)


def cos(x, a, g, k):
    return math.cos(x)


def tan(x, a, g, k):
    return math.tan(x)


def asin(x, a, g, k):
    return math.asin(x)


def acos(x, a, g, k):
    return math.acos(x)


def atan(x, a, g, k):
    return math.atan(x)


def sinh(x, a, g, k):
    return math.sinh(x)


def cosh(x, a, g, k):
    return math.cosh(x)


def tanh(x, a, g, k):
    return math.tanh(x)


def asinh(x, a, g, k):
    return math.asinh(x)


def acosh(x, a, g, k):
    return math.acosh(x)


def atanh(x, a, g, k):
    return math.atanh(x)


def erf(x, a, g, k):
    return math.erf(x)


def reciprocal(x, a, g, k):
    return k[2] / x


def logical_not(x, a, g, k):
    return k[2] if x == k[0] else k[0]


# Rounding in the data's dtype: math.floor returns an int64 in numba (wrong for inf, NaN and
# beyond 2**63, and promoting float32 back to float64). Adding and subtracting ``big`` rounds
# to the nearest integer, ties to even, exactly; zeros keep the sign numpy gives them.
def rint(x, a, g, k):
    zero, big = k[0], k[11]
    if not abs(x) < big:  # inf, NaN and values that are integers already
        return x
    r = (x + big) - big if x >= zero else (x - big) + big
    return r if r != zero else x * zero


def floor(x, a, g, k):
    r = rint(x, a, g, k)
    r = r - k[2] if r > x else r
    return r if r != k[0] else x * k[0]


def ceil(x, a, g, k):
    r = rint(x, a, g, k)
    r = r + k[2] if r < x else r
    return r if r != k[0] else x * k[0]


def round_half_away(x, a, g, k):
    w = abs(x)
    r = floor(w, a, g, k)
    if w - r >= k[1]:  # exact: w - floor(w) has no rounding error
        r = r + k[2]
    return r if x >= k[0] else -r


# ---------------------------------------------------------------------- activations
def relu(x, a, g, k):
    # x + 0 is x for every x but -0, whose ReLU is +0 either way. The add keeps the result
    # from being a select of the value just loaded: LLVM stores that in place as a masked
    # store of the zeros only, which AMD's AVX2 cores run several times slower than a
    # plain one (in place, 2048 x 24 float32 on AMD EPYC: 42 -> 9 us)
    x = x + k[0]
    return x if x > k[0] or x != x else k[0]  # +0 for negatives and NaN for NaN


def relu6(x, a, g, k):
    return minimum(maximum(x, k[0], a, g, k), k[4], a, g, k)  # as Clip(x, 0, 6)


def leaky_relu(x, a, g, k):
    return x if x > k[0] else a * x


def sigmoid(x, a, g, k):
    one = k[2]
    # exp of a non-positive number only (nothing overflows); one exp and a select, not two
    # branches, so that CPU loops vectorise. One division: a vectorised select computes
    # both of its sides, and with e / (1 + e) on the other side it divided twice, the
    # slowest instruction here (SiLU over 65536 float32 on AVX-512, one thread: 40 -> 29 us;
    # e * (1 / (1 + e)) rounds twice, within an ulp of the quotient)
    e = math.exp(-abs(x))
    d = one / (one + e)
    return d if x >= k[0] else e * d


def silu(x, a, g, k):
    return x * sigmoid(x, a, g, k)


def hardsigmoid(x, a, g, k):
    return min(k[2], max(k[0], a * x + g))


def hardswish(x, a, g, k):
    return x * hardsigmoid(x, k[5], k[1], k)  # as ONNX: x * HardSigmoid(x, 1/6, 1/2)


def selu(x, a, g, k):
    return g * x if x > k[0] else g * a * (math.exp(x) - k[2])


def elu(x, a, g, k):
    return x if x >= k[0] else a * (math.exp(x) - k[2])


def softplus(x, a, g, k):
    return max(x, k[0]) + math.log1p(math.exp(-abs(x)))


def softsign(x, a, g, k):
    return x / (k[2] + abs(x))


def gelu(x, a, g, k):
    return k[1] * x * (k[2] + math.erf(x * k[6]))


def gelu_tanh(x, a, g, k):
    return k[1] * x * (k[2] + math.tanh(k[7] * (x + k[8] * x * x * x)))


# ---------------------------------------------------------------------- gradients
# ``d`` is the output's gradient, ``r`` the reference the op keeps: the forward output where
# it is enough (ReLU, Sigmoid, Tanh), the input otherwise.
def relu_grad(d, r, a, g, k):
    return d if r > k[0] else k[0]  # +0 where the unit is off, whatever d holds


def leaky_relu_grad(d, r, a, g, k):
    return d if r > k[0] else a * d


def sigmoid_grad(d, r, a, g, k):
    return d * r * (k[2] - r)


def tanh_grad(d, r, a, g, k):
    return d * (k[2] - r * r)


def selu_grad(d, r, a, g, k):
    return d * (g if r > k[0] else g * a * math.exp(r))


def elu_grad(d, r, a, g, k):
    return d * (k[2] if r >= k[0] else a * math.exp(r))


def hardsigmoid_grad(d, r, a, g, k):
    u = a * r + g
    return d * a if k[0] < u < k[2] else k[0] * d


def softplus_grad(d, r, a, g, k):
    one = k[2]
    e = math.exp(-abs(r))  # sigmoid(r) without overflow
    return d * (one / (one + e) if r >= k[0] else e / (one + e))


def softsign_grad(d, r, a, g, k):
    q = k[2] + abs(r)
    return d / (q * q)


def gelu_grad(d, r, a, g, k):
    half, one = k[1], k[2]
    cdf = half * (one + math.erf(r * k[6]))
    return d * (cdf + r * k[10] * math.exp(-half * r * r))


def gelu_tanh_grad(d, r, a, g, k):
    half, one, sqrt_2_pi = k[1], k[2], k[7]
    t = math.tanh(sqrt_2_pi * (r + k[8] * r * r * r))
    dt = (one - t * t) * sqrt_2_pi * (one + k[9] * r * r)
    return d * (half * (one + t) + half * r * dt)


# ---------------------------------------------------------------------- the table
#: every formula by name (the generated kernels name them so)
FORMULAS = {name: fn for name, fn in globals().items()
            if callable(fn) and not name.startswith("_") and fn.__module__ == __name__
            and name not in ("constants", "formula_of", "arity", "attributes", "program_of")}

#: Formulas that are exactly one function of numpy's SIMD library, as the numpy ufunc named
#: here. The CPU runs these ops with that ufunc: numba (without Intel's SVML) calls the
#: scalar libm function per element, 40-100x slower for float32 tanh or exp. The ufunc's
#: results may differ from libm's in the last bit, so chains do not fuse these ops: a fused
#: chain stays bit for bit equal to the unfused one. (CUDA generates them as any formula.)
LIBRARY = {"exp": "exp", "log": "log", "sin": "sin", "cos": "cos", "tan": "tan",
           "asin": "arcsin", "acos": "arccos", "atan": "arctan", "sinh": "sinh",
           "cosh": "cosh", "tanh": "tanh", "asinh": "arcsinh", "acosh": "arccosh",
           "atanh": "arctanh"}

#: Formulas the CPU computes for float32 data with vectorised twins of their own
#: (runtime/kernels/cpu/vecmath.py: erf and exp as branch-free polynomials, where numba
#: would call libm's scalar erff/expf per element, 20x slower). Their results differ from
#: the formula's in the last bits, so chains do not fuse these ops either.
CPU_FLOAT32 = ("gelu", "gelu_tanh", "gelu_grad", "gelu_tanh_grad")

#: formulas that call other formulas: their source needs those too
CALLS = {"int_fmod": ("trunc_div",), "float_mod": ("float_fmod",), "floor": ("rint",), "ceil": ("rint",), "round_half_away": ("floor", "rint"),
         "relu6": ("minimum", "maximum"), "silu": ("sigmoid",),
         "hardswish": ("hardsigmoid",)}


def arity(name: str) -> int:
    """How many tensor operands formula ``name`` takes."""
    return FORMULAS[name].__code__.co_argcount - 3


def formula_of(op) -> str | None:
    """The formula name of ``op`` with its attributes (Gelu's ``approximate`` picks one of
    two), or None when ``op`` is not an elementwise formula."""
    return getattr(op, "formula", None)


def attributes(op) -> tuple:
    """``(a, g)`` of ``op``: its alpha, and its gamma or beta (0 where it has none)."""
    return (float(getattr(op, "alpha", 0.0)),
            float(getattr(op, "gamma", getattr(op, "beta", 0.0))))


def program_of(op, n_inputs: int) -> tuple:
    """``(program, per-step (a, g))`` that op computes on ``n_inputs`` tensors (the program
    format of :mod:`singa_graph.runtime.kernels.generate`). A binary formula given more
    operands (Max, Min) folds them left to right, as numpy's reduction over them does."""
    prog = getattr(op, "program", None)
    if prog is not None:
        return prog, op.values
    name = formula_of(op)
    n = arity(name)
    steps = [(name, tuple(range(n)))]
    if n == 2:
        for i in range(2, n_inputs):
            steps.append((name, (-len(steps), i)))
    return tuple(steps), (attributes(op),) * len(steps)

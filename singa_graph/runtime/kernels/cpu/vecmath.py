"""float32 GELU and its gradient in loops LLVM vectorises.

The generated kernel of a formula calls libm's scalar ``erff``/``expf`` per element (numba
without Intel's SVML), which made float32 GELU 20x slower than PyTorch's. Here ``erf`` is
the rational minimax approximation that Eigen and XLA use for float32, in fused
multiply-adds (within 7 ulp of 1, 3.3e-7 absolute; PyTorch's vectorised erf is as close),
and ``exp`` the one the generated kernels use (:mod:`.vexp`, Cephes' ``expf``, within 1
ulp), both branch-free, so a loop of them compiles to AVX code. Compiled with
``error_model='numpy'``: numba's default checks every division for zero, and that
branch alone keeps a loop scalar.

The formulas in :mod:`singa_graph.ops.formulas` stay the definition (float64 data and CUDA
run them); ``formulas.CPU_FLOAT32`` names the ones computed here for float32 on the CPU,
which is why elementwise chains do not fuse them: a chain stays bit for bit equal to its
ops run one by one, in graph and eager mode alike.
"""
import math

import numpy as np
from numba import njit, types
from numba.extending import overload

from .loops import bound
from .vexp import _exp32 as expf
from .vexp import _fma as fma

F = np.float32
_ERF_P = tuple(F(v) for v in (-2.72614225801306e-10, 2.77068142495902e-08,
                              -2.10102402082508e-06, -5.69250639462346e-05,
                              -7.34990630326855e-04, -2.95459980854025e-03,
                              -1.60960333262415e-02))
_ERF_Q = tuple(F(v) for v in (-1.45660718464996e-05, -2.13374055278905e-04,
                              -1.68282697438203e-03, -7.37332916720468e-03,
                              -1.42647390514189e-02))
P0, P1, P2, P3, P4, P5, P6 = _ERF_P
Q0, Q1, Q2, Q3, Q4 = _ERF_Q
FOUR = F(4.0)  # erf is 1 in float32 beyond it
HALF, ONE, TWO = F(0.5), F(1.0), F(2.0)
INV_SQRT2, INV_SQRT_2PI = F(1 / math.sqrt(2.0)), F(1 / math.sqrt(2.0 * math.pi))
SQRT_2_PI, CUBIC, CUBIC3 = F(math.sqrt(2.0 / math.pi)), F(0.044715), F(3 * 0.044715)

_jit = njit(inline="always", error_model="numpy")


@_jit
def erff(x):
    x = min(max(x, -FOUR), FOUR)
    x2 = x * x
    # Horner steps as fused multiply-adds: 16,640 values on one thread 9.3 -> 6.2 us (AMD
    # EPYC, 2026-11-29), and the largest absolute error over [-5, 5] 4.19e-7 -> 3.31e-7
    p = fma(P0, x2, P1)
    p = fma(p, x2, P2)
    p = fma(p, x2, P3)
    p = fma(p, x2, P4)
    p = fma(p, x2, P5)
    p = fma(p, x2, P6)
    q = fma(Q0, x2, Q1)
    q = fma(q, x2, Q2)
    q = fma(q, x2, Q3)
    q = fma(q, x2, Q4)
    return x * p / q


def erf(x):
    """``erf`` for the generated CPU kernels (generate.py substitutes it for ``math.erf``):
    :func:`erff` in float32, ``math.erf`` in float64; callable from Numba code only."""
    return math.erf(x)


@overload(erf, jit_options={"cache": True, "error_model": "numpy"})
def _erf_impl(x):
    if x == types.float32:
        return lambda x: erff(x)
    return lambda x: math.erf(x)


@_jit
def tanhf(x):
    return ONE - TWO / (ONE + expf(TWO * x))


_loop = njit(cache=True, error_model="numpy")


@_loop
def gelu(x, y):
    for i in range(x.size):
        v = x[i]
        y[i] = HALF * v * (ONE + erff(v * INV_SQRT2))


@_loop
def gelu_tanh(x, y):
    for i in range(x.size):
        v = x[i]
        y[i] = HALF * v * (ONE + tanhf(SQRT_2_PI * (v + CUBIC * v * v * v)))


@_loop
def gelu_grad(d, x, y):
    for i in range(x.size):
        v = x[i]
        cdf = HALF * (ONE + erff(v * INV_SQRT2))
        y[i] = d[i] * (cdf + v * INV_SQRT_2PI * expf(-HALF * v * v))


@_loop
def gelu_tanh_grad(d, x, y):
    for i in range(x.size):
        v = x[i]
        t = tanhf(SQRT_2_PI * (v + CUBIC * v * v * v))
        dt = (ONE - t * t) * SQRT_2_PI * (ONE + CUBIC3 * v * v)
        y[i] = d[i] * (HALF * (ONE + t) + HALF * v * dt)


@_loop
def gelu_grad_inplace(x, y):
    for i in range(x.size):
        v = x[i]
        cdf = HALF * (ONE + erff(v * INV_SQRT2))
        y[i] = y[i] * (cdf + v * INV_SQRT_2PI * expf(-HALF * v * v))


@_loop
def gelu_tanh_grad_inplace(x, y):
    for i in range(x.size):
        v = x[i]
        t = tanhf(SQRT_2_PI * (v + CUBIC * v * v * v))
        dt = (ONE - t * t) * SQRT_2_PI * (ONE + CUBIC3 * v * v)
        y[i] = y[i] * (HALF * (ONE + t) + HALF * v * dt)


LOOPS = {"gelu": gelu, "gelu_tanh": gelu_tanh, "gelu_grad": gelu_grad,
         "gelu_tanh_grad": gelu_tanh_grad}
# the gradient written over dy (ActivationGrad works in place): the loop reads and writes one
# array, as LLVM's vectoriser wants; with y and dy two aliasing arguments its runtime overlap
# check sends every element down the scalar loop (20x slower)
INPLACE = {"gelu_grad": gelu_grad_inplace, "gelu_tanh_grad": gelu_tanh_grad_inplace}


def float32_step(name, ins, out):
    """The step computing formula ``name`` with the loops above, or None where they do not
    apply (not float32, or operands that are not contiguous arrays of the output's shape)."""
    if name not in LOOPS or out.dtype != np.float32 or not out.flags.c_contiguous:
        return None
    if any(a.dtype != np.float32 or a.shape != out.shape or not a.flags.c_contiguous
           for a in ins):
        return None
    flat = [a.reshape(-1) for a in ins]
    y = out.reshape(-1)
    same = [a.ctypes.data == y.ctypes.data for a in flat]
    if name in INPLACE and same == [True, False]:
        fn, x = INPLACE[name], flat[1]
        return bound(fn, x, y)
    if any(np.shares_memory(a, y) for a in flat):
        return None
    fn = LOOPS[name]
    return bound(fn, *flat, y)

"""``exp`` for the generated CPU kernels, written so that LLVM vectorises the loops that call it.

Numba calls libm's ``expf`` one element at a time (it has no vector math library unless
Intel's SVML is installed), which made a convolution's fused SiLU epilogue cost 3.3 ns per
element, 30 times its ReLU: most of efficientnet_b0's inference time. In float32, ``exp``
here is plain arithmetic: Cody-Waite reduction ``x = n*ln2 + r`` and Cephes' degree-6
polynomial for ``exp(r)``, both in fused multiply-adds (within 1 ulp of the exact value
over the float range), and the scaling by ``2^n`` built from the exponent bits, in two
halves so that results that overflow to inf or fall into the subnormal range are rounded
once, as they should. NaN stays
NaN, ``exp(inf) = inf``, ``exp(-inf) = 0``. In float64 it is ``math.exp``.

generate.py substitutes it for ``math.exp`` in every generated CPU kernel (elementwise ops,
fused chains and the convolution epilogue alike), so they all still agree bit for bit.
"""
import math

import numpy as np
from llvmlite import ir
from numba import int32, types
from numba.extending import intrinsic, overload, register_jitable

from .... import host

_F = np.float32
_LOG2E = _F(1.44269504088896341)
_C1, _C2 = _F(0.693359375), _F(-2.12194440e-4)  # ln 2 = C1 - C2, C1 exact in 9 bits
_P = tuple(_F(v) for v in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                           4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_HI, _LO = _F(89.0), _F(-104.0)  # beyond: inf, 0
_HALF, _ONE = _F(0.5), _F(1.0)


@intrinsic
def _fma(typingctx, a, b, c):
    """``a*b + c`` in float32, rounded once (LLVM's ``llvm.fma``, which vectorises to the
    FMA instructions); on a target without them (host.fused_multiply_add), where it would
    be a libm call per element, a product and a sum."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, sig, args):
        if host.fused_multiply_add():
            return builder.fma(*args)
        return builder.fadd(builder.fmul(args[0], args[1]), args[2])

    return sig, codegen


@intrinsic
def _pow2(typingctx, n):
    """``2.0**n`` in float32 for an integer ``-126 <= n <= 127``, from its exponent bits."""
    sig = types.float32(n)

    def codegen(context, builder, sig, args):
        v = context.cast(builder, args[0], sig.args[0], types.int64)
        i32 = ir.IntType(32)
        bits = builder.shl(builder.add(builder.trunc(v, i32), ir.Constant(i32, 127)),
                           ir.Constant(i32, 23))
        return builder.bitcast(bits, ir.FloatType())

    return sig, codegen


# The reduction and the polynomial's Horner steps are fused multiply-adds, each rounded once:
# 33,800 exponentials on one thread 32.7 -> 24.1 us (AMD EPYC, AVX2, 2026-11-29), and the
# worst error over 100 M random arguments fell from 0.990 to 0.977 ulp.
# ``n`` is taken as int32: ``math.floor`` gives an int64, whose vector lanes are half as
# many (and its conversions slower) than float32's: the same bits, 44.8 -> 30.9 us for
# 33,800 exponentials on one thread (Intel Xeon, 2026-11-27).
@register_jitable
def _exp32(x):
    xc = min(max(x, _LO), _HI)
    fn = np.floor(_fma(xc, _LOG2E, _HALF))
    n = int32(fn)
    r = _fma(fn, -_C2, _fma(fn, -_C1, xc))
    z = r * r
    p = _P[0]
    p = _fma(p, r, _P[1])
    p = _fma(p, r, _P[2])
    p = _fma(p, r, _P[3])
    p = _fma(p, r, _P[4])
    p = _fma(p, r, _P[5])
    y = p * z + r + _ONE  # an FMA here took the worst error over 1 ulp (1.0095)
    h = n >> 1
    y = y * _pow2(h) * _pow2(n - h)
    return y if x == x else x


def exp(x):
    """``e**x`` (see the module's docstring); callable from Numba code only."""
    return math.exp(x)


@overload(exp, jit_options={"cache": True})
def _exp_impl(x):
    if x == types.float32:
        return lambda x: _exp32(x)
    return lambda x: math.exp(x)

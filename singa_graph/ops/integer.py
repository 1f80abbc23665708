"""Integer elementwise ops: truncating division, Mod, BitShift and the bitwise ops (ONNX),
and BitCast (the same bytes read as another dtype of the same width).

Their scalar formulas live in :mod:`.formulas` (``trunc_div``, ``floor_mod``, ``int_fmod``,
``float_fmod``, ``shift_left``/``shift_right``, ``bitwise_*``), so the CPU loops and CUDA
kernels are generated from them as for every elementwise op. None of them is
differentiable: their inputs are integers (Mod of floats is piecewise linear, but models use
it on indices and phases, and it has no gradient here).
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec
from ._util import broadcast_shape, same_dtype

__all__ = ["TruncDiv", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
           "BitwiseNot", "trunc_div", "mod", "bit_shift", "bitwise_and", "bitwise_or",
           "bitwise_xor", "bitwise_not", "BitCast", "bit_cast"]


def _need_int(op, *xs):
    for x in xs:
        if x.dtype.kind not in "iu":
            raise DTypeError(f"{op} needs integer tensors; {x.name} has dtype {x.dtype}")


class _IntBinary(Operation):
    differentiable = False
    inplace = {0: 0}

    def infer(self, a, b):
        _need_int(self.type, a, b)
        return [TensorSpec(broadcast_shape(a.shape, b.shape), same_dtype(a, b))]


class TruncDiv(_IntBinary):
    """Integer division rounding toward zero (ONNX ``Div`` of integers, C's ``/``)."""

    formula = "trunc_div"


class Mod(Operation):
    """Remainder: with ``fmod=False`` the sign follows the divisor (Python's ``%``, numpy's
    ``mod``), with ``fmod=True`` the dividend (C's ``fmod``). Exact for floats too."""

    differentiable = False
    inplace = {0: 0}
    formula = "floor_mod"

    def __init__(self, fmod: bool = False):
        self.fmod = bool(fmod)

    def infer(self, a, b):
        dt = same_dtype(a, b)
        if dt.kind == "b":
            raise DTypeError(f"Mod takes integers or floats, got {dt}")
        if dt.kind == "f":
            self.formula = "float_fmod" if self.fmod else "float_mod"
        else:
            self.formula = "int_fmod" if self.fmod else "floor_mod"
        return [TensorSpec(broadcast_shape(a.shape, b.shape), dt)]

    def attributes(self):
        return {"fmod": self.fmod}


class BitShift(_IntBinary):
    """``x << y`` or ``x >> y`` (``direction`` "left"/"right"); shift counts outside
    ``[0, bits)`` give 0 (or -1 for a negative ``x`` shifted right)."""

    formula = "shift_left"

    def __init__(self, direction: str = "left"):
        self.direction = str(direction).lower()
        if self.direction not in ("left", "right"):
            raise ValueError(f"BitShift direction must be 'left' or 'right', got {direction!r}")
        self.formula = "shift_left" if self.direction == "left" else "shift_right"
        self.alpha = 0.0

    def infer(self, a, b):
        out = super().infer(a, b)
        self.alpha = float(np.iinfo(a.dtype).bits)  # the formulas' ``a``
        return out

    def attributes(self):
        return {"direction": self.direction}


class BitwiseAnd(_IntBinary):
    formula = "bitwise_and"


class BitwiseOr(_IntBinary):
    formula = "bitwise_or"


class BitwiseXor(_IntBinary):
    formula = "bitwise_xor"


class BitwiseNot(Operation):
    differentiable = False
    inplace = {0: 0}
    formula = "bitwise_not"

    def infer(self, x):
        _need_int(self.type, x)
        return [TensorSpec(x.shape, x.dtype)]


def trunc_div(a, b):
    """``a / b`` of integers, rounded toward zero."""
    return TruncDiv()(a, b)


def mod(a, b, fmod=False):
    """The remainder of ``a / b`` (see :class:`Mod`)."""
    return Mod(fmod)(a, b)


def bit_shift(x, y, direction="left"):
    return BitShift(direction)(x, y)


def bitwise_and(a, b):
    return BitwiseAnd()(a, b)


def bitwise_or(a, b):
    return BitwiseOr()(a, b)


def bitwise_xor(a, b):
    return BitwiseXor()(a, b)


def bitwise_not(x):
    return BitwiseNot()(x)


class BitCast(Operation):
    """The bytes of ``x`` read as ``dtype`` (of the same width): ONNX BitCast."""

    differentiable = False

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)

    def infer(self, x):
        if x.dtype.itemsize != self.dtype.itemsize:
            raise DTypeError(f"BitCast from {x.dtype} to {self.dtype}: the widths differ")
        return [TensorSpec(x.shape, self.dtype)]


def bit_cast(x, dtype):
    return BitCast(dtype)(x)

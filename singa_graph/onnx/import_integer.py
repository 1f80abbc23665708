"""ONNX -> singa_graph: integer arithmetic (Div of integers, Mod, BitShift, Bitwise*) and
BitCast.

Integer ``Div`` truncates toward zero as ONNX (and C) define it; float ``Div`` stays the
library's Div, whose import lives in :mod:`.import_math`.
"""
from __future__ import annotations

from onnx import helper

from .. import ops
from .registry import importer


@importer("Div")
def div(n):
    a, b = n.t(0), n.t(1)
    return ops.trunc_div(a, b) if a.dtype.kind in "iu" else ops.div(a, b)


@importer("Mod")
def mod(n):
    return ops.mod(n.t(0), n.t(1), bool(n.attr("fmod", 0)))


@importer("BitShift")
def bit_shift(n):
    return ops.bit_shift(n.t(0), n.t(1), n.attr("direction", "LEFT").lower())


for _t, _f in {"BitwiseAnd": ops.bitwise_and, "BitwiseOr": ops.bitwise_or,
               "BitwiseXor": ops.bitwise_xor}.items():
    importer(_t)(lambda n, _f=_f: _f(n.t(0), n.t(1)))


@importer("BitwiseNot")
def bitwise_not(n):
    return ops.bitwise_not(n.t(0))


@importer("BitCast")
def bit_cast(n):
    return ops.bit_cast(n.t(0), helper.tensor_dtype_to_np_dtype(n.attr("to")))

"""Elementwise kernels: every op with a scalar formula (``op.formula``, see
:mod:`singa_graph.ops.formulas`) runs a Numba loop generated from that formula
(:mod:`..generate`), fused chains included; plus the copies and sums of broadcasting.

A generated loop walks numpy broadcasting itself (operands of any strides, dimensions that
all operands walk contiguously merged first) and computes float32 data in float32. Formulas
that are one function of numpy's SIMD library run as that ufunc (``formulas.LIBRARY``).
"""
import numpy as np

from ....errors import UnsupportedOpError
from ....ir.op import OPS
from ....ops import formulas
from ...registry import kernel
from ..generate import cpu_step


def formula_kernel(op, ins, outs):
    """The step of an op with a formula, or of a fused chain of them."""
    (y,) = outs
    if any(a.dtype == np.float16 for a in (*ins, y)):
        raise UnsupportedOpError(f"no cpu kernel for {getattr(op, 'label', op.type)} in "
                                 "float16 (Numba computes in float32 and float64 only)")
    name = formulas.formula_of(op)
    if len(ins) == 1 and name and formulas.arity(name) == 2:
        (x,) = ins  # Max or Min of one tensor
        return lambda: np.copyto(y, x)
    if name in formulas.LIBRARY:  # numpy's vectorised function (see formulas.LIBRARY)
        ufunc = getattr(np, formulas.LIBRARY[name])
        (x,) = ins
        return lambda: ufunc(x, out=y)
    program, values = formulas.program_of(op, len(ins))
    return cpu_step(program, values, ins, y)


for _type, _cls in list(OPS.items()):
    if hasattr(_cls, "formula") or _type == "FusedElementwise":
        kernel(_type)(formula_kernel)


@kernel("SumTo")
def sum_to(op, ins, outs):
    (x,), (y,) = ins, outs
    lead = x.ndim - y.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(y.shape)
                                      if s == 1 and x.shape[lead + i] != 1)
    kept = y.reshape(tuple(1 if i in axes else s for i, s in enumerate(x.shape)))
    if not axes:
        return lambda: np.copyto(y, x.reshape(y.shape))
    return lambda: np.sum(x, axis=axes, keepdims=True, out=kept)


@kernel("BroadcastTo")
def broadcast_to(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.copyto(y, x)


@kernel("Cast")
def cast(op, ins, outs):
    (x,), (y,) = ins, outs
    return lambda: np.copyto(y, x, casting="unsafe")

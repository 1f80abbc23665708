"""Elementwise kernels: every op with a scalar formula (``op.formula``, see
:mod:`singa_graph.ops.formulas`) runs a Numba loop generated from that formula
(:mod:`..generate`), fused chains included; plus the copies and sums of broadcasting.

A generated loop walks numpy broadcasting itself (operands of any strides, dimensions that
all operands walk contiguously merged first) and computes float32 data in float32. Formulas
that are one function of numpy's SIMD library run as that ufunc (``formulas.LIBRARY``),
float32 GELU and its gradient as vectorised loops of their own (``formulas.CPU_FLOAT32``).
"""
import numpy as np

from ....ir import dtypes
from ....ir.op import OPS
from ....ops import formulas
from ...registry import carve, carved_bytes, kernel
from ..generate import cpu_step
from . import narrow_cast, vecmath


def _staged(a) -> bool:
    return a.dtype == np.float16 or a.dtype in dtypes.NARROW_FLOATS


def _half_specs(ins, outs) -> list:
    """float32 staging of the float16, bfloat16, float8 and float4 operands (Numba computes
    in float32 and float64 only; their values are exact in float32, and the result is rounded
    once, to the output's dtype)."""
    return [(tuple(a.shape), np.float32) for a in (*ins, *outs) if _staged(a)]


def _half_workspace(op, ins, outs) -> int:
    return carved_bytes(*_half_specs(ins, outs))


def formula_kernel(op, ins, outs, ws=None):
    """The step of an op with a formula, or of a fused chain of them."""
    (y,) = outs
    name = formulas.formula_of(op)
    if len(ins) == 1 and name and formulas.arity(name) == 2:
        (x,) = ins  # Max or Min of one tensor
        return lambda: np.copyto(y, x)
    narrow = any(a.dtype in dtypes.NARROW_FLOATS for a in (*ins, *outs))
    # numpy's vectorised function (see formulas.LIBRARY); it has no narrow-float loops
    if name in formulas.LIBRARY and not narrow:
        ufunc = getattr(np, formulas.LIBRARY[name])
        (x,) = ins
        return lambda: ufunc(x, out=y)
    if name in formulas.CPU_FLOAT32:  # float32 GELU vectorised (see formulas.CPU_FLOAT32)
        step = vecmath.float32_step(name, ins, y)
        if step is not None:
            return step
    program, values = formulas.program_of(op, len(ins))
    specs = _half_specs(ins, outs)
    if not specs:
        return cpu_step(program, values, ins, y)
    staged = iter(carve(ws, *specs))
    ins32 = [next(staged) if _staged(a) else a for a in ins]
    y32 = next(staged) if _staged(y) else y
    run = cpu_step(program, values, ins32, y32)
    pairs = [(s, a) for s, a in zip(ins32, ins) if s is not a]

    def step():
        for s, a in pairs:
            np.copyto(s, a)
        run()
        if y32 is not y:
            np.copyto(y, y32)
    return step


for _type, _cls in list(OPS.items()):
    if hasattr(_cls, "formula") or _type == "FusedElementwise":
        kernel(_type, workspace=_half_workspace)(formula_kernel)


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


@kernel("Cast", workspace=narrow_cast.workspace)
def cast(op, ins, outs, ws=None):
    (x,), (y,) = ins, outs
    return narrow_cast.cast_step(op, x, y, ws)

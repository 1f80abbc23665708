"""Elementwise CUDA kernels: every op with a scalar formula (``op.formula``, see
:mod:`singa_graph.ops.formulas`) and every fused chain of them runs one grid-stride kernel
generated from the formulas (:mod:`..generate`), with numpy broadcasting: a flat path when
each operand has the output's shape or one element, a strided path through padded
shape/stride tuples otherwise. The formulas' constants and the ops' attributes are launch
arguments in the data's dtype, so float32 data computes in float32. Casts and broadcasts
are copies.
"""
from __future__ import annotations

from ....ir.op import OPS
from ....ops import formulas
from ...registry import kernel
from ..generate import cuda_step, single
from .launch import MAXD, broadcast_strides, copy_step, strided_copy_step


def add_step(a, b, y):
    """A step computing ``y = a + b`` with numpy broadcasting."""
    return cuda_step(single("add"), ((0.0, 0.0),), [a, b], y)


def formula_kernel(op, ins, outs):
    """The step of an op with a formula, or of a fused chain of them."""
    (y,) = outs
    name = formulas.formula_of(op)
    if len(ins) == 1 and name and formulas.arity(name) == 2:
        return _broadcast_step(ins[0], y)  # Max or Min of one tensor
    program, values = formulas.program_of(op, len(ins))
    return cuda_step(program, values, ins, y)


for _type, _cls in list(OPS.items()):
    if hasattr(_cls, "formula") or _type == "FusedElementwise":
        kernel(_type, "cuda")(formula_kernel)


# ---------------------------------------------------------------------- copies
@kernel("Cast", "cuda")
def cast(op, ins, outs):
    return copy_step(ins[0], outs[0])


@kernel("BroadcastTo", "cuda")
def broadcast_to(op, ins, outs):
    return _broadcast_step(ins[0], outs[0])


def _broadcast_step(x, y):
    """``y[...] = x`` broadcast to ``y``'s shape."""
    if x.shape == y.shape:
        return copy_step(x, y)
    return strided_copy_step(x, y, y.shape, broadcast_strides(x.shape, y.shape))


__all__ = ["add_step", "formula_kernel", "MAXD"]

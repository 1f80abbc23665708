"""One op for a fused chain of elementwise ops (made by :mod:`..passes.fuse`)."""
from __future__ import annotations

from ..ir.op import Operation
from ..ir.tensor import TensorSpec


class FusedElementwise(Operation):
    """A chain of elementwise formulas computed by one kernel, per element, in one pass.

    Args:
        program: the steps ``(formula name, operand refs)``; a ref ``i >= 0`` is input ``i``,
            ``-j - 1`` the result of step ``j``; the last step's result is the output.
        values: per step, the ``(a, g)`` attributes of the op it came from.
        label: the fused ops' types joined by ``+`` ("Sigmoid+Mul"), for profiles and
            pictures.
        spec: the output's shape and dtype (those of the chain's last op).
        inplace: ``{0: i}`` when input ``i`` may be overwritten by the output (each element
            is read before it is written).
    """

    differentiable = False

    def __init__(self, program, values, label, spec, inplace=None):
        self.program, self.values = tuple(program), tuple(values)
        self.fused_label, self.spec = label, spec
        self.inplace = dict(inplace or {})

    @property
    def label(self) -> str:
        return self.fused_label

    def infer(self, *inputs):
        return [TensorSpec(self.spec.shape, self.spec.dtype)]

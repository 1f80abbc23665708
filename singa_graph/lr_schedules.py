"""Learning-rate schedules of SINGA's ``opt`` module (``opt.Constant``,
``opt.ExponentialDecay``, ``opt.StepDecay``): ``sched(step) -> value``."""
from __future__ import annotations

import math

import numpy as np

from .ir.tensor import Tensor

class DecayScheduler:
    """A learning-rate schedule: ``sched(step) -> value``. As in SINGA, a Tensor step (the
    optimizer's ``step_counter``) gives a (1,) float32 Tensor; a number gives a float."""

    def __init__(self, init_value: float):
        self.init_value = float(init_value)

    def __call__(self, step):
        if isinstance(step, Tensor):
            v = self.value(int(step.data.reshape(-1)[0]))
            return Tensor(data=np.array([v], np.float32), requires_grad=False)
        return self.value(step)

    def value(self, step: int) -> float:
        """The value at ``step`` (subclasses define it)."""
        raise NotImplementedError


class Constant(DecayScheduler):
    """The same value at every step."""

    def value(self, step):
        return self.init_value


class ExponentialDecay(DecayScheduler):
    """``init * rate ** (step / decay_steps)`` (floored exponent when ``staircase``)."""

    def __init__(self, init_value, decay_steps, decay_rate, staircase=False):
        super().__init__(init_value)
        self.decay_steps, self.decay_rate, self.staircase = decay_steps, decay_rate, staircase

    def value(self, step):
        e = step / self.decay_steps
        return self.init_value * self.decay_rate ** (math.floor(e) if self.staircase else e)


class StepDecay(DecayScheduler):
    """``init * gamma ** (step // step_size)``."""

    def __init__(self, init_value, step_size, gamma=0.1):
        super().__init__(init_value)
        self.step_size, self.gamma = step_size, gamma

    def value(self, step):
        return self.init_value * self.gamma ** (step // self.step_size)

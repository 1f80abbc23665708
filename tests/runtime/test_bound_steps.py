"""Kernel steps bound to fixed arguments (runtime/kernels/cpu/loops.bound): after the
dispatcher's first calls they call the compiled entry point directly, with the same
results; anything that is not a Numba dispatcher is called as it is."""
import numpy as np
from numba import njit

from singa_graph.runtime.kernels.cpu.loops import _entry_point, bound


@njit(cache=False)
def _axpy(y, x, a, shape):
    for i in range(y.size):
        y[i] += a * x[i] + shape[0]


def _entry_of(step):
    cells = dict(zip(step.__code__.co_freevars, step.__closure__))
    return cells["entry"].cell_contents


def test_a_bound_step_switches_to_the_entry_point_and_keeps_its_results():
    y, x = np.zeros(5, np.float32), np.arange(5, dtype=np.float32)
    step = bound(_axpy, y, x, np.float32(2), (1, 3))
    step()
    assert _entry_of(step) is None  # a step run once does no lookup
    step()
    assert _entry_of(step) is not None and _entry_of(step) is not _axpy
    step()
    np.testing.assert_array_equal(y, 3 * (2 * x + 1))


def test_arguments_without_a_compiled_version_keep_the_dispatcher():
    y, x = np.zeros(3), np.ones(3)
    _axpy(y, x, 1.0, (0,))
    # a typing the dispatcher never compiled has no entry point
    assert _entry_point(_axpy, (y, x, 1.0, (0, 0))) is None


def test_plain_callables_are_called_as_they_are():
    calls = []
    step = bound(lambda a, b: calls.append(a + b), 1, 2)
    step()
    step()
    step()
    assert calls == [3, 3, 3]

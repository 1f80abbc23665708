"""Concat's kernel on CPU (runtime/kernels/cpu/shape.py): the parallel byte-range copy
(``join``) against numpy's concatenate, on any axis, dtype, batch and thread count, the
split between threads falling inside runs, and the fallbacks."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from singa_graph import ops
from singa_graph.runtime import threads
from singa_graph.runtime.kernels.cpu import shape
from singa_graph.runtime.registry import bind

CASES = [  # input shapes, axis
    ([(2, 64, 15, 15), (2, 64, 15, 15)], 1),           # squeezenet's fire module
    ([(2, 64, 8, 8), (2, 32, 8, 8), (2, 32, 8, 8)], 1),  # densenet's growing input
    ([(1, 48, 9, 9), (1, 17, 9, 9)], 1),              # batch 1: the split inside a run
    ([(3, 100, 70), (3, 1, 70), (3, 37, 70)], 1),     # odd run lengths
    ([(300, 40), (77, 40)], 0),
    ([(6, 50, 33), (6, 50, 21)], 2),
]


def _join(xs, axis, count):
    y = np.full(np.concatenate(xs, axis=axis).shape, -7, xs[0].dtype)
    threads.apply()
    before = numba.get_num_threads()
    numba.set_num_threads(count)
    try:
        step = bind(ops.Concat(axis), xs, [y])
    finally:
        numba.set_num_threads(before)
    step()
    step()
    return y, step


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("case", CASES)
def test_join_equals_numpy_on_one_thread_and_two(case, dtype):
    shapes, axis = case
    rng = np.random.default_rng(len(shapes) + axis)
    xs = [(rng.standard_normal(s) * 100).astype(dtype) for s in shapes]
    for count in (1, 2):
        got, _ = _join(xs, axis, count)
        np.testing.assert_array_equal(got, np.concatenate(xs, axis=axis))


def test_large_outputs_take_the_parallel_copy_and_small_ones_numpy():
    big = [np.ones((2, 64, 15, 15), np.float32)] * 2
    assert _join(big, 1, 2)[1].inputs is big        # the join step keeps its inputs
    assert not hasattr(_join(big, 1, 1)[1], "inputs")  # one thread: numpy
    small = [np.ones((2, 3), np.float32)] * 2
    assert not hasattr(_join(small, 1, 2)[1], "inputs")
    assert shape.JOIN_MIN_BYTES <= big[0].nbytes


def test_non_contiguous_inputs_fall_back_to_numpy():
    x = np.arange(2 * 64 * 30 * 15, dtype=np.float32).reshape(2, 64, 30, 15)[:, :, ::2]
    got, step = _join([x, x], 1, 2)
    assert not hasattr(step, "inputs")
    np.testing.assert_array_equal(got, np.concatenate([x, x], axis=1))

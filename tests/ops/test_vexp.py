"""The vectorisable exp of the generated CPU kernels (runtime/kernels/cpu/vexp.py): within
1 ulp of float64's exp over the whole float32 range, IEEE special values, rounded once in
the subnormal range, and math.exp itself in float64."""
import math

import numpy as np
from numba import njit

from singa_graph.runtime.kernels.cpu.vexp import exp


@njit(cache=True)
def _apply(x, y):
    for i in range(x.shape[0]):
        y[i] = exp(x[i])


def _run(x):
    y = np.empty_like(x)
    _apply(x, y)
    return y


def test_float32_within_one_ulp_over_the_range():
    x = np.linspace(-87.3, 88.7, 400_001, dtype=np.float32)
    ref = np.exp(x.astype(np.float64))
    ulp = np.spacing(ref.astype(np.float32)).astype(np.float64)
    assert (np.abs(_run(x) - ref) / ulp).max() < 1.0


def test_float32_special_values_and_subnormals():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.73, 1000, -1000, -104.0],
                 np.float32)
    y = _run(x)
    assert np.isnan(y[0])
    np.testing.assert_array_equal(y[1:], [np.inf, 0, 1, 1, np.inf, np.inf, 0, 0])
    sub = np.linspace(-103.9, -87.4, 5001, dtype=np.float32)  # results below 2**-126
    ref = np.exp(sub.astype(np.float64))
    assert np.abs(_run(sub) - ref).max() <= 2.0 ** -149  # one rounding: within 1 ulp


def test_float64_is_math_exp():
    x = np.linspace(-745, 709, 10_001)
    np.testing.assert_array_equal(_run(x), [math.exp(v) for v in x])

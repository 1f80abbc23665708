"""The vectorised float32 erf/exp behind the CPU's float32 GELU, against float64 math."""
from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

from singa_graph import ops
from singa_graph.ir.tensor import Tensor
from singa_graph.runtime.kernels.cpu import vecmath


@njit(cache=False)
def _apply(fn_id, x, y):
    for i in range(x.size):
        y[i] = vecmath.erff(x[i]) if fn_id == 0 else vecmath.expf(x[i])


def test_erf_and_exp_are_float32_accurate():
    x = np.linspace(-9, 9, 200_001).astype(np.float32)
    y = np.empty_like(x)
    _apply(0, x, y)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    assert np.abs(y - ref).max() < 5e-7
    assert y[0] == -1 and y[-1] == 1  # saturated
    x = np.linspace(-87, 88, 200_001).astype(np.float32)
    _apply(1, x, y)
    assert np.max(np.abs(y / np.exp(x.astype(np.float64)) - 1)) < 2.5e-7  # 2 ulp
    _apply(1, np.array([-1e4, -100, 1e4], np.float32), y[:3])
    # IEEE results at the ends: 0, the subnormal exp(-100) rounded once, inf (the shared
    # exp of the generated kernels, cpu/vexp.py; tanh and GELU stay finite through them)
    assert y[0] == 0 and y[1] == np.float32(math.exp(-100)) and y[2] == np.inf


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_float32_gelu_and_gradient_match_float64(approximate):
    x64 = np.random.default_rng(0).standard_normal(5000) * 4
    d64 = np.random.default_rng(1).standard_normal(5000)
    x, d = (Tensor(data=a.astype(np.float32), requires_grad=False) for a in (x64, d64))
    y = ops.gelu(x, approximate).to_numpy()
    op = ops.Gelu(approximate)
    dx = ops.ActivationGrad(op)(d, x)[0].to_numpy()
    x64t, d64t = (Tensor(data=a, requires_grad=False) for a in (x64, d64))
    want = ops.gelu(x64t, approximate).to_numpy()  # float64: the formula, libm's erf
    dwant = ops.ActivationGrad(op)(d64t, x64t)[0].to_numpy()
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(dx, dwant, rtol=2e-6, atol=2e-6)


def test_gradient_written_over_dy_equals_the_separate_one():
    from singa_graph.runtime.kernels.cpu.elementwise import formula_kernel

    x = np.random.default_rng(2).standard_normal((64, 33)).astype(np.float32)
    d = np.random.default_rng(3).standard_normal((64, 33)).astype(np.float32)
    op = ops.ActivationGrad(ops.Gelu())
    y = np.empty_like(x)
    formula_kernel(op, [d, x], [y])()
    inplace = d.copy()
    formula_kernel(op, [inplace, x], [inplace])()
    assert np.array_equal(inplace, y)

"""Elementwise math, the extra activations, comparisons/logic, Where and Max/Min: forward vs
an independent reference, float64 finite-difference gradients, bad-input errors and graph
mode == eager mode."""
import math

import numpy as np
import pytest
from scipy import special

import singa_graph as sg
from singa_graph import ops
from singa_graph.passes.autodiff import backward
from helpers import check_grad, eager, graph_matches_eager

rng = np.random.default_rng(5)


def _round_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


# (function, reference, low, high, differentiable); domains keep away from kinks/poles
UNARY = [
    (ops.sin, np.sin, -3, 3, True), (ops.cos, np.cos, -3, 3, True),
    (ops.tan, np.tan, -1.2, 1.2, True), (ops.asin, np.arcsin, -0.9, 0.9, True),
    (ops.acos, np.arccos, -0.9, 0.9, True), (ops.atan, np.arctan, -3, 3, True),
    (ops.sinh, np.sinh, -2, 2, True), (ops.cosh, np.cosh, -2, 2, True),
    (ops.asinh, np.arcsinh, -3, 3, True), (ops.acosh, np.arccosh, 1.1, 3, True),
    (ops.atanh, np.arctanh, -0.9, 0.9, True), (ops.erf, special.erf, -2, 2, True),
    (ops.reciprocal, lambda x: 1 / x, 0.5, 2, True),
    (ops.ceil, np.ceil, -3, 3, False), (ops.floor, np.floor, -3, 3, False),
    (ops.round, _round_away, -3, 3, False), (ops.rounde, np.round, -3, 3, False),
    (ops.sign, np.sign, -3, 3, False),
    (ops.selu, lambda x: np.where(x > 0, 1.0507 * x, 1.0507 * 1.67326 * np.expm1(x)), -2, 2,
     True),
    (ops.elu, lambda x: np.where(x >= 0, x, np.expm1(x)), -2, 2, True),
    (ops.hardsigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1), -4, 4, True),
    (ops.softplus, lambda x: np.log1p(np.exp(x)), -3, 3, True),
    (ops.softsign, lambda x: x / (1 + np.abs(x)), -3, 3, True),
    (ops.gelu, lambda x: x * 0.5 * (1 + special.erf(x / math.sqrt(2))), -3, 3, True),
    (lambda x: ops.gelu(x, "tanh"), _gelu_tanh, -3, 3, True),
]


def _away_from_kinks(x):
    # finite differences straddling a kink (0 for selu/elu, +-2.5 for hardsigmoid) mislead
    x = np.where(np.abs(x) < 0.05, 0.3, x)
    return np.where(np.abs(np.abs(x) - 2.5) < 0.05, 1.7, x)


@pytest.mark.parametrize("fn,ref,lo,hi,diff", UNARY)
def test_unary(fn, ref, lo, hi, diff):
    x = _away_from_kinks(rng.uniform(lo, hi, (3, 4)))
    np.testing.assert_allclose(eager(fn, x), ref(x), rtol=1e-12, atol=1e-15)
    x32 = x.astype(np.float32)
    np.testing.assert_allclose(eager(fn, x32), ref(x32.astype(np.float64)), rtol=2e-6,
                               atol=1e-6)
    if diff:
        check_grad(fn, x)
    else:  # SINGA passes back zeros
        x_ = sg.Parameter(data=x)
        ((_, g),) = list(backward(ops.sum(fn(x_))))
        assert not g.data.any()
    graph_matches_eager(fn, x)
    if fn is ops.sign:  # defined on integers too
        assert fn(sg.Placeholder((2,), dtype="int32")).dtype == np.int32
        return
    with pytest.raises(sg.DTypeError):
        fn(sg.Placeholder((2,), dtype="int32"))


def test_rounding_halves():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999999999999994])
    np.testing.assert_array_equal(eager(ops.round, x), [-3, -2, -1, 1, 2, 3, 0])
    np.testing.assert_array_equal(eager(ops.rounde, x), [-2, -2, -0, 0, 2, 2, 0])


def test_prelu():
    x = _away_from_kinks(rng.standard_normal((2, 3, 4)))
    for slope in (rng.uniform(0.1, 0.5, (3, 1)), rng.uniform(0.1, 0.5, (2, 3, 4))):
        np.testing.assert_allclose(eager(ops.prelu, x, slope), np.where(x >= 0, x, slope * x))
        check_grad(ops.prelu, x, slope)
        graph_matches_eager(ops.prelu, x, slope)
    with pytest.raises(sg.ShapeError, match="PRelu .*do not broadcast"):
        ops.prelu(sg.Placeholder((2, 3)), sg.Placeholder((4,)))


LOGIC = [(ops.greater, np.greater), (ops.less, np.less), (ops.equal, np.equal),
         (ops.logical_and, np.logical_and), (ops.logical_or, np.logical_or),
         (ops.logical_xor, np.logical_xor)]


@pytest.mark.parametrize("fn,ref", LOGIC)
def test_compare_and_logic(fn, ref):
    a = rng.integers(-1, 2, (3, 4)).astype(np.float32)
    b = rng.integers(-1, 2, (4,)).astype(np.float32)
    y = eager(fn, a, b)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, ref(a, b).astype(np.float32))
    graph_matches_eager(fn, a, b, grad=False)
    with pytest.raises(sg.ShapeError, match=r"\(3, 4\) and \(3,\)"):
        fn(sg.Placeholder((3, 4)), sg.Placeholder((3,)))
    with pytest.raises(sg.DTypeError):
        fn(sg.Placeholder((3,)), sg.Placeholder((3,), dtype="float64"))


def test_not_and_where():
    a = rng.integers(-1, 2, (3, 4)).astype(np.float64)
    np.testing.assert_array_equal(eager(ops.logical_not, a), (a == 0).astype(float))
    graph_matches_eager(ops.logical_not, a, grad=False)
    c = (rng.random((3, 1)) > 0.5).astype(np.float64)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    np.testing.assert_array_equal(eager(ops.where, c, x, y), np.where(c != 0, x, y))
    check_grad(ops.where, c, x, y, wrt=[1, 2])
    graph_matches_eager(lambda x_, y_: ops.where(sg.Tensor(data=c, requires_grad=False),
                                                 x_, y_), x, y)
    with pytest.raises(sg.ShapeError):
        ops.where(sg.Placeholder((2,)), sg.Placeholder((3,)), sg.Placeholder((3,)))


@pytest.mark.parametrize("fn,ref", [(ops.maximum, np.maximum), (ops.minimum, np.minimum)])
def test_max_min_several_inputs(fn, ref):
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4,)), rng.standard_normal((3, 1))
    np.testing.assert_array_equal(eager(fn, a, b, c), ref(ref(a, b), c))
    check_grad(fn, a, b, c)
    graph_matches_eager(fn, a, b, c)
    # ties: the first input takes the gradient (SINGA)
    x = sg.Parameter(data=np.ones(3))
    z = sg.Parameter(data=np.ones(3))
    grads = dict((id(p), g.data) for p, g in backward(ops.sum(fn(x, z))))
    np.testing.assert_array_equal(grads[id(x)], 1)
    np.testing.assert_array_equal(grads.get(id(z), np.zeros(3)), 0)
    with pytest.raises(sg.ShapeError):
        fn(sg.Placeholder((2,)), sg.Placeholder((3,)))

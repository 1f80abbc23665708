import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from helpers import check_grad, eager

rng = np.random.default_rng(0)
BCAST = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3)), ((), (2, 2))]


@pytest.mark.parametrize("sa,sb", BCAST)
@pytest.mark.parametrize("fn,ref", [(ops.add, np.add), (ops.sub, np.subtract),
                                    (ops.mul, np.multiply), (ops.div, np.divide)])
def test_binary_forward_and_grad(fn, ref, sa, sb):
    a = rng.standard_normal(sa)
    b = rng.standard_normal(sb) + (3.0 if fn is ops.div else 0.0)
    np.testing.assert_allclose(eager(fn, a, b), ref(a, b), rtol=1e-12)
    check_grad(fn, a, b)


@pytest.mark.parametrize("fn,ref,lo", [(ops.exp, np.exp, -2), (ops.log, np.log, 0.1),
                                       (ops.sqrt, np.sqrt, 0.1), (ops.neg, np.negative, -2),
                                       (ops.abs, np.abs, 0.1)])
def test_unary(fn, ref, lo):
    x = rng.uniform(lo, 2.0, (3, 5))
    np.testing.assert_allclose(eager(fn, x), ref(x), rtol=1e-12)
    check_grad(fn, x)


def test_pow():
    a = rng.uniform(0.5, 2, (2, 3))
    b = rng.uniform(-1, 2, (3,))
    np.testing.assert_allclose(eager(ops.pow, a, b), a ** b)
    check_grad(ops.pow, a, b)


def test_float32_stays_float32():
    x = sg.Tensor(data=np.ones((2, 2), np.float32))
    y = x * 2 + 1.5
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.data, np.full((2, 2), 3.5, np.float32))


def test_sum_to_and_broadcast_to():
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(eager(lambda t: ops.sum_to(t, (3, 1)), x),
                               x.sum(axis=(0, 2)).reshape(3, 1))
    check_grad(lambda t: ops.sum_to(t, (1, 4)), x)
    check_grad(lambda t: ops.broadcast_to(t, (2, 3, 4)), rng.standard_normal((3, 1)))


def test_broadcast_shape_error_names_shapes():
    with pytest.raises(sg.ShapeError, match=r"Add .*\(2, 3\) and \(4,\)"):
        ops.add(sg.Placeholder((2, 3)), sg.Placeholder((4,)))


def test_dtype_mismatch_raises():
    with pytest.raises(sg.DTypeError, match="Mul"):
        ops.mul(sg.Placeholder((2,)), sg.Placeholder((2,), dtype="float64"))

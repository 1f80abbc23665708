import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from helpers import check_grad, eager

rng = np.random.default_rng(1)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes(ta, tb):
    a = rng.standard_normal((4, 3) if ta else (3, 4))
    b = rng.standard_normal((5, 4) if tb else (4, 5))
    ref = (a.T if ta else a) @ (b.T if tb else b)
    fn = lambda x, y: ops.matmul(x, y, trans_a=ta, trans_b=tb)  # noqa: E731
    np.testing.assert_allclose(eager(fn, a, b), ref, rtol=1e-12)
    check_grad(fn, a, b)


def test_batched_matmul_broadcast():
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 2))
    np.testing.assert_allclose(eager(ops.matmul, a, b), a @ b)
    check_grad(ops.matmul, a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,n,tb", [((2, 2, 2, 48), 96, False), ((2, 4, 4, 40), 24, True),
                                        ((3, 1, 5), 7, False)])
def test_matmul_of_nd_by_2d_is_one_product(shape, n, tb, dtype):
    # a Linear layer on a 4-d activation: all leading rows in one product (few rows: GEMVs)
    a = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((n, shape[-1]) if tb else (shape[-1], n)).astype(dtype)
    ref = a.astype(np.float64) @ (w.T if tb else w).astype(np.float64)
    got = eager(lambda x, y: ops.matmul(x, y, trans_b=tb), a, w)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_matmul_shape_error():
    with pytest.raises(sg.ShapeError, match=r"MatMul .*\(2, 3\) by \(4, 5\)"):
        ops.matmul(sg.Placeholder((2, 3)), sg.Placeholder((4, 5)))


def test_add_bias_and_gemm():
    x, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(eager(ops.add_bias, x, b), x + b)
    check_grad(ops.add_bias, x, b)
    x4, c = rng.standard_normal((2, 3, 2, 2)), rng.standard_normal(3)
    f = lambda t, u: ops.AddBias(1)(t, u)  # noqa: E731
    np.testing.assert_allclose(eager(f, x4, c), x4 + c[:, None, None])
    check_grad(f, x4, c)
    a, bb, cc = rng.standard_normal((4, 3)), rng.standard_normal((5, 4)), rng.standard_normal(5)
    g = lambda p, q, r: ops.gemm(p, q, r, alpha=0.5, beta=2.0, trans_a=True, trans_b=True)  # noqa
    np.testing.assert_allclose(eager(g, a, bb, cc), 0.5 * a.T @ bb.T + 2 * cc)
    check_grad(g, a, bb, cc)
    with pytest.raises(sg.ShapeError, match="bias"):
        ops.add_bias(sg.Placeholder((3, 4)), sg.Placeholder((3,)))


@pytest.mark.parametrize("axis,keep", [(None, False), (0, False), (1, True), ((0, 2), False),
                                       (-1, True)])
def test_sum_mean(axis, keep):
    x = rng.standard_normal((2, 3, 4))
    for fn, ref in [(ops.sum, np.sum), (ops.mean, np.mean)]:
        f = lambda t: fn(t, axis, keep)  # noqa: E731
        np.testing.assert_allclose(eager(f, x), ref(x, axis=axis, keepdims=keep), rtol=1e-12)
        check_grad(f, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axis,keep", [((3, 4, 5, 6), (0, 2, 3), False),
                                             ((3, 4, 5, 6), (0, 2, 3), True),
                                             ((3, 4, 5, 6), (2, 3), False),
                                             ((3, 4, 2, 17), (0, 3), True),
                                             ((5, 2, 3, 8), (0, 3), False)])
def test_sum_mean_over_planes(shape, axis, keep, dtype, monkeypatch):
    # the bias-gradient form (kept axes in the middle, planes of >= 16 after them) runs as a
    # Numba loop summing in float64: against numpy's float64 sums, serial and parallel
    from singa_graph.runtime.kernels.cpu import loops

    x = rng.standard_normal(shape).astype(dtype)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    for fn, ref in [(ops.sum, np.sum), (ops.mean, np.mean)]:
        f = lambda t: fn(t, axis, keep)  # noqa: E731
        want = ref(x.astype(np.float64), axis=axis, keepdims=keep)
        got = eager(f, x)
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        monkeypatch.setattr(loops, "PARALLEL_WORK", 0)
        np.testing.assert_array_equal(eager(f, x), got)
        monkeypatch.undo()
    check_grad(lambda t: ops.sum(t, axis, keep), x.astype(np.float64)[:2, :3])


def test_reduce_axis_error():
    with pytest.raises(sg.ShapeError, match="Sum .*axis 3"):
        ops.sum(sg.Placeholder((2, 3)), 3)


def test_shape_ops():
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(eager(lambda t: ops.reshape(t, (4, -1)), x), x.reshape(4, 6))
    np.testing.assert_array_equal(eager(ops.flatten, x), x.reshape(2, 12))
    np.testing.assert_array_equal(eager(lambda t: ops.transpose(t, (2, 0, 1)), x),
                                  x.transpose(2, 0, 1))
    y = rng.standard_normal((2, 5, 4))
    np.testing.assert_array_equal(eager(lambda a, b: ops.cat([a, b], 1), x, y),
                                  np.concatenate([x, y], 1))
    parts = eager(lambda t: ops.split(t, 1, [1, 2]), x)
    np.testing.assert_array_equal(parts[0], x[:, :1])
    np.testing.assert_array_equal(parts[1], x[:, 1:])
    check_grad(lambda t: ops.reshape(t, (4, -1)), x)
    check_grad(lambda t: ops.transpose(t, (2, 0, 1)), x)
    check_grad(lambda a, b: ops.cat([a, b], 1), x, y)
    check_grad(lambda t: ops.split(t, 1, [1, 2])[1], x)
    check_grad(ops.identity, x)


def test_shape_errors():
    with pytest.raises(sg.ShapeError, match=r"Reshape .*\(2, 3\)"):
        ops.reshape(sg.Placeholder((2, 3)), (4, 2))
    with pytest.raises(sg.ShapeError, match=r"Concat .*\(2, 3\), \(3, 3\)"):
        ops.cat([sg.Placeholder((2, 3)), sg.Placeholder((3, 3))], 1)
    with pytest.raises(sg.ShapeError, match="Split"):
        ops.split(sg.Placeholder((2, 3)), 1, [1, 1])
    with pytest.raises(sg.ShapeError, match="Transpose"):
        ops.transpose(sg.Placeholder((2, 3)), (0, 0))


def test_flatten_and_cast_gradients():
    x = rng.standard_normal((2, 3, 4))
    check_grad(lambda t: ops.flatten(t, 2), x)
    np.testing.assert_array_equal(eager(lambda t: ops.flatten(t, 0), x), x.reshape(1, 24))
    y = eager(lambda t: ops.cast(t, np.float32), x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x.astype(np.float32))
    # a float64 -> float32 -> float64 round trip keeps the gradient; the function is linear, so
    # a wide step only averages out float32 rounding
    check_grad(lambda t: ops.cast(ops.cast(t, np.float32), np.float64), x, eps=1e-2,
               rtol=1e-4, atol=1e-5)

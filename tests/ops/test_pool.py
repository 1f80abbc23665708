import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import singa_graph as sg
from singa_graph import ops
from helpers import check_grad, eager

rng = np.random.default_rng(3)


def onnx_pool(kind, x, kernel, stride, pads, count_include_pad=0):
    attrs = dict(kernel_shape=list(kernel), strides=list(stride), pads=list(pads))
    if kind == "AveragePool":
        attrs["count_include_pad"] = int(count_include_pad)
    node = helper.make_node(kind, ["x"], ["y"], **attrs)
    return ReferenceEvaluator(node).run(None, {"x": x})[0]


def distinct(shape):
    """Random values without ties, so max pooling is differentiable everywhere."""
    return rng.permutation(np.prod(shape)).reshape(shape) / 7.0 - 3.0


# (kernel, stride, padding)  padding: int, (ph, pw) or ONNX (top, left, bottom, right)
CASES = [((2, 2), None, 0), ((3, 3), 1, 1), ((3, 2), (2, 1), (1, 0)), ((3, 3), 2, 1),
         ((2, 3), 2, (1, 0, 0, 2))]


def _args(k, s, p):
    s = k if s is None else ((s, s) if isinstance(s, int) else s)
    p = (p,) * 4 if isinstance(p, int) else (tuple(p) if len(p) == 4 else (*p, *p))
    return k, s, p


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_max_pool_matches_onnx(case, dtype):
    x = rng.standard_normal((2, 3, 7, 6)).astype(dtype)
    got = eager(lambda t: ops.max_pool2d(t, *case), x)
    np.testing.assert_array_equal(got, onnx_pool("MaxPool", x, *_args(*case)))
    assert got.dtype == dtype


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES)
def test_avg_pool_matches_onnx(case, dtype, include):
    x = rng.standard_normal((2, 3, 7, 6)).astype(dtype)
    got = eager(lambda t: ops.avg_pool2d(t, *case, count_include_pad=include), x)
    ref = onnx_pool("AveragePool", x, *_args(*case), include)
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_avg_pool_default_excludes_padding():
    x = np.ones((1, 1, 3, 3))
    y = eager(lambda t: ops.avg_pool2d(t, 3, 1, 1), x)
    np.testing.assert_allclose(y, np.ones((1, 1, 3, 3)))  # corners average 4 real ones


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_global_average_pool(dtype):
    x = rng.standard_normal((2, 3, 4, 5)).astype(dtype)
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    ref = ReferenceEvaluator(node).run(None, {"x": x})[0]
    np.testing.assert_allclose(eager(ops.global_average_pool, x), ref, rtol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_pool_gradients(case):
    x = distinct((2, 2, 5, 5))
    check_grad(lambda t: ops.max_pool2d(t, *case), x)
    check_grad(lambda t: ops.avg_pool2d(t, *case), x)
    check_grad(lambda t: ops.avg_pool2d(t, *case, count_include_pad=True), x)


def test_max_pool_overlapping_windows_route_to_argmax():
    x = np.array([[[[1., 5., 2.], [0., 3., 4.], [6., 1., 0.]]]])
    dx = ops.MaxPool2dGrad((2, 2), 1)(sg.Tensor(data=np.ones((1, 1, 2, 2))), sg.Tensor(data=x))
    # windows' maxima: 5, 5, 6, 4 -> the 5 gets two contributions
    np.testing.assert_array_equal(dx.data[0, 0], [[0, 2, 0], [0, 0, 1], [1, 0, 0]])


def test_avg_pool_grad_is_differentiable():
    dy = rng.standard_normal((2, 2, 3, 3))
    check_grad(lambda t: ops.AvgPool2dGrad(3, 2, 1, x_shape=(2, 2, 5, 5))(t), dy)


def test_global_average_pool_gradient():
    check_grad(ops.global_average_pool, rng.standard_normal((2, 3, 3, 4)))


def test_pool_shape_errors():
    x = sg.Placeholder((2, 3, 4, 4))
    with pytest.raises(sg.ShapeError, match=r"MaxPool2d .*\(5, 5\) is larger than input "
                                            r"\(2, 3, 4, 4\)"):
        ops.max_pool2d(x, 5)
    with pytest.raises(sg.ShapeError, match=r"AvgPool2d .*padding .* smaller than kernel"):
        ops.avg_pool2d(x, 2, 1, 2)
    with pytest.raises(sg.ShapeError, match=r"GlobalAveragePool .*\(2, 3\)"):
        ops.global_average_pool(sg.Placeholder((2, 3)))
    assert ops.max_pool2d(x, 2).shape == (2, 3, 2, 2)
    assert ops.max_pool2d(x, 5, 1, 1).shape == (2, 3, 2, 2)


def test_pool_parallel_loops_match_serial(monkeypatch):
    from singa_graph.runtime.kernels.cpu import loops as loops_mod

    x = distinct((2, 3, 6, 5))
    fns = [lambda t: ops.max_pool2d(t, 3, 2, 1), lambda t: ops.avg_pool2d(t, 3, 2, 1),
           lambda t, d: ops.MaxPool2dGrad(3, 2, 1)(d, t),
           lambda t, d: ops.AvgPool2dGrad(3, 2, 1, x_shape=x.shape)(d)]
    dy = rng.standard_normal((2, 3, 3, 3))
    args = [(x,), (x,), (x, dy), (x, dy)]
    want = [eager(f, *a) for f, a in zip(fns, args)]
    monkeypatch.setattr(loops_mod, "PARALLEL_WORK", 0)
    for f, a, r in zip(fns, args, want):
        np.testing.assert_allclose(eager(f, *a), r, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES + [((2, 2), None, 0, (7, 5))])
def test_max_pool_grad_with_relu_is_relu_grad_of_it(case, dtype):
    # the fused form (passes/fuse.py) must equal ReLUGrad(MaxPool2dGrad(dy, z), z) bit for
    # bit, z a ReLU output: zeros, ties at zero, a NaN and positive values
    k, s, p, hw = (*case, (8, 6))[:4]
    z = np.maximum(rng.standard_normal((2, 3) + hw), 0).astype(dtype)
    z[0, 0, 0, 0] = np.nan
    dy = rng.standard_normal(ops.MaxPool2d(k, s, p).output_shape(z.shape)).astype(dtype)
    got = eager(lambda d, t: ops.MaxPool2dGrad(k, s, p, relu=True)(d, t), dy, z)
    want = eager(lambda d, t: ops.ReLUGrad()(ops.MaxPool2dGrad(k, s, p)(d, t), t), dy, z)
    np.testing.assert_array_equal(got, want)
    # and against a plain numpy reference of the routing: the first maximum of each window
    # takes its dy, masked by the ReLU (x > 0)
    if case[:3] == ((2, 2), None, 0):
        n, c, h, w = z.shape
        ho, wo = h // 2, w // 2
        win = z[:, :, :2 * ho, :2 * wo].reshape(n, c, ho, 2, wo, 2).transpose(0, 1, 2, 4, 3, 5)
        # np.argmax: the first maximum (the NaN, first in its window, wins there too)
        first = np.argmax(win.reshape(n, c, ho, wo, 4), -1)
        ref = np.zeros_like(z)
        for a, b, i, j in np.ndindex(n, c, ho, wo):
            r, q = divmod(first[a, b, i, j], 2)
            v = z[a, b, 2 * i + r, 2 * j + q]
            ref[a, b, 2 * i + r, 2 * j + q] = dy[a, b, i, j] if v > 0 else 0
        np.testing.assert_array_equal(got, ref)


def test_max_pool_grad_relu_parallel_loops_match_serial(monkeypatch):
    from singa_graph.runtime.kernels.cpu import loops as loops_mod

    z = np.maximum(distinct((2, 3, 8, 6)), 0)
    dy = rng.standard_normal((2, 3, 4, 3))
    fns = [lambda d, t: ops.MaxPool2dGrad(2, relu=True)(d, t),      # the 2x2 loop
           lambda d, t: ops.MaxPool2dGrad(3, 2, 1, relu=True)(d, t)]  # the general one
    want = [eager(f, dy, z) for f in fns]
    monkeypatch.setattr(loops_mod, "PARALLEL_WORK", 0)
    for f, r in zip(fns, want):
        np.testing.assert_array_equal(eager(f, dy, z), r)


def _fold_max(x, k, s, p, ho, wo):
    """The max kernel's fold: the window's cells inside the plane in row-major order, the
    first maximum kept (``v > m``), so a NaN in front stays and later NaNs are skipped."""
    n, c, h, w = x.shape
    y = np.empty((n, c, ho, wo), x.dtype)
    for a in range(n):
        for b in range(c):
            for oy in range(ho):
                for ox in range(wo):
                    cells = [x[a, b, iy, ix] for iy in range(max(oy * s - p, 0),
                                                             min(oy * s - p + k, h))
                             for ix in range(max(ox * s - p, 0), min(ox * s - p + k, w))]
                    m = cells[0]
                    for v in cells[1:]:
                        m = v if v > m else m
                    y[a, b, oy, ox] = m
    return y


def _assert_is_the_fold(x, k, s, p, ceil, what=""):
    """The max pool of ``x`` equals :func:`_fold_max` bit for bit, zeros' signs included."""
    y = eager(lambda t: ops.max_pool2d(t, k, s, p, ceil_mode=ceil), x)
    want = _fold_max(x, k, s, p, y.shape[2], y.shape[3])
    np.testing.assert_array_equal(y, want, err_msg=what)
    assert (np.signbit(y) == np.signbit(want)).all(), what


@pytest.mark.parametrize("k,s,p,ceil", [(3, 1, 1, False), (3, 2, 0, True), (5, 2, 2, False),
                                        (3, 2, 1, True)])
def test_max_pool_keeps_the_fold_order_with_nan_and_signed_zero(k, s, p, ceil):
    # the inside outputs are computed cells-outer (vectorised): same values, bit for bit
    x = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    x[0, 0, 2, 3] = x[1, 2, 5, 0] = x[0, 1, 0, 0] = np.nan
    x[1, 1, 4:7, 4:7] = 0.0
    x[1, 1, 5, 5] = -0.0
    _assert_is_the_fold(x, k, s, p, ceil)


@pytest.mark.parametrize("layout", ["channels last", "planes"])
@pytest.mark.parametrize("size", [2, 4, 7, 16])
@pytest.mark.parametrize("k,s,p,ceil", [(3, 1, 1, True), (3, 2, 0, True), (2, 1, 0, False),
                                        (5, 3, 2, False)])
def test_both_max_pool_layouts_match_the_fold_on_nan_and_zero_heavy_planes(size, k, s, p, ceil,
                                                                    layout, monkeypatch):
    # the channels-innermost kernel (max_pool.py) and the plane-by-plane one, each forced
    # on every shape: a tenth of the cells NaN and a third of them zeros of either sign,
    # on the plane sizes of googlenet and squeezenet
    from singa_graph.runtime.kernels.cpu import max_pool
    last = layout == "channels last"
    monkeypatch.setattr(max_pool, "SMALL_PLANE", 1 << 30 if last else 0)
    monkeypatch.setattr(max_pool, "MIN_CHANNELS", 0 if last else 1 << 30)
    monkeypatch.setattr(max_pool, "WIDE_PLANE", 0)
    g = np.random.default_rng(size * 100 + k * 10 + s)
    # 37 channels: a group of four vectors of them, then the last one overlapping (AVX2)
    x = g.standard_normal((2, 37 if last else 5, size, size + 1)).astype(np.float32)
    x[g.random(x.shape) < 0.3] = 0.0
    x[g.random(x.shape) < 0.15] = -0.0
    x[g.random(x.shape) < 0.1] = np.nan
    if p * 2 > k:
        pytest.skip("padding over half the window")
    _assert_is_the_fold(x, k, s, p, ceil)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,s,p,ceil", [(3, 1, 1, False), (3, 2, 1, True), (2, 1, 0, True),
                                        (4, 2, 1, False), (5, 2, 2, True), (3, 3, 1, True)])
def test_vector_rows_match_the_fold_over_several_registers(k, s, p, ceil, dtype):
    # rows of 20-40 outputs take two or three vectors (16 float32 or 8 float64 lanes), so
    # full, partial and border chunks all meet NaNs and zeros of either sign; stride 3
    # runs the scalar fold
    g = np.random.default_rng(k * 10 + s)
    x = g.standard_normal((2, 3, 9, 41)).astype(dtype)
    x[g.random(x.shape) < 0.3] = 0.0
    x[g.random(x.shape) < 0.15] = -0.0
    x[g.random(x.shape) < 0.1] = np.nan
    _assert_is_the_fold(x, k, s, p, ceil)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,s,p,ceil", [(3, 2, 0, True), (3, 1, 1, False), (2, 2, 0, True),
                                        (4, 2, 1, True), (3, 2, 1, False)])
def test_rows_of_every_width_match_the_fold(k, s, p, ceil, dtype):
    # output rows of 1 to 35 values: shorter than a vector (masked), exactly one or more,
    # and a partial last vector that overlaps the one before it; loads that reach the row's
    # last column (ceil mode) and windows over either border
    g = np.random.default_rng(k * 100 + s * 10 + p)
    for w in range(max(k - 2 * p, 1), 72, 3 if dtype == np.float64 else 1):
        x = g.standard_normal((1, 2, k + 1, w)).astype(dtype)
        x[g.random(x.shape) < 0.2] = -0.0
        x[g.random(x.shape) < 0.05] = np.nan
        _assert_is_the_fold(x, k, s, p, ceil, f"width {w}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,s,p,ceil", [(3, 2, 0, True), (3, 1, 1, False), (2, 2, 0, False),
                                        (5, 2, 2, True)])
def test_output_rows_folded_in_groups_match_the_fold(k, s, p, ceil, dtype):
    # planes of 3 to 40 rows: the rows whose windows lie inside the plane fold four at a
    # time (pool.ROWS), the last group overlapping the one before it; fewer than four such
    # rows, and the border rows, fold one at a time
    g = np.random.default_rng(k * 100 + s * 10 + p)
    for h in range(k, 41, 1 if dtype == np.float32 else 3):
        x = g.standard_normal((1, 2, h, 15 + h % 3 * 8)).astype(dtype)
        x[g.random(x.shape) < 0.2] = -0.0
        x[g.random(x.shape) < 0.05] = np.nan
        _assert_is_the_fold(x, k, s, p, ceil, f"height {h}")

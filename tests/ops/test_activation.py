import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from singa_graph.runtime.kernels.cpu import activation as kact
from singa_graph.runtime.registry import get_kernel
from helpers import check_grad, eager

rng = np.random.default_rng(2)
DTYPES = [np.float32, np.float64]


def away_from_zero(shape, lo=0.1):
    """Inputs whose |x| >= lo, so the kinks of relu/leakyrelu stay out of the differences."""
    x = rng.uniform(lo, 2.0, shape)
    return x * rng.choice([-1.0, 1.0], shape)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x, axis):
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def tol(dt):
    return dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=1e-12, atol=1e-14)


ELEMENTWISE = [
    (ops.relu, lambda x: np.maximum(x, 0)),
    (ops.leakyrelu, lambda x: np.where(x > 0, x, 0.01 * x)),
    (lambda t: ops.leakyrelu(t, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    (lambda t: ops.leakyrelu(t, -0.5), lambda x: np.where(x > 0, x, -0.5 * x)),
    (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    (ops.tanh, np.tanh),
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fn,ref", ELEMENTWISE)
def test_elementwise_forward(fn, ref, dt):
    x = away_from_zero((3, 4, 5)).astype(dt)
    y = eager(fn, x)
    assert y.dtype == dt and y.shape == x.shape
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), **tol(dt))


@pytest.mark.parametrize("fn,ref", ELEMENTWISE)
def test_elementwise_grad(fn, ref):
    check_grad(fn, away_from_zero((3, 5)))


def test_sigmoid_saturates_without_overflow():
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0])
    with np.errstate(all="raise"):
        y = eager(ops.sigmoid, x)
    np.testing.assert_allclose(y, [0.0, 1 / (1 + np.exp(50.0)), 0.5, 1 / (1 + np.exp(-50.0)), 1])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("fn,ref", [(ops.softmax, np_softmax), (ops.log_softmax, np_log_softmax)])
def test_softmax_forward_any_axis(fn, ref, axis, dt):
    x = (rng.standard_normal((3, 4, 5)) * 3).astype(dt)
    y = eager(lambda t: fn(t, axis), x)
    assert y.dtype == dt
    np.testing.assert_allclose(y, ref(x.astype(np.float64), axis), **tol(dt))


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("fn", [ops.softmax, ops.log_softmax])
def test_softmax_grad(fn, axis):
    check_grad(lambda t: fn(t, axis), rng.standard_normal((3, 4, 2)))


def test_softmax_defaults_and_stability():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0]])
    np.testing.assert_allclose(eager(ops.softmax, x), np_softmax(x, 1))  # SINGA's axis=1
    np.testing.assert_allclose(eager(ops.log_softmax, x), np_log_softmax(x, 1))
    assert ops.Softmax().axis == -1


@pytest.mark.parametrize("fn,ref", [(ops.softmax, np_softmax), (ops.log_softmax, np_log_softmax)])
def test_parallel_paths(monkeypatch, fn, ref):
    monkeypatch.setattr(kact, "PARALLEL_ROWS", 0)
    x = rng.standard_normal((6, 7, 3))
    for axis in (0, 1, 2):
        np.testing.assert_allclose(eager(lambda t: fn(t, axis), x), ref(x, axis), rtol=1e-12)
    check_grad(lambda t: fn(t, 1), x[:2, :3])
    np.testing.assert_allclose(eager(ops.sigmoid, x), 1 / (1 + np.exp(-x)), rtol=1e-12)
    check_grad(ops.tanh, x[:2])


def test_non_contiguous_buffers_are_handled():
    x = rng.standard_normal((4, 6))
    xt, y = x.T, np.empty((4, 6)).T  # strided views, as a kernel could be handed
    step = get_kernel("Sigmoid")(ops.Sigmoid(), [xt], [y])
    step()
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-xt)), rtol=1e-12)


def test_graph_mode_shapes():
    p = sg.Placeholder((2, 3, 4))
    assert ops.softmax(p, axis=0).shape == (2, 3, 4)
    assert ops.relu(p).dtype == np.float32


def test_axis_out_of_range_names_op_and_shape():
    with pytest.raises(sg.ShapeError, match=r"Softmax .*axis 3.*\(2, 3\)"):
        ops.softmax(sg.Placeholder((2, 3)), axis=3)


def test_integer_input_rejected():
    with pytest.raises(sg.DTypeError, match="ReLU"):
        ops.relu(sg.Placeholder((2,), dtype="int32"))


def test_relu_is_inplace_capable():
    assert ops.ReLU.inplace == {0: 0}


@pytest.mark.parametrize("op", [ops.ReLU(), ops.LeakyReLU(0.3), ops.Sigmoid(), ops.Tanh(),
                                ops.Softmax(0), ops.LogSoftmax(1), ops.ReLUGrad(),
                                ops.LeakyReLUGrad(0.3), ops.SigmoidGrad(), ops.TanhGrad(),
                                ops.SoftmaxGrad(1), ops.LogSoftmaxGrad(0)])
def test_kernels_may_overwrite_input_zero(op):
    """Every op here declares ``inplace = {0: 0}``: the planner may hand the kernel its first
    input's buffer as the output."""
    from singa_graph.runtime.registry import bind

    assert op.inplace == {0: 0}
    ins = [rng.standard_normal((3, 4)) for _ in range(2 if "Grad" in op.type else 1)]
    op.infer(*[sg.Placeholder(a.shape, dtype="float64") for a in ins])
    ref = np.empty((3, 4))
    bind(op, ins, [ref])()  # float64: no workspace (float16 stages through float32)
    buf = [a.copy() for a in ins]
    bind(op, buf, [buf[0]])()
    np.testing.assert_array_equal(buf[0], ref)


def test_float16_computes_in_float32_rounded_once():
    """Numba has no float16 arithmetic: float16 operands are staged in planned float32
    workspace, and the result is rounded to float16 once."""
    x = np.linspace(-8, 8, 37).astype(np.float16)
    got = ops.sigmoid(sg.Tensor(data=x)).data
    assert got.dtype == np.float16
    want = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [1, 9, 16, 65, 197, 5000])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_last_axis_softmax_in_place_matches_out_of_place_and_the_reference(dt, parallel, n,
                                                                          monkeypatch):
    # rows along the last axis run the vectorised row kernel (its in-place loop is a
    # separate one); a plan runs it in place. Widths: the max's short and eight-chain
    # paths, and 21 rows crossing the exponentials' block of SOFTMAX_BLOCK elements
    if parallel:
        monkeypatch.setattr(kact, "PARALLEL_ROWS", 0)
    x = np.random.default_rng(3).standard_normal((7, 3, n)).astype(dt) * 4
    x[0, 0, min(5, n - 1)] = 80.0  # a dominant entry: the shift by the max keeps exp finite
    x[1, 2, n - 1] = 90.0  # ... in a row's last, odd element, after the max's eight chains
    from singa_graph.runtime.registry import bind
    op = ops.Softmax(2)
    out = np.empty_like(x)
    bind(op, [x], [out])()
    inplace = x.copy()
    bind(op, [inplace], [inplace])()
    np.testing.assert_array_equal(inplace, out)
    np.testing.assert_allclose(out, np_softmax(x.astype(np.float64), -1),
                               rtol=2e-6 if dt == np.float32 else 1e-13, atol=1e-30)
    np.testing.assert_allclose(out.sum(-1), 1.0, rtol=3e-6 if dt == np.float32 else 1e-14)

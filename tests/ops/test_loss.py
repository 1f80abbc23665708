import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from singa_graph.passes.autodiff import backward
from helpers import check_grad, eager

rng = np.random.default_rng(3)
DTYPES = [np.float32, np.float64]


def np_sce(x, t):
    s = x - x.max(axis=1, keepdims=True)
    logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
    if t.dtype.kind in "iu":
        return -logp[np.arange(len(t)), t].mean()
    return -(t * logp).sum() / x.shape[0]


def onehot(labels, c, dt=np.float64):
    return np.eye(c, dtype=dt)[labels]


def tol(dt):
    return dict(rtol=1e-5) if dt == np.float32 else dict(rtol=1e-12)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("ldt", [np.int32, np.int64])
def test_sce_labels_forward(dt, ldt):
    x = (rng.standard_normal((5, 4)) * 3).astype(dt)
    t = rng.integers(0, 4, 5).astype(ldt)
    y = eager(ops.softmax_cross_entropy, x, t)
    assert y.shape == (1,) and y.dtype == dt
    np.testing.assert_allclose(y, np_sce(x.astype(np.float64), t), **tol(dt))


@pytest.mark.parametrize("dt", DTYPES)
def test_sce_onehot_and_probabilities_forward(dt):
    x = rng.standard_normal((5, 4)).astype(dt)
    labels = rng.integers(0, 4, 5)
    t = onehot(labels, 4, dt)
    y = eager(ops.softmax_cross_entropy, x, t)
    np.testing.assert_allclose(y, np_sce(x.astype(np.float64), labels), **tol(dt))
    p = rng.dirichlet(np.ones(4), 5).astype(dt)
    np.testing.assert_allclose(eager(ops.softmax_cross_entropy, x, p),
                               np_sce(x.astype(np.float64), p.astype(np.float64)), **tol(dt))


def test_sce_stable_for_huge_logits():
    x = np.array([[1000.0, 0.0, -1000.0]])
    np.testing.assert_allclose(eager(ops.softmax_cross_entropy, x, np.array([1])), 1000.0)


def test_sce_grad_labels():
    labels = rng.integers(0, 4, 5)
    check_grad(ops.softmax_cross_entropy, rng.standard_normal((5, 4)), labels)


def test_sce_grad_onehot_and_probabilities():
    x = rng.standard_normal((5, 4))
    check_grad(ops.softmax_cross_entropy, x, onehot(rng.integers(0, 4, 5), 4), wrt=[0])
    check_grad(ops.softmax_cross_entropy, x, rng.dirichlet(np.ones(4), 5))  # also d/dt
    check_grad(ops.softmax_cross_entropy, x, rng.uniform(0, 1, (5, 4)))  # rows not summing to 1


def test_sce_singa_gradient_formula():
    x, labels = rng.standard_normal((3, 4)), np.array([0, 3, 1])
    xp = sg.Parameter(data=x)
    loss = ops.softmax_cross_entropy(xp, sg.Tensor(data=labels, requires_grad=False))
    ((_, g),) = list(backward(loss))
    p = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    np.testing.assert_allclose(g.data, (p - onehot(labels, 4)) / 3, rtol=1e-12)


def test_sce_label_out_of_range():
    with pytest.raises(ValueError, match="out of range"):
        eager(ops.softmax_cross_entropy, rng.standard_normal((2, 3)), np.array([0, 3]))


@pytest.mark.parametrize("xs,ts,pat", [((4, 3), (5,), r"\(4, 3\).*\(5,\)"),
                                       ((4, 3), (4, 1), r"\(4, 3\).*\(4, 1\)"),
                                       ((4,), (4,), r"\(4,\)")])
def test_sce_shape_errors_name_shapes(xs, ts, pat):
    with pytest.raises(sg.ShapeError, match="SoftmaxCrossEntropy .*" + pat):
        ops.softmax_cross_entropy(sg.Placeholder(xs), sg.Placeholder(ts, dtype="int64"))


def test_sce_onehot_shape_and_dtype_errors():
    with pytest.raises(sg.ShapeError, match=r"SoftmaxCrossEntropy .*\(4, 3\).*\(4, 2\)"):
        ops.softmax_cross_entropy(sg.Placeholder((4, 3)), sg.Placeholder((4, 2)))
    with pytest.raises(sg.DTypeError, match="SoftmaxCrossEntropy"):
        ops.softmax_cross_entropy(sg.Placeholder((4, 3)),
                                  sg.Placeholder((4, 3), dtype="float64"))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (5,), (2, 3, 2)])
def test_mse_forward_is_singa_formula(dt, shape):
    x, t = rng.standard_normal(shape).astype(dt), rng.standard_normal(shape).astype(dt)
    ref = ((x.astype(np.float64) - t) ** 2).mean()  # SINGA >= 3.1
    y = eager(ops.mse_loss, x, t)
    assert y.shape == (1,) and y.dtype == dt
    np.testing.assert_allclose(y, ref, **tol(dt))


def test_mse_is_singa_31_mean_over_all_elements():
    # on a non-square input SINGA 3.0's sum/(2 N) would give a different value
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    t = np.zeros((2, 3))
    assert eager(ops.mse_loss, x, t).item() == pytest.approx(55.0 / 6)
    ts = [sg.Parameter(data=x.copy()), sg.Tensor(data=t, requires_grad=False)]
    (g,) = [g.data for _, g in backward(ops.mse_loss(*ts))]
    np.testing.assert_allclose(g, 2 * x / 6)


def test_mse_grad_and_shape_error():
    check_grad(ops.mse_loss, rng.standard_normal((4, 3)), rng.standard_normal((4, 3)))
    with pytest.raises(sg.ShapeError, match=r"MeanSquareError .*\(4, 3\).*\(4,\)"):
        ops.mse_loss(sg.Placeholder((4, 3)), sg.Placeholder((4,)))


@pytest.mark.parametrize("dt", DTYPES)
def test_cross_entropy_forward(dt):
    y = rng.dirichlet(np.ones(4), 5).astype(dt)
    t = onehot(rng.integers(0, 4, 5), 4, dt)
    ref = -(t * np.log(y.astype(np.float64))).sum() / 5
    np.testing.assert_allclose(eager(ops.cross_entropy, y, t), ref, **tol(dt))


def test_cross_entropy_matches_sce_and_ignores_zero_targets():
    x, labels = rng.standard_normal((5, 4)), rng.integers(0, 4, 5)
    np.testing.assert_allclose(eager(lambda a, b: ops.cross_entropy(ops.softmax(a), b),
                                     x, onehot(labels, 4)),
                               eager(ops.softmax_cross_entropy, x, labels), rtol=1e-12)
    y = np.array([[0.0, 1.0]])
    assert eager(ops.cross_entropy, y, np.array([[0.0, 1.0]])) == 0.0


def test_cross_entropy_grad():
    y = rng.uniform(0.2, 1.0, (5, 4))
    check_grad(ops.cross_entropy, y, onehot(rng.integers(0, 4, 5), 4), wrt=[0])
    check_grad(ops.cross_entropy, y, rng.dirichlet(np.ones(4), 5))
    with pytest.raises(sg.ShapeError, match=r"CrossEntropy .*\(5, 4\).*\(5, 3\)"):
        ops.cross_entropy(sg.Placeholder((5, 4)), sg.Placeholder((5, 3)))


def test_argmax():
    x = rng.standard_normal((3, 4, 5))
    for axis in (0, 1, -1):
        got = eager(lambda t: ops.argmax(t, axis), x)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, np.argmax(x, axis=axis))
    got = eager(lambda t: ops.argmax(t, 1, keepdims=True), x)
    np.testing.assert_array_equal(got, np.argmax(x, axis=1, keepdims=True))
    out = ops.argmax(sg.Parameter(data=x))
    assert not out.requires_grad and out.creator is None
    with pytest.raises(sg.ShapeError, match=r"ArgMax .*axis 3.*\(3, 4, 5\)"):
        ops.argmax(sg.Placeholder((3, 4, 5)), 3)


@pytest.mark.parametrize("dt", DTYPES)
def test_compiled_plan_matches_eager(dt):
    """The ops and gradients inside a compiled, in-place-planned, poisoned plan."""
    from singa_graph.ir import Graph, building
    from singa_graph.passes import compile
    from singa_graph.passes.autodiff import autodiff

    xv, lv, wv = rng.standard_normal((4, 5)), rng.integers(0, 3, 4), rng.standard_normal((5, 3))

    def model(x, lab, w):
        h = ops.matmul(x, w)
        a = ops.tanh(ops.sigmoid(ops.leakyrelu(ops.relu(h) + h, 0.1)))
        s = ops.log_softmax(a, 1) + ops.softmax(a, 0)
        return (ops.softmax_cross_entropy(s, lab) + ops.mse_loss(s, s * 0.5)
                + ops.cross_entropy(ops.softmax(s), ops.softmax(h)))

    w = sg.Parameter(data=wv.astype(dt))
    with building():
        x, lab = sg.Placeholder((4, 5), dtype=dt), sg.Placeholder((4,), dtype="int64")
        loss = model(x, lab, w)
        g = Graph([loss])
        g.add_outputs(*autodiff(g, loss).values())
    got_loss, got_grad = compile(g, poison=True).run({x: xv.astype(dt), lab: lv})
    we = sg.Parameter(data=wv.astype(dt))
    le = model(sg.Tensor(data=xv.astype(dt), requires_grad=False),
               sg.Tensor(data=lv, requires_grad=False), we)
    ((_, ge),) = list(backward(le))
    np.testing.assert_allclose(got_loss, le.data, **tol(dt))
    np.testing.assert_allclose(got_grad, ge.data, **tol(dt))

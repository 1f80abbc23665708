"""SINGA 3.1+ behaviours of single ops, written from SINGA's own operator code and unit tests
(python/singa/autograd.py, opt.py, test/python/test_operation.py, test_opt.py): PReLU's
slope broadcasting, LSTM's initial states, ``mean`` of several tensors, ``erf``, ``mse_loss``,
``where`` with a condition tensor, ``shape`` and its backward, the losses' refusal of wrong
ranks, and the optimizer states' names."""
import math

import numpy as np
import onnxruntime as ort
import pytest

import singa_graph as sg
from singa_graph import autograd, layer, opt, tensor
from singa_graph import onnx as sonnx_io
from singa_graph.ir import Graph, Placeholder
from helpers import check_grad, graph_matches_eager

rng = np.random.default_rng(21)


@pytest.fixture(autouse=True)
def _training():
    autograd.training = True  # SINGA's tests record the backward this way
    yield
    autograd.training = False


def _np(t):
    return tensor.to_numpy(tensor.from_raw_tensor(t))


def _sum_to(g, shape):
    """numpy reference of a broadcast operand's gradient (SINGA's axis_helper)."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    return g.sum(axis=tuple(i for i, s in enumerate(shape) if s == 1), keepdims=True)


# ---------------------------------------------------------------------- PReLU
@pytest.mark.parametrize("xs, ss", [((3, 4, 5), (5,)), ((3, 4, 5), (4, 5)),
                                    ((3, 4, 5, 6), (5, 6)), ((3, 4, 5, 6), (4, 5, 6)),
                                    ((1, 4, 1, 6), (3, 1, 5, 6))])
def test_prelu_broadcasts_x_and_slope_both_ways(xs, ss):
    # SINGA's _prelu_broadcast_helper: x and slope broadcast as numpy's operands do
    x = rng.standard_normal(xs).astype(np.float32)
    slope = rng.standard_normal(ss).astype(np.float32)
    want = np.clip(x, 0, np.inf) + np.clip(x, -np.inf, 0) * slope
    y = autograd.prelu(tensor.from_numpy(x), tensor.from_numpy(slope))
    np.testing.assert_allclose(tensor.to_numpy(y), want, rtol=1e-6)
    dy = rng.standard_normal(want.shape).astype(np.float32)
    dx, dslope = y.creator.backward(tensor.from_numpy(dy).data)
    pos = (x > 0).astype(np.float32)
    np.testing.assert_allclose(_np(dx), _sum_to((pos + (1 - pos) * slope) * dy, xs),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(dslope), _sum_to((1 - pos) * x * dy, ss), rtol=1e-5,
                               atol=1e-5)


def test_prelu_broadcast_gradients_graph_and_onnx():
    x = rng.standard_normal((1, 4, 1, 3))
    s = rng.standard_normal((3, 1, 2, 3))
    check_grad(autograd.prelu, x, s)
    graph_matches_eager(autograd.prelu, x.astype(np.float32), s.astype(np.float32))
    # ONNX's PRelu broadcasts only the slope: the export expands x first
    xf, sf = x.astype(np.float32), s.astype(np.float32)
    phs = [Placeholder(a.shape, a.dtype, name=f"x{i}") for i, a in enumerate((xf, sf))]
    proto = sonnx_io.export(Graph([autograd.prelu(*phs)], inputs=phs))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x0": xf, "x1": sf})[0]
    np.testing.assert_allclose(got, np.where(xf > 0, xf, xf * sf), rtol=1e-6)


# ---------------------------------------------------------------------- LSTM states
def _xs(n=2, steps=3):
    return [tensor.Tensor(data=rng.random((n, 3)).astype(np.float32)) for _ in range(steps)]


def test_lstm_takes_singa_test_states_and_checks_their_shapes():
    # SINGA's _LSTM_gpu_tiny_ops_shape_check_helper: h0 (2, 2) and a (2, 1) cell state
    xs = _xs()
    h0 = tensor.Tensor(data=np.zeros((2, 2), np.float32))
    c0 = tensor.Tensor(data=rng.random((2, 1)).astype(np.float32))
    rnn = layer.LSTM(3, 2)
    hs, h, c = rnn(xs, (h0, c0))
    targets = [tensor.Tensor(data=rng.random((2, 2)).astype(np.float32)) for _ in hs]
    loss = autograd.softmax_cross_entropy(hs[0], targets[0])
    for hi, ti in zip(hs[1:], targets[1:]):
        loss = autograd.add(loss, autograd.softmax_cross_entropy(hi, ti))
    pairs = list(autograd.backward(loss))
    assert len(pairs) == 16 and all(p.shape == g.shape for p, g in pairs)
    # the (2, 1) state is used as SINGA's elementwise product uses it: broadcast per row
    wide = rnn(xs, (h0, tensor.Tensor(data=np.repeat(c0.data, 2, 1))))
    np.testing.assert_array_equal(wide[2].data, c.data)


def test_lstm_initial_state_in_cudnn_layout():
    # SINGA's cuDNN layer takes hx, cx as (num_layers * directions, batch, hidden)
    xs = _xs()
    h0 = rng.random((2, 4)).astype(np.float32)
    c0 = rng.random((2, 4)).astype(np.float32)
    rnn = layer.LSTM(3, 4)
    flat = rnn(xs, (tensor.from_numpy(h0), tensor.from_numpy(c0)))
    hs, h, c = rnn(xs, (tensor.from_numpy(h0[None]), tensor.from_numpy(c0[None])))
    assert h.shape == c.shape == (1, 2, 4) and hs[0].shape == (2, 4)
    np.testing.assert_array_equal(h.data[0], flat[1].data)
    np.testing.assert_array_equal(c.data[0], flat[2].data)
    for bad in ((2, 2, 4), (2, 3), (1, 3, 4)):
        with pytest.raises(sg.ShapeError, match=r"\(num_layers \* directions, batch, hidden\)"):
            rnn(xs, (tensor.from_numpy(np.zeros(bad, np.float32)), tensor.from_numpy(c0)))


def test_rnn_state_layouts_compile_as_eager():
    rnn = layer.RNN(3, 4)
    xs = [rng.random((2, 3)).astype(np.float32) for _ in range(2)]
    h0 = rng.random((1, 2, 4)).astype(np.float32)

    def fn(a, b, h):
        return rnn([a, b], h)[1]

    rnn([tensor.from_numpy(x) for x in xs], tensor.from_numpy(h0))  # creates the weights
    graph_matches_eager(fn, *xs, h0)


# ---------------------------------------------------------------------- mean, erf, mse
def test_mean_of_tensors_is_elementwise_with_singa_backward():
    # SINGA's _Mean_helper
    x0 = np.array([-0.9, -0.3, -0.1, 0.1, 0.5, 0.9], np.float32).reshape(3, 2)
    x1 = np.array([0, -0.3, 0, 0.1, 0, 0.9], np.float32).reshape(3, 2)
    y = autograd.mean(tensor.from_numpy(x0), tensor.from_numpy(x1))
    np.testing.assert_allclose(tensor.to_numpy(y), (x0 + x1) / 2, rtol=1e-6)
    dx0, dx1 = y.creator.backward(tensor.from_numpy(np.ones((3, 2), np.float32)).data)
    np.testing.assert_array_equal(_np(dx0), np.full((3, 2), 0.5))
    np.testing.assert_array_equal(_np(dx1), np.full((3, 2), 0.5))
    # three tensors, one of them broadcast: SINGA's sum times 1/n
    a, b, c = rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 5)), rng.standard_normal(5)
    y = autograd.mean(*[tensor.from_numpy(v.astype(np.float32)) for v in (a, b, c)])
    want = (a.astype(np.float32) + b.astype(np.float32) + c.astype(np.float32))
    np.testing.assert_array_equal(tensor.to_numpy(y), want * np.float32(1 / 3))
    check_grad(autograd.mean, a, b, c)
    xs = [v.astype(np.float32) for v in (a, b, c)]
    graph_matches_eager(autograd.mean, *xs)
    # one op, exported as ONNX's Mean
    phs = [Placeholder(v.shape, v.dtype, name=f"x{i}") for i, v in enumerate(xs)]
    proto = sonnx_io.export(Graph([autograd.mean(*phs)], inputs=phs))
    assert [n.op_type for n in proto.graph.node] == ["Mean"]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {f"x{i}": v for i, v in enumerate(xs)})[0],
                               (xs[0] + xs[1] + xs[2]) / 3, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_values_are_math_erf(dtype):
    # SINGA's erf_helper inputs; the values are math.erf's to the dtype's precision
    x = np.array([0.1, 0.5, 0.9, 1.2, 1.5, 1.8, 2.3, 2.5, 2.7, -1.1, -1.5, -1.9, -2.2, -2.5,
                  -2.8], dtype)
    want = np.vectorize(math.erf)(x.astype(np.float64))
    y = autograd.erf(sg.Tensor(data=x))  # from_numpy makes float32, as SINGA's
    assert y.dtype == dtype
    np.testing.assert_allclose(tensor.to_numpy(y), want, rtol=np.finfo(dtype).eps * 2)
    graph_matches_eager(autograd.erf, x)
    # the gradient is erf's derivative 2/sqrt(pi) exp(-x^2) dy (SINGA's backward drops x)
    dy = rng.standard_normal(x.shape).astype(dtype)
    np.testing.assert_allclose(_np(y.creator.backward(dy)),
                               2 / np.sqrt(np.pi) * np.exp(-x.astype(np.float64) ** 2) * dy,
                               rtol=1e-5)
    check_grad(autograd.erf, x.astype(np.float64))


def test_mse_loss_is_singa_31_mean_of_squares():
    # SINGA's _MeanSquareError_helper: 0.0366666 (SINGA < 3.1's sum/2/N gave 0.055)
    X = np.array([4.3, 5.4, 3.3, 3.6, 5.7, 6.0], np.float32).reshape(3, 2)
    T = np.array([4.4, 5.3, 3.2, 3.7, 5.4, 6.3], np.float32).reshape(3, 2)
    loss = autograd.mse_loss(tensor.from_numpy(X), tensor.from_numpy(T))
    assert loss.shape == (1,)
    assert tensor.to_numpy(loss)[0] == pytest.approx(0.0366666, abs=1e-5)
    dx = loss.creator.backward()  # one gradient: SINGA passes the target to the constructor
    assert dx.shape == (3, 2)
    # SINGA's test_mse_loss_value
    y, t = rng.random((100, 120)).astype(np.float32), rng.random((100, 120)).astype(np.float32)
    loss = autograd.mse_loss(tensor.from_numpy(y), tensor.from_numpy(t))
    np.testing.assert_allclose(tensor.to_numpy(loss), [np.mean(np.square(t - y))], rtol=1e-5)
    np.testing.assert_allclose(_np(loss.creator.backward()), -2 * (t - y) / t.size, rtol=1e-5,
                               atol=1e-9)
    graph_matches_eager(autograd.mse_loss, y[:4, :5], t[:4, :5])


# ---------------------------------------------------------------------- where, shape
def test_where_with_condition_list_or_tensor():
    # SINGA's where_helper: backward gives (dx, dy); the condition is no input of SINGA's op
    X = np.array([[1, 2], [3, 4]], np.float32)
    X2 = np.array([[9, 8], [7, 6]], np.float32)
    cond = [[True, False], [True, True]]
    want = np.where(cond, X, X2)
    for c in (cond, np.array(cond), tensor.from_numpy(np.array(cond, np.float32)),
              tensor.from_numpy(np.array(cond, np.int32)), tensor.from_numpy(np.array(cond))):
        y = autograd.where(tensor.from_numpy(X), tensor.from_numpy(X2), c)
        np.testing.assert_array_equal(tensor.to_numpy(y), want)
        dx1, dx2 = y.creator.backward(tensor.from_numpy(want).data)
        np.testing.assert_array_equal(_np(dx1), [[1, 0], [3, 4]])
        np.testing.assert_array_equal(_np(dx2), [[0, 8], [0, 0]])
    # a condition computed from data, broadcast against both operands, in graph mode
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4,))
    check_grad(lambda x, y: autograd.where(x, y, autograd.greater(x, y)), a, b)
    graph_matches_eager(lambda x, y: autograd.where(x, y, autograd.greater(x, y)),
                        a.astype(np.float32), b.astype(np.float32))


def test_shape_records_a_node_and_nothing_flows_back():
    # SINGA's _shape_helper: creator.backward(dy) gives dy's shape as a list of ints
    x = tensor.from_numpy(np.array([0.1, -1.0, 0.4, 4.0, -0.9, 9.0], np.float32).reshape(3, 2))
    y = autograd.shape(x)
    np.testing.assert_array_equal(tensor.to_numpy(y), [3, 2])
    assert y.creator.backward(np.ones((3, 2), np.float32)) == [3, 2]
    # the gradient through shape is zero: x's gradient comes from the value path alone
    w = tensor.Tensor((3, 2), requires_grad=True, stores_grad=True).set_value(2.0)
    scale = autograd.cast(autograd.reduce_sum(autograd.shape(w), keepdims=0), np.float32)
    loss = autograd.reduce_sum(autograd.mul(w, scale))
    (p, g), = autograd.backward(loss)
    assert p is w
    np.testing.assert_array_equal(g.data, np.full((3, 2), 5.0))
    graph_matches_eager(lambda v: autograd.mul(v, autograd.cast(autograd.shape(v),
                                                                np.float32)),
                        rng.standard_normal((3, 2)).astype(np.float32))


# ---------------------------------------------------------------------- refusals
def test_losses_refuse_wrong_ranks_with_assertion_errors():
    # SINGA's test_invalid_inputs asserts AssertionError; ours is a ShapeError as well
    _1d, _2d, _3d = tensor.Tensor((10,)), tensor.Tensor((10, 10)), tensor.Tensor((10, 10, 10))
    for fn, args in ((autograd.softmax_cross_entropy, (_2d, _3d)),
                     (autograd.softmax_cross_entropy, (_3d, _1d)),
                     (autograd.cross_entropy, (_2d, _3d)), (autograd.mse_loss, (_2d, _3d)),
                     (autograd.add_bias, (_2d, _1d, 3)), (autograd.ranking_loss, (_2d, _1d))):
        with pytest.raises(AssertionError):
            fn(*args)
        with pytest.raises(sg.ShapeError, match=fn.__name__):
            fn(*args)


def test_softmax_cross_entropy_reads_n_values_as_labels():
    # SINGA's CrossEntropy kernels treat a target of N values as class labels, any dtype
    x = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    want = tensor.to_numpy(autograd.softmax_cross_entropy(tensor.from_numpy(x),
                                                          tensor.from_numpy(labels)))
    for t in (labels.astype(np.int32).reshape(4, 1), labels.astype(np.float32),
              labels.astype(np.float32).reshape(4, 1), np.eye(3, dtype=np.int32)[labels]):
        got = autograd.softmax_cross_entropy(tensor.from_numpy(x), tensor.from_numpy(t))
        np.testing.assert_allclose(tensor.to_numpy(got), want, rtol=1e-6)


# ---------------------------------------------------------------------- optimizer states
def test_optimizer_states_use_singa_names():
    # SINGA's TestOptimizer.test_optimizer
    o1 = opt.Optimizer(0.1)
    o1.step()
    o1.step()
    assert o1.get_states()["step_counter"] == pytest.approx(2)
    o1.set_states({"step_counter": 5})
    np.testing.assert_array_equal(tensor.to_numpy(o1.step_counter), [5])
    # a schedule follows the restored step, as SINGA's lr(step_counter)
    sched = opt.SGD(lr=opt.ExponentialDecay(0.1, 2, 0.5, False))
    sched.set_states({"step_counter": 4})
    np.testing.assert_allclose(tensor.to_numpy(sched.lr_value), [0.1 * 0.5 ** 2])


@pytest.mark.parametrize("make, slots", [
    (lambda: opt.SGD(lr=0.1, momentum=0.9), ("moments",)),
    (lambda: opt.RMSProp(lr=0.01), ("running_average",)),
    (lambda: opt.AdaGrad(lr=0.01), ("history",)),
    (lambda: opt.Adam(lr=0.01), ("m", "v"))])
def test_optimizer_slots_round_trip(make, slots):
    g = tensor.from_numpy(rng.standard_normal(3).astype(np.float32))

    def param():
        return tensor.Tensor((3,), requires_grad=True, stores_grad=True, name="w").set_value(1.0)

    a, w = make(), param()
    for _ in range(2):
        a.apply("w", w, g)
        a.step()
    states = a.get_states()
    assert states["step_counter"] == 2.0
    for s in slots:
        assert set(states[s]) == {"w"} and isinstance(states[s]["w"], tensor.Tensor)
    b, w2 = make(), param()
    w2.copy_from_numpy(w.data)
    b.set_states(states)  # before b has made any state: kept until w's first update
    a.apply("w", w, g)
    b.apply("w", w2, g)
    np.testing.assert_array_equal(w2.data, w.data)
    with pytest.raises(KeyError, match="unknown state"):
        b.set_states({"momentum_buffers": {}})

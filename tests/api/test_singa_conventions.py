"""SINGA 3 conventions: comparisons, promotion, tensor functions, optimizer and device API,
loss shapes, aux states."""
import numpy as np
import pytest

import singa_graph as sg
from singa_graph import autograd, device, layer, opt, tensor
from helpers import check_grad

rng = np.random.default_rng(10)


def test_eq_compares_elementwise_and_tensors_stay_hashable():
    t = tensor.from_numpy(np.array([3.45, 1.0, 3.45], np.float32))
    np.testing.assert_array_equal((t == 3.45).data, [1, 0, 1])
    np.testing.assert_array_equal(tensor.eq(t, t).data, [1, 1, 1])
    u = tensor.from_numpy(np.array([3.45, 1.0, 3.45], np.float32))
    assert (t == u) is False and [u, t].index(t) == 1  # two Tensors: identity
    np.testing.assert_array_equal((t != 1.0).data, [1, 0, 1])
    assert (t == None) is False  # noqa: E711  (SINGA: comparing with None is False)
    assert {t: 1}[t] == 1


def test_int_tensor_with_python_float_gives_float32():
    i = tensor.from_numpy(np.array([1, 2, 3]))
    assert i.dtype == np.int32
    for y in (i + 0.5, 0.5 + i, i * 1.5, i - 0.5, i / 2.0):
        assert y.dtype == np.float32
    np.testing.assert_array_equal((i + 0.5).data, [1.5, 2.5, 3.5])
    assert (i + 1).dtype == np.int32


def test_average_ceil_repeat_einsum_tensordot():
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    t = tensor.from_numpy(a)
    avg = tensor.average(t)
    assert isinstance(avg, float) and avg == pytest.approx(a.mean(), rel=1e-6)
    np.testing.assert_allclose(tensor.average(t, 1).data, a.mean(1), rtol=1e-6)
    np.testing.assert_array_equal(tensor.ceil(t).data, np.ceil(a))
    np.testing.assert_array_equal(tensor.repeat(t, 2, 1).data, np.repeat(a, 2, 1))
    np.testing.assert_array_equal(tensor.repeat(t, 2).data, np.repeat(a, 2))
    b = rng.standard_normal((4, 3, 5)).astype(np.float32)
    tb = tensor.from_numpy(b)
    np.testing.assert_allclose(tensor.einsum("ijk,kjl->il", t, tb).data,
                               np.einsum("ijk,kjl->il", a, b), rtol=1e-5)
    np.testing.assert_allclose(tensor.tensordot(t, tb, ([1, 2], [1, 0])).data,
                               np.tensordot(a, b, ([1, 2], [1, 0])), rtol=1e-5)
    c = rng.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(tensor.tensordot(t, tensor.from_numpy(c), 1).data,
                               np.tensordot(a, c, 1), rtol=1e-5)
    check_grad(lambda x, y: tensor.tensordot(x, y, ([1, 2], [1, 0])),
               a.astype(np.float64), b.astype(np.float64))
    m = tensor.from_numpy(np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(tensor.sum_rows(m).data, [[2, 2, 2]])
    np.testing.assert_array_equal(tensor.sum_columns(m).data, [[3], [3]])
    tensor.add_row(2.0, tensor.from_numpy(np.arange(3.0)), 1.0, m)
    np.testing.assert_array_equal(m.data, [[1, 3, 5], [1, 3, 5]])


def test_losses_have_singa_shape():
    x = tensor.from_numpy(rng.standard_normal((4, 3)).astype(np.float32))
    t = tensor.from_numpy(np.array([0, 1, 2, 1]))
    for loss in (autograd.softmax_cross_entropy(x, t), autograd.mse_loss(x, x * 0.5),
                 autograd.cross_entropy(autograd.softmax(x), autograd.softmax(x * 2)),
                 autograd.ranking_loss(x, x * 0.5),
                 autograd.binary_cross_entropy(autograd.sigmoid(x), x * 0 + 1)):
        assert loss.shape == (1,)
        assert np.isfinite(tensor.to_numpy(loss)[0])  # SINGA's idiom


def test_optimizer_tensors_and_states():
    sched = opt.ExponentialDecay(0.1, 2, 0.5)
    sgd = opt.SGD(lr=sched, momentum=0.9)
    assert isinstance(sgd.step_counter, tensor.Tensor) and sgd.step_counter.shape == (1,)
    assert isinstance(sgd.lr_value, tensor.Tensor)
    lr_t = sched(sgd.step_counter)
    assert isinstance(lr_t, tensor.Tensor) and lr_t.data[0] == pytest.approx(0.1)
    w = tensor.Tensor((3,), requires_grad=True, stores_grad=True, name="w").set_value(1.0)
    g = tensor.from_numpy(np.full(3, 0.5, np.float32))
    sgd.apply("w", w, g)
    np.testing.assert_allclose(w.data, 1 - 0.1 * 0.5)
    sgd.step()
    sgd.step()
    assert int(sgd.step_counter) == 2 and sgd.lr_value.data[0] == pytest.approx(0.05)
    states = sgd.get_states()
    other = opt.SGD(lr=sched, momentum=0.9)
    w2 = tensor.Tensor((3,), requires_grad=True, stores_grad=True, name="w").set_value(1.0)
    other.set_states(states)
    other.apply("w", w2, g)
    assert int(other.step_counter) == 2
    sgd.apply("w", w, g)
    np.testing.assert_allclose(w2.data, w.data - (1 - 0.1 * 0.5) + 1.0)  # same momentum step


def test_device_api():
    dev = device.create_cpu_device()
    assert dev.id() == 0 and dev.id == 0
    dev.EnableGraph(False)
    assert not dev.graph_enabled()
    dev.EnableGraph(True)
    dev.ResetGraph()
    dev.RunGraph()
    dev.Sync()
    dev.SetVerbosity(2)
    dev.PrintTimeProfiling()


def test_load_states_returns_aux_tensors(tmp_path):
    from singa_graph import model

    class M(model.Model):
        def __init__(self):
            super().__init__()
            self.fc = layer.Linear(2)

        def forward(self, x):
            return self.fc(x)

    m = M()
    m.compile([np.zeros((1, 3), np.float32)], is_train=False, use_graph=False)
    path = str(tmp_path / "c.zip")
    m.save_states(path, aux_states={"epoch": 3, "hist": np.arange(3.0)})
    aux = M()
    aux.compile([np.zeros((1, 3), np.float32)], is_train=False, use_graph=False)
    got = aux.load_states(path)
    assert all(isinstance(v, tensor.Tensor) for v in got.values())
    assert int(got["epoch"]) == 3
    np.testing.assert_array_equal(tensor.to_numpy(got["hist"]), np.arange(3.0))


def test_tensor_functions_graph_mode_and_errors():
    from helpers import graph_matches_eager
    from singa_graph.errors import ShapeError
    from singa_graph.ir import Placeholder, building

    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 3, 5)).astype(np.float32)
    # tensordot and ceil are ops: they compile, and the plan agrees with eager bit for bit
    graph_matches_eager(lambda x, y: tensor.tensordot(x, y, ([1, 2], [1, 0])), a, b)
    graph_matches_eager(lambda x: tensor.ceil(x), a * 3, grad=False)
    with pytest.raises(ShapeError, match="tensordot"):
        tensor.tensordot(tensor.from_numpy(a), tensor.from_numpy(b), ([1], [1, 0]))
    with pytest.raises(ShapeError, match="differ in size"):
        tensor.tensordot(tensor.from_numpy(a), tensor.from_numpy(b), ([2], [2]))
    # einsum and repeat compute on data, as SINGA's: a symbolic tensor is refused clearly
    with building():
        x = Placeholder((2, 3, 4))
    with pytest.raises(ValueError, match="symbolic"):
        tensor.einsum("ijk->k", x)
    with pytest.raises(ValueError, match="symbolic"):
        tensor.repeat(x, 2)
    with pytest.raises(ValueError, match="repeats should be an int"):
        tensor.repeat(tensor.from_numpy(a), [1, 2])

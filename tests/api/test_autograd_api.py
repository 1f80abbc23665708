"""singa_graph.autograd: SINGA's functional API in eager mode (the seed documents' code runs
verbatim in test_seeds.py)."""
import importlib.util
import sys

import numpy as np
import pytest

from singa_graph import autograd, data, layer, tensor
from singa_graph.ir import Placeholder
from singa_graph.random import seed
from singa_graph.tensor import Tensor

rng = np.random.default_rng(0)
needs_sklearn = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                   reason="scikit-learn is not installed")


@pytest.fixture(autouse=True)
def restore_training():
    old = autograd.training
    yield
    autograd.training = old


def test_int32_one_hot_targets_match_float_ones():
    """SINGA's examples/mlp casts its one-hot targets to int32; the loss and the gradient are
    those of the float targets."""
    logits = rng.standard_normal((6, 3)).astype(np.float32)
    onehot = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 6)]
    res = []
    for t in (onehot, onehot.astype(np.int32)):
        x = Tensor(data=logits.copy(), requires_grad=True, stores_grad=True)
        loss = autograd.softmax_cross_entropy(x, Tensor(data=t, requires_grad=False))
        (g,) = [g.data for _, g in autograd.backward(loss)]
        res.append((loss.data.item(), g))
    assert res[0][0] == pytest.approx(res[1][0], rel=1e-6)
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-6)


def test_eager_mlp_training_on_digits_with_layers():
    seed(0)
    pytest.importorskip("sklearn")
    xtr, ytr, _, _ = data.load_digits()
    xtr = xtr.reshape(len(xtr), -1)
    l1, l2, l3 = layer.Linear(64), layer.Linear(32), layer.Linear(10)
    autograd.training = True
    epoch_loss = []
    for epoch in range(3):
        tot = []
        for xb, yb in data.iterate_minibatches(xtr, ytr, 32, seed=epoch):
            y = l3(autograd.relu(l2(autograd.relu(l1(tensor.from_numpy(xb))))))
            loss = autograd.softmax_cross_entropy(y, tensor.from_numpy(yb))
            for p, g in autograd.backward(loss):
                p.data -= 0.1 * g.data
            tot.append(loss.data.item())
        epoch_loss.append(np.mean(tot))
    assert epoch_loss[-1] < 0.5 * epoch_loss[0]


def test_backward_is_layerwise_and_gradients_match_numpy():
    x = rng.standard_normal((4, 3)).astype(np.float32)
    l1, l2 = layer.Linear(5), layer.Linear(2)
    out = l2(autograd.relu(l1(tensor.from_numpy(x))))
    loss = autograd.mse_loss(out, tensor.from_numpy(np.zeros((4, 2), np.float32)))
    order = [p for p, _ in autograd.backward(loss)]
    assert order[0] in (l2.W, l2.b) and order[-1] in (l1.W, l1.b)  # last layer first
    grads = autograd.gradients(autograd.mse_loss(l2(autograd.relu(l1(tensor.from_numpy(x)))),
                                                 tensor.from_numpy(np.zeros((4, 2), np.float32))))
    h = np.maximum(x @ l1.W.data + l1.b.data, 0)
    o = h @ l2.W.data + l2.b.data
    # SINGA's mse_loss (>= 3.1): mean((x - t)^2)  ->  d/do = 2 (o - t) / size
    do = 2 * o / o.size
    np.testing.assert_allclose(grads[l2.W].data, h.T @ do, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads[l2.b].data, do.sum(0), rtol=1e-4, atol=1e-6)


def test_functional_helpers():
    a = tensor.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    b = tensor.from_numpy(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
    np.testing.assert_allclose(autograd.sum(a, b, b).data, a.data + 2 * b.data)
    np.testing.assert_allclose(autograd.mean(a, b).data, (a.data + b.data) / 2)
    np.testing.assert_allclose(autograd.reduce_sum(a, (1,)).data, [[3], [7]])
    np.testing.assert_allclose(autograd.reduce_mean(a, None, 0).data, 2.5)
    np.testing.assert_allclose(autograd.transpose(a, (1, 0)).data, a.data.T)
    np.testing.assert_allclose(autograd.cat([a, b], 0).data, np.concatenate([a.data, b.data]))
    p, q = autograd.split(a, 1, [1, 1])
    np.testing.assert_allclose(q.data, [[2], [4]])
    np.testing.assert_allclose(autograd.add_bias(a, tensor.from_numpy(np.array([[1.0, 2.0]],
                                                                                 np.float32))).data,
                               [[2, 4], [4, 6]])
    np.testing.assert_allclose(autograd.add_bias(a, tensor.from_numpy(np.array([1.0, 2.0],
                                                                                np.float32)),
                                                 axis=1).data, [[2, 3], [5, 6]])
    np.testing.assert_allclose(autograd.softmax(a).data.sum(1), [1, 1], rtol=1e-6)
    np.testing.assert_allclose(autograd.gemm(a, b, None, 2.0).data, 2 * a.data)
    assert autograd.Operator is autograd.Operation
    assert autograd.Linear is layer.Linear and autograd.Layer is layer.Layer


def test_training_flag_controls_dropout_defaults():
    x = tensor.from_numpy(np.ones((50, 50), np.float32))
    autograd.training = False
    np.testing.assert_array_equal(autograd.dropout(x).data, x.data)
    from singa_graph.ops import dropout as op_dropout

    np.testing.assert_array_equal(op_dropout(x).data, x.data)  # the op's default follows
    autograd.training = True
    assert (autograd.dropout(x, ratio=0.5).data == 0).any()
    assert sys.modules["singa_graph.ops.dropout"].training is True


def test_graph_mode_functional_ops_on_placeholders():
    x = Placeholder((8, 1, 8, 8))
    w = Tensor(shape=(4, 1, 3, 3), requires_grad=True, stores_grad=True)
    y = autograd.conv2d(x, w, padding=1)
    y = autograd.max_pool2d(autograd.relu(y), 2)
    y = autograd.globalaveragepool(y)
    assert y.shape == (8, 4, 1, 1) and y.data is None

"""singa_graph.autograd: SINGA's functional API in eager mode, and the code examples of the
SINGA docs (seeds 002/003) with only their imports changed (``singa`` -> ``singa_graph``).
Where a seed calls ``opt.SGD``, the update is done by hand (``p.data -= lr * g.data``)."""
import importlib.util
import sys

import numpy as np
import pytest

from singa_graph import autograd, data, device, layer, tensor
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


class ManualSGD:
    """Stands in for ``opt.SGD`` in the seeds: plain ``p -= lr * g`` on the data."""

    def __init__(self, lr):
        self.lr = lr

    def update(self, p, g):
        p.data -= self.lr * g.data


def mlp_data(n=400):
    """The data of SINGA's examples/mlp: points above/below the line y = 5x + 1."""
    r = np.random.default_rng(0)
    x = r.uniform(-1, 1, n)
    y = 5 * x + 1 + 2 * r.standard_normal(n)
    label = (5 * x + 1 > y).astype(np.int64)
    onehot = np.zeros((n, 2), np.float32)
    onehot[np.arange(n), label] = 1
    return np.stack([x, y], 1).astype(np.float32), onehot


# ---------------------------------------------------------------------- seed 002: operations
def run_operation_only_mlp(data, label, iterations=10):
    """Seed 002 "only operations" MLP, verbatim but for ``sgd`` and the loss record."""
    w0 = Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)
    w0.gaussian(0.0, 0.1)
    b0 = Tensor(shape=(1, 3), requires_grad=True, stores_grad=True)
    b0.set_value(0.0)

    w1 = Tensor(shape=(3, 2), requires_grad=True, stores_grad=True)
    w1.gaussian(0.0, 0.1)
    b1 = Tensor(shape=(1, 2), requires_grad=True, stores_grad=True)
    b1.set_value(0.0)

    inputs = Tensor(data=data)  # data matrix
    target = Tensor(data=label) # label vector
    autograd.training = True    # for training
    sgd = ManualSGD(0.05)   # optimizer  (seed: opt.SGD(0.05))

    losses = []
    for i in range(iterations):
        x = autograd.matmul(inputs, w0) # matrix multiplication
        x = autograd.add_bias(x, b0)    # add the bias vector
        x = autograd.relu(x)            # ReLU activation operation

        x = autograd.matmul(x, w1)
        x = autograd.add_bias(x, b1)

        loss = autograd.softmax_cross_entropy(x, target)

        for p, g in autograd.backward(loss):
            sgd.update(p, g)
        losses.append(float(tensor.to_numpy(loss)))
    return losses, (w0, b0, w1, b1)


def test_seed_operation_only_mlp_loss_falls():
    seed(0)
    data_, label = mlp_data()
    losses, params = run_operation_only_mlp(data_, label, iterations=300)
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.8 * losses[0] and losses[-1] < losses[len(losses) // 2]
    assert params[1].shape == (1, 3)  # the (1, n) biases keep their shape


def test_seed_operation_only_mlp_int32_one_hot_targets():
    """SINGA's examples/mlp casts the one-hot targets to int32; that works as well."""
    seed(0)
    data_, label = mlp_data()
    f, _ = run_operation_only_mlp(data_, label, iterations=5)
    seed(0)
    i, _ = run_operation_only_mlp(data_, label.astype(np.int32), iterations=5)
    np.testing.assert_allclose(f, i, rtol=1e-6)


@pytest.mark.skipif("singa_graph.opt" not in sys.modules
                    and importlib.util.find_spec("singa_graph.opt") is None,
                    reason="singa_graph.opt is not written yet")
def test_seed_operation_only_mlp_with_opt_sgd():
    from singa_graph import opt

    seed(0)
    data_, label = mlp_data()
    w0 = Tensor(shape=(2, 3), requires_grad=True, stores_grad=True)
    w0.gaussian(0.0, 0.1)
    b0 = Tensor(shape=(1, 3), requires_grad=True, stores_grad=True)
    b0.set_value(0.0)
    w1 = Tensor(shape=(3, 2), requires_grad=True, stores_grad=True)
    w1.gaussian(0.0, 0.1)
    b1 = Tensor(shape=(1, 2), requires_grad=True, stores_grad=True)
    b1.set_value(0.0)
    inputs = Tensor(data=data_)
    target = Tensor(data=label)
    autograd.training = True
    sgd = opt.SGD(0.05)
    losses = []
    for i in range(300):
        x = autograd.matmul(inputs, w0)
        x = autograd.add_bias(x, b0)
        x = autograd.relu(x)
        x = autograd.matmul(x, w1)
        x = autograd.add_bias(x, b1)
        loss = autograd.softmax_cross_entropy(x, target)
        for p, g in autograd.backward(loss):
            sgd.update(p, g)
        losses.append(float(tensor.to_numpy(loss)))
    assert losses[-1] < 0.8 * losses[0]
    seed(0)
    manual, _ = run_operation_only_mlp(data_, label, iterations=300)
    np.testing.assert_allclose(losses, manual, rtol=1e-4)  # plain SGD = the manual update


# ---------------------------------------------------------------------- seed 002: layers (CNN)
@needs_sklearn
def test_seed_cnn_with_autograd_layers():
    """Seed 002 "Operation and Layer" CNN on 28x28 digits, verbatim forward and loop."""
    seed(0)
    x_train, y_train, _, _ = data.load_digits(pad_to=28, mode="nearest")
    dev = device.create_cpu_device()
    sgd = ManualSGD(0.002)

    conv1 = autograd.Conv2d(1, 32, 3, padding=1, bias=False)
    bn1 = autograd.BatchNorm2d(32)
    pooling1 = autograd.MaxPool2d(3, 1, padding=1)
    conv21 = autograd.Conv2d(32, 16, 3, padding=1)
    conv22 = autograd.Conv2d(32, 16, 3, padding=1)
    bn2 = autograd.BatchNorm2d(32)
    linear = autograd.Linear(32 * 28 * 28, 10)
    pooling2 = autograd.AvgPool2d(3, 1, padding=1)

    def forward(x, t):
        # x is the input data (a batch of images)
        # t is the label vector (a batch of integers)
        y = conv1(x)           # Conv layer
        y = autograd.relu(y)   # ReLU operation
        y = bn1(y)             # BN layer
        y = pooling1(y)        # Pooling Layer

        # two parallel convolution layers
        y1 = conv21(y)
        y2 = conv22(y)
        y = autograd.cat((y1, y2), 1)  # cat operation
        y = autograd.relu(y)           # ReLU operation
        y = bn2(y)
        y = pooling2(y)

        y = autograd.flatten(y)        # flatten operation
        y = linear(y)                  # Linear layer
        loss = autograd.softmax_cross_entropy(y, t)  # operation
        return loss, y

    epochs, batch_number, batch_sz = 4, 1, 16  # one batch, seen 4 times: the loss must fall
    losses = []
    autograd.training = True
    for epoch in range(epochs):
        for i in range(batch_number):
            inputs = tensor.Tensor(device=dev, data=x_train[
                                   i * batch_sz:(1 + i) * batch_sz], stores_grad=False)
            targets = tensor.Tensor(device=dev, data=y_train[
                                    i * batch_sz:(1 + i) * batch_sz], requires_grad=False, stores_grad=False)

            loss, y = forward(inputs, targets) # forward the net

            for p, gp in autograd.backward(loss):  # auto backward
                sgd.update(p, gp)
            losses.append(float(tensor.to_numpy(loss)))
    assert y.shape == (16, 10)
    assert np.isfinite(losses).all() and (np.diff(losses) < 0).all()
    assert losses[-1] < 0.5 * losses[0]
    assert bn1.running_mean.data.any()  # training mode updated the running statistics


# ---------------------------------------------------------------------- seed 003: Xception
class Block(autograd.Layer):

    def __init__(self, in_filters, out_filters, reps, strides=1, padding=0, start_with_relu=True, grow_first=True):
        super(Block, self).__init__()

        if out_filters != in_filters or strides != 1:
            self.skip = autograd.Conv2d(in_filters, out_filters,
                                        1, stride=strides, padding=padding, bias=False)
            self.skipbn = autograd.BatchNorm2d(out_filters)
        else:
            self.skip = None

        self.layers = []

        filters = in_filters
        if grow_first:
            self.layers.append(autograd.ReLU())
            self.layers.append(autograd.SeparableConv2d(in_filters, out_filters,
                                                        3, stride=1, padding=1, bias=False))
            self.layers.append(autograd.BatchNorm2d(out_filters))
            filters = out_filters

        for i in range(reps - 1):
            self.layers.append(autograd.ReLU())
            self.layers.append(autograd.SeparableConv2d(filters, filters,
                                                        3, stride=1, padding=1, bias=False))
            self.layers.append(autograd.BatchNorm2d(filters))

        if not grow_first:
            self.layers.append(autograd.ReLU())
            self.layers.append(autograd.SeparableConv2d(in_filters, out_filters,
                                                        3, stride=1, padding=1, bias=False))
            self.layers.append(autograd.BatchNorm2d(out_filters))

        if not start_with_relu:
            self.layers = self.layers[1:]
        else:
            self.layers[0] = autograd.ReLU()

        if strides != 1:
            self.layers.append(autograd.MaxPool2d(3, strides, padding + 1))

    def __call__(self, x):
        y = self.layers[0](x)
        for layer in self.layers[1:]:
            if isinstance(y, tuple):
                y = y[0]
            y = layer(y)

        if self.skip is not None:
            skip = self.skip(x)
            skip = self.skipbn(skip)
        else:
            skip = x
        y = autograd.add(y, skip)
        return y


class Xception(autograd.Layer):
    """
    Xception optimized for the ImageNet dataset, as specified in
    https://arxiv.org/pdf/1610.02357.pdf
    """

    def __init__(self, num_classes=1000):
        """ Constructor
        Args:
            num_classes: number of classes
        """
        super(Xception, self).__init__()
        self.num_classes = num_classes

        self.conv1 = autograd.Conv2d(3, 32, 3, 2, 0, bias=False)
        self.bn1 = autograd.BatchNorm2d(32)

        self.conv2 = autograd.Conv2d(32, 64, 3, 1, 1, bias=False)
        self.bn2 = autograd.BatchNorm2d(64)

        self.block1 = Block(
            64, 128, 2, 2, padding=0, start_with_relu=False, grow_first=True)
        self.block2 = Block(
            128, 256, 2, 2, padding=0, start_with_relu=True, grow_first=True)
        self.block3 = Block(
            256, 728, 2, 2, padding=0, start_with_relu=True, grow_first=True)

        self.block4 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block5 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block6 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block7 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)

        self.block8 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block9 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block10 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)
        self.block11 = Block(
            728, 728, 3, 1, start_with_relu=True, grow_first=True)

        self.block12 = Block(
            728, 1024, 2, 2, start_with_relu=True, grow_first=False)

        self.conv3 = autograd.SeparableConv2d(1024, 1536, 3, 1, 1)
        self.bn3 = autograd.BatchNorm2d(1536)

        # do relu here
        self.conv4 = autograd.SeparableConv2d(1536, 2048, 3, 1, 1)
        self.bn4 = autograd.BatchNorm2d(2048)

        self.globalpooling = autograd.MaxPool2d(10, 1)
        self.fc = autograd.Linear(2048, num_classes)

    def features(self, input):
        x = self.conv1(input)
        x = self.bn1(x)
        x = autograd.relu(x)

        x = self.conv2(x)
        x = self.bn2(x)
        x = autograd.relu(x)

        x = self.block1(x)
        x = self.block2(x)
        x = self.block3(x)
        x = self.block4(x)
        x = self.block5(x)
        x = self.block6(x)
        x = self.block7(x)
        x = self.block8(x)
        x = self.block9(x)
        x = self.block10(x)
        x = self.block11(x)
        x = self.block12(x)

        x = self.conv3(x)
        x = self.bn3(x)
        x = autograd.relu(x)

        x = self.conv4(x)
        x = self.bn4(x)
        return x

    def logits(self, features):
        x = autograd.relu(features)
        x = self.globalpooling(x)
        x = autograd.flatten(x)
        x = self.fc(x)
        return x

    def __call__(self, input):
        x = self.features(input)
        x = self.logits(x)
        return x


def test_seed_xception_block_eager_train_step():
    seed(0)
    autograd.training = True
    blk = Block(4, 8, 2, 2, padding=0, start_with_relu=False, grow_first=True)
    x = tensor.from_numpy(rng.standard_normal((2, 4, 9, 9)).astype(np.float32))
    y = blk(x)
    assert y.shape == (2, 8, 5, 5)
    loss = autograd.mse_loss(autograd.flatten(y), tensor.from_numpy(np.zeros((2, 200), np.float32)))
    names = {id(p): n for n, p in blk.get_params().items()}
    got = [names[id(p)] for p, g in autograd.backward(loss)]
    assert sorted(got) == sorted(names.values())  # every parameter exactly once
    assert "skip.W" in got and "layers.0.depthwise_conv.W" in got
    assert "layers.4.running_mean" in blk.get_states()


def test_seed_xception_builds_on_placeholder():
    """The full Xception of seed 003 initialises and infers every shape from a symbolic
    299x299 input, without computing anything."""
    seed(0)
    model = Xception(num_classes=1000)
    x = model(Placeholder((2, 3, 299, 299)))
    assert x.shape == (2, 1000) and x.data is None
    params = model.get_params()
    assert len(params) == 156
    assert sum(p.size for p in params.values()) == 22855952
    assert params["block12.layers.1.depthwise_conv.W"].shape == (728, 1, 3, 3)
    assert params["fc.W"].shape == (2048, 1000)
    assert all(p.data is not None for p in params.values())


# ---------------------------------------------------------------------- functional API
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
            tot.append(float(loss.data))
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
    # SINGA's mse_loss: sum((x - t)^2) / (2 N)  ->  d/do = (o - t) / N
    do = o / 4
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

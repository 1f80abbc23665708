"""Eager mode end to end: the backward generator's order, and real training on a fixed batch."""
import numpy as np

import singa_graph as sg
from singa_graph import autograd, layer, opt, random
from singa_graph.ir import bindings
from singa_graph.runtime import registry


def _mlp(x, params):
    (w1, b1), (w2, b2), (w3, b3) = params
    h = autograd.relu(autograd.add_bias(autograd.matmul(x, w1), b1))
    h = autograd.relu(autograd.add_bias(autograd.matmul(h, w2), b2))
    return autograd.add_bias(autograd.matmul(h, w3), b3)


def _params(sizes, rng):
    return [(sg.Parameter(data=(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)),
             sg.Parameter(data=np.zeros(b, np.float32))) for a, b in zip(sizes, sizes[1:])]


def test_backward_yields_each_param_once_and_early(monkeypatch):
    rng = np.random.default_rng(0)
    params = _params([8, 16, 16, 4], rng)
    x = sg.Tensor(data=rng.standard_normal((5, 8)).astype(np.float32), requires_grad=False)
    y = sg.Tensor(data=rng.integers(0, 4, 5).astype(np.int32), requires_grad=False)
    loss = autograd.softmax_cross_entropy(_mlp(x, params), y)

    ran = []
    real = registry.run_eager
    monkeypatch.setattr(bindings, "run_eager",
                        lambda op, ins, outs: (ran.append((op.type, [t.data for t in ins])),
                                               real(op, ins, outs))[1])
    # Operation.__call__ runs kernels through the IR's bindings, so the patch sees every run

    gen = autograd.backward(loss)
    first_p, first_g = next(gen)
    # the first gradient is the last layer's, and layer 1's weight gradient
    # (a MatMul that reads the input x) has not run yet
    assert ran, "the first gradient was computed by kernels"
    assert first_p is params[2][1] or first_p is params[2][0]
    assert not any(t == "MatMul" and any(a is x.data for a in ins) for t, ins in ran)
    rest = list(gen)
    got = [first_p] + [p for p, _ in rest]
    want = [p for pair in params for p in pair]
    assert sorted(map(id, got)) == sorted(map(id, want)), "every parameter exactly once"
    assert any(t == "MatMul" and any(a is x.data for a in ins) for t, ins in ran)
    assert first_g.shape == first_p.shape


def _train(model_fn, x, y, steps, lr):
    random.seed(0)
    sgd = opt.SGD(lr=lr, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = model_fn(x, y)
        sgd(loss)
        losses.append(loss.data.item())
    return losses


def test_mlp_eager_training_loss_falls_90_percent():
    from singa_graph.data import load_digits

    xtr, ytr, _, _ = load_digits()
    x = sg.Tensor(data=xtr[:64].reshape(64, -1), requires_grad=False)
    y = sg.Tensor(data=ytr[:64], requires_grad=False)
    random.seed(0)
    params = _params([64, 64, 64, 10], np.random.default_rng(0))
    losses = _train(lambda a, b: autograd.softmax_cross_entropy(_mlp(a, params), b), x, y,
                    200, 0.05)
    assert losses[-1] <= 0.1 * losses[0], (losses[0], losses[-1])


def test_small_cnn_eager_training_loss_falls_90_percent():
    from singa_graph.data import load_digits

    xtr, ytr, _, _ = load_digits()
    x = sg.Tensor(data=xtr[:32], requires_grad=False)
    y = sg.Tensor(data=ytr[:32], requires_grad=False)
    random.seed(0)
    autograd.training = True
    conv1, conv2 = layer.Conv2d(8, 3, padding=1), layer.Conv2d(16, 3, padding=1)
    pool, relu, flat, fc = layer.MaxPool2d(2, 2), layer.ReLU(), layer.Flatten(), layer.Linear(10)
    ce = layer.SoftMaxCrossEntropy()

    def net(a, b):
        h = pool(relu(conv1(a)))
        h = pool(relu(conv2(h)))
        return ce(fc(flat(h)), b)

    losses = _train(net, x, y, 200, 0.05)
    assert losses[-1] <= 0.1 * losses[0], (losses[0], losses[-1])

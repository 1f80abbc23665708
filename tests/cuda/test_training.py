"""Models train on the CUDA device as on the CPU: the same graph, schedule and memory plan,
the same losses step after step (graph and eager mode), parameters and optimizer state that
stay on the device, and checkpoints that move between devices."""
import numpy as np
import pytest

from singa_graph import opt, random as sg_random, tensor, zoo
from singa_graph.passes.verify import verify


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.integers(0, 10, shape[0]).astype(np.int32))


def _train(make, shape, dev, steps=3, graph=True, optimizer=None):
    sg_random.seed(0)
    m = make()
    m.set_optimizer(optimizer() if optimizer else opt.SGD(lr=0.05, momentum=0.9))
    x0 = tensor.Tensor(shape, dev) if dev is not None else np.zeros(shape, np.float32)
    m.compile([x0], is_train=True, use_graph=graph)
    losses = []
    x, y = _data(shape)
    for _ in range(steps):  # one batch again and again: the loss must fall
        out, loss = m(x, y)
        losses.append(float(loss.to_numpy()[0]))
    return m, np.array(losses)


MODELS = {
    "mlp": (lambda: zoo.MLP(hidden=(16,), num_classes=10), (4, 12)),
    "cnn": (lambda: zoo.CNN(channels=(2, 3)), (2, 1, 8, 8)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_three_training_steps_match_the_cpu(name, gpu):
    make, shape = MODELS[name]
    cpu, ref = _train(make, shape, None)
    cuda, got = _train(make, shape, gpu)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0]
    pc, pg = cpu.last_plan, cuda.last_plan
    assert [n.type for n in pc.nodes] == [n.type for n in pg.nodes]  # the same schedule

    def lifetimes(plan):  # every transient buffer's (bytes, first, last step); workspace
        return sorted((n, a, b) for k, _, n, a, b in plan.memory.buffers()  # is per device
                      if not (isinstance(k, tuple) and k[0] == "workspace"))
    assert lifetimes(pc) == lifetimes(pg)
    if not pc.memory.workspace and not pg.memory.workspace:
        assert pc.memory.arena_bytes == pg.memory.arena_bytes
    verify(pg)
    for (k, p), q in zip(cuda.get_params().items(), cpu.get_params().values()):
        assert gpu.is_array(p.data), f"{k} left the device"
        np.testing.assert_allclose(p.to_numpy(), q.to_numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=k)
    for t in cuda.optimizer.state_tensors().values():
        assert gpu.is_array(t.data)


def test_eager_training_on_the_device_matches_the_cpu(gpu):
    make, shape = MODELS["cnn"]
    _, ref = _train(make, shape, None, graph=False)
    _, got = _train(make, shape, gpu, graph=False)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", [lambda: opt.Adam(lr=0.01),
                                       lambda: opt.RMSProp(lr=0.01),
                                       lambda: opt.AdaGrad(lr=0.05)],
                         ids=["adam", "rmsprop", "adagrad"])
def test_every_optimizer_updates_on_the_device(optimizer, gpu):
    make, shape = MODELS["mlp"]
    _, ref = _train(make, shape, None, optimizer=optimizer)
    _, got = _train(make, shape, gpu, optimizer=optimizer)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_learning_rate_change_reaches_the_device_plan(gpu):
    make, shape = MODELS["mlp"]
    runs = []
    for dev in (None, gpu):
        sg_random.seed(0)
        m = make()
        sgd = opt.SGD(lr=0.05, momentum=0.9)
        m.set_optimizer(sgd)
        m.compile([tensor.Tensor(shape, dev) if dev else np.zeros(shape, np.float32)],
                  is_train=True, use_graph=True)
        x, y = _data(shape)
        m(x, y)
        sgd.lr = 0.5  # no recompilation: the plan reads the device copy of lr
        m(x, y)
        runs.append(m.get_params())
    for (k, a), b in zip(runs[0].items(), runs[1].values()):
        np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=k)


def test_checkpoint_saved_on_the_device_loads_on_the_cpu(gpu, tmp_path):
    make, shape = MODELS["mlp"]
    cuda, _ = _train(make, shape, gpu, steps=2)
    path = tmp_path / "ckpt.zip"
    cuda.save_states(str(path))
    cpu, _ = _train(make, shape, None, steps=1)
    cpu.load_states(str(path))
    for (k, a), b in zip(cuda.get_params().items(), cpu.get_params().values()):
        np.testing.assert_array_equal(b.to_numpy(), a.to_numpy(), err_msg=k)
    x, y = _data(shape, seed=9)
    np.testing.assert_allclose(cpu(x, y)[1].to_numpy(), cuda(x, y)[1].to_numpy(),
                               rtol=1e-4, atol=1e-5)

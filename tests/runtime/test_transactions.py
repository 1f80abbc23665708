"""A training step that fails changes nothing: feeds are checked before the first step (label
ranges, empty batches, integers that would wrap), eager steps undo what they wrote, and a
plan that fails after writing state says so. Every check compares all parameters, buffers
and optimizer state bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops, opt
from singa_graph.errors import FeedError, GraphError, StateUndefinedError
from singa_graph.ir import Graph, Placeholder
from singa_graph.ir.op import building
from singa_graph.ops.loss import CrossEntropyGrad
from singa_graph.passes import compile
from singa_graph.passes.autodiff import backward
from state_helpers import CLASSES, assert_same, batch, make_net, snapshot

MODES = [(True, "sequential"), (True, "topological"), (True, "memory"), (False, "memory")]
IDS = ["graph-sequential", "graph-topological", "graph-memory", "eager"]


def _trained(use_graph, schedule, **kw):
    m = make_net(use_graph, schedule, **kw)
    m(*batch(1))  # optimizer state and running statistics exist and are non-trivial
    return m


@pytest.mark.parametrize("use_graph,schedule", MODES, ids=IDS)
def test_label_out_of_range_raises_before_batchnorm_updates(use_graph, schedule):
    m = _trained(use_graph, schedule)
    before = snapshot(m)
    x, y = batch(2)
    for bad in (CLASSES, -1):
        y2 = y.copy()
        y2[2] = bad
        with pytest.raises(FeedError, match="out of range"):
            m(x, y2)
        assert_same(snapshot(m), before, f"label {bad}")
    m(x, y)  # and the model still trains
    assert m.optimizer.step_counter == before["hyper0/step_counter"] + 1


@pytest.mark.parametrize("use_graph", [True, False], ids=["graph", "eager"])
def test_empty_batch_is_refused(use_graph):
    m = _trained(use_graph, "memory")
    before = snapshot(m)
    x, y = batch(2)
    with pytest.raises(FeedError, match="empty"):
        m(x[:0], y[:0])
    assert_same(snapshot(m), before)
    assert len(m.plans) == (1 if use_graph else 0), "no plan compiled for batch 0"


def test_int64_labels_that_would_wrap_are_refused():
    m = _trained(True, "memory")  # compiled with int32 labels
    before = snapshot(m)
    x, y = batch(2)
    y64 = y.astype(np.int64)
    y64[0] = 2 ** 32 + 3  # int32 would make this class 3
    with pytest.raises(FeedError, match="wrap"):
        m(x, y64)
    assert_same(snapshot(m), before)
    m(x, y.astype(np.int64))  # int64 labels that fit are fine


def test_eager_ops_check_labels_before_the_kernel():
    x = sg.Tensor(data=np.zeros((2, 3), np.float32))
    with pytest.raises(FeedError, match=r"label 3, out of range \[0, 3\)"):
        ops.softmax_cross_entropy(x, sg.Tensor(data=np.array([0, 3]), requires_grad=False))


def test_plan_checks_labels_fed_through_a_reshape():
    x, y = Placeholder((2, 3), name="x"), Placeholder((2, 1), "int32", name="y")
    loss = ops.softmax_cross_entropy(x, ops.reshape(y, (2,)))
    plan = compile(Graph([loss], inputs=[x, y]))
    plan.run([np.zeros((2, 3)), np.array([[0], [2]])])
    with pytest.raises(FeedError, match="feed for y"):
        plan.run([np.zeros((2, 3)), np.array([[0], [3]])])


def _poisoned_step(plan, index):
    def fail():
        raise RuntimeError("kernel failure")

    plan.steps[index] = fail


def test_failure_before_any_state_is_written_changes_nothing():
    m = _trained(True, "memory")
    x, y = batch(2)
    plan = m.plan_for(x, y)
    before = snapshot(m)
    _poisoned_step(plan, plan._first_mutation)  # runs nothing that writes state
    with pytest.raises(RuntimeError, match="kernel failure"):
        m(x, y)
    assert_same(snapshot(m), before)


def test_failure_after_state_was_written_says_state_is_undefined():
    m = _trained(True, "memory")
    x, y = batch(2)
    plan = m.plan_for(x, y)
    _poisoned_step(plan, len(plan.steps) - 1)
    with pytest.raises(StateUndefinedError, match="undefined"):
        m(x, y)


def test_eager_step_failing_midway_restores_everything(monkeypatch):
    m = _trained(False, "memory", optimizer=lambda: opt.Adam(lr=0.01))
    before = snapshot(m)
    calls = []
    real = type(m.optimizer).update

    def update_then_fail(self, p, g):  # the second parameter update fails
        calls.append(p.name)
        if len(calls) == 2:
            raise RuntimeError("update failure")
        return real(self, p, g)

    monkeypatch.setattr(type(m.optimizer), "update", update_then_fail)
    with pytest.raises(RuntimeError, match="update failure"):
        m(*batch(2))
    assert_same(snapshot(m), before)


def test_optimizer_hyperparameters_are_checked_before_any_step():
    with pytest.raises(ValueError, match="beta_1"):
        opt.Adam(beta_1=1.0)
    m = _trained(True, "memory", optimizer=lambda: opt.Adam(lr=0.01))
    before = snapshot(m)
    with pytest.raises(ValueError, match="beta_1"):
        m.optimizer.beta_1 = 1.0
    assert_same(snapshot(m), before)


# ---------------------------------------------------------------------------- plan API
def _plan():
    x = Placeholder((2, 2), name="x")
    return compile(Graph([ops.relu(x)], inputs=[x]))


def test_run_none_means_no_feeds():
    with pytest.raises(GraphError, match=r"plan takes 1 inputs \(x\), got 0"):
        _plan().run(None)
    c = sg.Tensor(data=np.ones((2, 2), np.float32), requires_grad=False)
    with building():
        y = ops.relu(c)
    np.testing.assert_array_equal(compile(Graph([y], inputs=[])).run(None)[0], np.ones((2, 2)))


def test_placeholders_with_the_same_name():
    a, b = Placeholder((2,), name="x"), Placeholder((2,), name="x")
    plan = compile(Graph([ops.sub(a, b)], inputs=[a, b]))
    one, two = np.ones(2, np.float32), np.full(2, 2, np.float32)
    np.testing.assert_array_equal(plan.run({a: one, b: two})[0], -one)
    np.testing.assert_array_equal(plan.run([two, one])[0], one)
    with pytest.raises(GraphError, match="2 inputs of this plan are named 'x'"):
        plan.run({"x": one})


# ---------------------------------------------------------------------------- CrossEntropy
@pytest.mark.parametrize("graph_mode", [False, True], ids=["eager", "graph"])
def test_cross_entropy_of_a_zero_probability_is_infinite(graph_mode):
    y = np.array([[0.0, 1.0], [0.5, 0.5]], np.float32)
    t = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    if graph_mode:
        yp, tp = Placeholder((2, 2), name="y"), Placeholder((2, 2), name="t")
        loss = ops.cross_entropy(yp, tp)
        one = sg.Tensor(data=np.ones((), np.float32), requires_grad=False)
        dy = CrossEntropyGrad()(yp, tp, one)
        got_loss, got_grad = compile(Graph([loss, dy], inputs=[yp, tp])).run([y, t])
    else:
        yt = sg.Parameter(data=y)
        loss = ops.cross_entropy(yt, sg.Tensor(data=t, requires_grad=False))
        got_loss = loss.data
        ((_, g),) = list(backward(loss))
        got_grad = g.data
    assert np.isposinf(got_loss)
    assert np.isneginf(got_grad[0, 0]) and got_grad[0, 1] == 0 and got_grad[1, 0] == 0
    np.testing.assert_allclose(got_grad[1, 1], -1.0, rtol=1e-6)


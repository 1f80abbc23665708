"""verify() catches broken plans; plans reject bad feeds before running; hyperparameters are
live graph inputs; poison mode exposes reads of dead buffers; memory reports are consistent."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops, opt
from singa_graph.errors import DTypeError, GraphError, PlanError, ShapeError
from singa_graph.ir import Graph, building
from singa_graph.passes import compile, schedule, verify
from singa_graph.passes.schedule import POLICIES, dependencies
from singa_graph.runtime.plan import ExecutionPlan

N, D, H, K = 16, 6, 8, 3


# ---------------------------------------------------------------------------- fixtures
def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = rng.integers(0, 3, (N, K)).astype(np.int32)
    return x, y


def _params(seed=1):
    rng = np.random.default_rng(seed)
    return [sg.Parameter(data=rng.standard_normal((D, H)).astype(np.float32) * 0.3, name="W1"),
            sg.Parameter(data=np.zeros(H, np.float32) + 0.1, name="b1"),
            sg.Parameter(data=rng.standard_normal((H, K)).astype(np.float32) * 0.3, name="W2"),
            sg.Parameter(data=np.zeros(K, np.float32), name="b2")]


def _forward(x, y, params):
    W1, b1, W2, b2 = params
    h = ops.add_bias(ops.matmul(x, W1), b1)
    h = h * h
    o = ops.add_bias(ops.matmul(h, W2), b2)
    d = o - ops.cast(y, np.float32)
    return ops.mean(d * d)


def _training_plan(schedule_="memory", poison=False, **sgd_kw):
    """An MLP regression step with an int32 target placeholder, trained with SGD."""
    kw = dict(lr=0.05, momentum=0.9, weight_decay=1e-3)
    kw.update(sgd_kw)
    params, sgd = _params(), opt.SGD(**kw)
    xp = sg.Placeholder((N, D), name="x")
    yp = sg.Placeholder((N, K), dtype=np.int32, name="y")
    with building():
        loss = _forward(xp, yp, params)
        sgd(loss)
    g = Graph([loss] + sgd.take_update_tokens(), inputs=[xp, yp])
    return compile(g, schedule=schedule_, poison=poison), params, sgd, xp, yp


@pytest.fixture(scope="module")
def train():
    return _training_plan()


def _tampered(mp, **changes):
    return dataclasses.replace(mp, **changes)


# ---------------------------------------------------------------------------- verify
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("inplace", [True, False])
def test_verify_accepts_compiled_plans(policy, inplace):
    plan = _training_plan(policy)[0]
    verify(plan)
    verify(plan.memory)
    verify(compile(plan.graph, schedule=policy, inplace=inplace))


def test_overlapping_live_buffers_are_caught(train):
    mp = train[0].memory
    iv = mp.intervals
    pairs = [(g1, g2) for g1 in iv for g2 in iv if g1 != g2
             and iv[g1][0] <= iv[g2][1] and iv[g2][0] <= iv[g1][1]
             and mp.offsets[g1] != mp.offsets[g2]]
    assert pairs, "the test graph should have two buffers alive at once"
    g1, g2 = pairs[0]
    offsets = dict(mp.offsets)
    offsets[g2] = offsets[g1]
    with pytest.raises(PlanError, match="overlap"):
        verify(_tampered(mp, offsets=offsets))
    # a shift of a single byte into the neighbour is enough
    lo1 = mp.offsets[g1]
    offsets[g2] = lo1 + 1
    with pytest.raises(PlanError):
        verify(_tampered(mp, offsets=offsets))


def test_overlap_sweep_agrees_with_comparing_every_pair():
    """verify keeps the live buffers sorted by offset and compares a new one with its
    neighbours only; on random buffers it must find an overlap exactly when two buffers
    live at a common step share a byte."""
    from types import SimpleNamespace

    from singa_graph.passes.placement import align
    from singa_graph.passes.verify import _check_overlaps

    rng = np.random.default_rng(0)
    caught = 0
    for _ in range(400):
        n, steps = int(rng.integers(1, 30)), int(rng.integers(1, 12))
        bufs = []
        for k in range(n):
            a = int(rng.integers(0, steps))
            b = min(steps - 1, a + int(rng.integers(0, 5)))
            size = int(rng.choice([1, 64, 100, 128, 300]))
            bufs.append((("workspace", k), int(rng.integers(0, 24)) * 64, size, a, b))
        clash = any(a1 <= b2 and a2 <= b1 and lo1 < lo2 + align(s2) and lo2 < lo1 + align(s1)
                    for i, (_, lo1, s1, a1, b1) in enumerate(bufs)
                    for (_, lo2, s2, a2, b2) in bufs[i + 1:])
        plan = SimpleNamespace(intervals={}, offsets={}, buffers=lambda bufs=bufs: iter(bufs),
                               arena_bytes=max(lo + align(s) for _, lo, s, _, _ in bufs),
                               order=[SimpleNamespace(name=f"n{k}") for k in range(n)])
        if clash:
            caught += 1
            with pytest.raises(PlanError, match="overlap"):
                _check_overlaps(plan)
        else:
            _check_overlaps(plan)
    assert 50 < caught < 350  # both outcomes are exercised


def test_buffer_outside_the_arena_is_caught(train):
    mp = train[0].memory
    g = next(iter(mp.intervals))
    with pytest.raises(PlanError, match="outside the arena"):
        verify(_tampered(mp, offsets={**mp.offsets, g: mp.arena_bytes}))
    with pytest.raises(PlanError, match="no offset"):
        verify(_tampered(mp, offsets={k: v for k, v in mp.offsets.items() if k != g}))


def test_swapping_dependent_nodes_is_caught(train):
    mp = train[0].memory
    order = mp.order
    graph = mp.groups.graph
    index = {n.id: i for i, n in enumerate(graph.nodes)}
    deps = dependencies(graph)
    k = next(k for k in range(len(order) - 1)
             if index[order[k].id] in deps[index[order[k + 1].id]])
    swapped = order[:k] + [order[k + 1], order[k]] + order[k + 2:]
    with pytest.raises(PlanError):
        verify(_tampered(mp, order=swapped))
    with pytest.raises(PlanError, match="exactly once"):
        verify(_tampered(mp, order=order[:-1]))
    with pytest.raises(PlanError, match="exactly once"):
        verify(_tampered(mp, order=order + [order[0]]))


def _ancestors(node):
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        for x in n.inputs:
            if x.creator is not None and x.creator.id not in seen:
                seen.add(x.creator.id)
                stack.append(x.creator)
    return seen


def _data_valid(order):
    pos = {n.id: k for k, n in enumerate(order)}
    return all(pos[x.creator.id] < pos[n.id] for n in order for x in n.inputs
               if x.creator is not None)


def test_update_before_a_reader_of_the_parameter_is_caught(train):
    """Running an SGD update before a node that still reads the old parameter (here the
    backward ``dh = dy @ W2^T``, which the update does not depend on) is a write-after-read
    hazard even though every data edge is respected."""
    mp = train[0].memory
    order = mp.order
    found = 0
    for upd, u in enumerate(order):
        if u.type != "SGDUpdate":
            continue
        p, anc = u.inputs[0], _ancestors(u)
        for r, n in enumerate(order[:upd]):
            if n.id in anc or not any(x is p for x in n.inputs):
                continue
            moved = order[:r] + order[r + 1:upd + 1] + [n] + order[upd + 1:]
            if not _data_valid(moved):
                continue
            found += 1
            with pytest.raises(PlanError, match="runs before"):
                verify(_tampered(mp, order=moved))
    assert found, "the MLP's backward reads W2 outside the update's ancestry"


def _reshaped_param_model():
    """h = x @ W0; o = h @ reshape(W1): the backward reads W1 only through a reshape view."""
    rng = np.random.default_rng(3)
    W0 = sg.Parameter(data=rng.standard_normal((4, 3)).astype(np.float32), name="W0")
    W1 = sg.Parameter(data=rng.standard_normal(6).astype(np.float32), name="W1")
    sgd = opt.SGD(lr=0.5)
    xp, yp = sg.Placeholder((8, 4), name="x"), sg.Placeholder((8, 2), name="y")

    def fwd(x, y, w0, w1):
        d = ops.matmul(ops.matmul(x, w0), ops.reshape(w1, (3, 2))) - y
        return ops.mean(d * d)

    with building():
        loss = fwd(xp, yp, W0, W1)
        sgd(loss)
    g = Graph([loss] + sgd.take_update_tokens(), inputs=[xp, yp])
    return g, (W0, W1), fwd, (xp, yp)


def test_update_before_a_reader_of_a_reshaped_parameter_is_caught():
    """Regression: dependencies() used to order an update only after readers of the
    parameter tensor itself, not after readers of a reshape view of it, so an order running
    ``SGDUpdate(W1)`` before ``dh = dy @ reshape(W1)^T`` passed verify and gave W0 a gradient
    computed from the already-updated W1 (the 'memory' policy's greedy candidate does this)."""
    g, (W0, W1), fwd, (xp, yp) = _reshaped_param_model()
    order = schedule(g, "sequential")
    upd = next(k for k, n in enumerate(order) if n.type == "SGDUpdate" and n.inputs[0] is W1)
    view = next(n.outputs[0] for n in order if n.type == "Reshape" and n.inputs[0] is W1)
    dh = max((k for k, n in enumerate(order) if any(x is view for x in n.inputs)))
    assert order[dh].type == "MatMul" and dh < upd
    # run dh right after the update: still a valid order of the data edges
    moved = order[:dh] + order[dh + 1:upd + 1] + [order[dh]] + order[upd + 1:]
    assert _data_valid(moved)
    from singa_graph.passes.memory import plan_memory
    with pytest.raises(PlanError, match="runs before"):
        verify(plan_memory(g, moved))
    for policy in POLICIES:
        g, (W0, W1), fwd, (xp, yp) = _reshaped_param_model()
        rng = np.random.default_rng(4)
        X = rng.standard_normal((8, 4)).astype(np.float32)
        Y = rng.standard_normal((8, 2)).astype(np.float32)
        E0 = sg.Parameter(data=W0.data.copy())
        E1 = sg.Parameter(data=W1.data.copy())
        plan = compile(g, schedule=policy)
        verify(plan)
        plan.run({xp: X, yp: Y})
        opt.SGD(lr=0.5)(fwd(sg.Tensor(data=X, requires_grad=False),
                            sg.Tensor(data=Y, requires_grad=False), E0, E1))
        np.testing.assert_allclose(W0.data, E0.data, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(W1.data, E1.data, rtol=1e-5, atol=1e-6)


def _tiny_graph():
    """a = exp(x); b = neg(a); c = a + b: Neg may write in place, but ``a`` is read later."""
    x = sg.Placeholder((5,), name="x")
    with building():
        a = ops.exp(x)
        b = ops.neg(a)
        c = ops.add(a, b)
        d = ops.matmul(ops.reshape(c, (5, 1)), ops.reshape(x, (1, 5)))
    return Graph([d], inputs=[x]), x, a, b


def test_validate_refuses_misordered_nodes_and_cycles():
    """validate() walks the nodes once: a node reading what a later node produces is
    refused, and a cycle always shows up that way."""
    g, x, a, b = _tiny_graph()
    g.validate()
    exp_node, neg_node = a.creator, b.creator
    g.nodes = [neg_node, exp_node] + [n for n in g.nodes if n not in (exp_node, neg_node)]
    with pytest.raises(GraphError, match="before it is produced"):
        g.validate()
    g, x, a, b = _tiny_graph()
    a.creator.inputs[0] = b  # exp now reads neg's output and neg reads exp's: a cycle
    with pytest.raises(GraphError, match="before it is produced"):
        g.validate()


def test_fake_inplace_pair_whose_input_is_read_later_is_caught():
    g, x, a, b = _tiny_graph()
    mp = compile(g, schedule="sequential", fuse=False).memory  # keep a and b as buffers
    verify(mp)
    neg = b.creator
    assert not any(n is neg for n, _, _ in mp.groups.inplace_pairs)
    groups = copy.copy(mp.groups)
    groups.inplace_pairs = list(mp.groups.inplace_pairs) + [(neg, b, a)]
    with pytest.raises(PlanError, match="overwrote in place"):
        verify(_tampered(mp, groups=groups))
    # an in-place pair on an op that declares none (MatMul) is caught as well
    mm = g.outputs[0].creator
    groups.inplace_pairs = list(mp.groups.inplace_pairs) + [(mm, mm.outputs[0], mm.inputs[0])]
    with pytest.raises(PlanError, match="without declaring"):
        verify(_tampered(mp, groups=groups))


def test_shrunk_lifetime_is_caught_by_verify():
    g, x, a, b = _tiny_graph()
    mp = compile(g, schedule="sequential").memory
    ga = mp.groups.root(a)
    lo, hi = mp.intervals[ga]
    assert hi > lo
    with pytest.raises(PlanError, match="alive only for"):
        verify(_tampered(mp, intervals={**mp.intervals, ga: (lo, lo)}))


# ---------------------------------------------------------------------------- poison mode
def _poison_graph():
    """a = 2x lives from step 0 to step 3; b, c are computed in between."""
    x = sg.Placeholder((4,), name="x")
    with building():
        a = x * 2.0
        b = ops.exp(x)
        c = b + 1.0
        d = a + c
    return Graph([d], inputs=[x]), x, a


def test_poison_exposes_a_read_of_a_dead_buffer():
    g, x, a = _poison_graph()
    X = np.linspace(-1, 1, 4).astype(np.float32)
    want = 2 * X + np.exp(X) + 1
    good = compile(g, schedule="sequential", poison=True, fuse=False)  # keep a as a buffer
    verify(good)
    out = good.run({x: X})[0]
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, want, rtol=1e-6)

    mp = good.memory
    ga = mp.groups.root(a)
    lo, hi = mp.intervals[ga]
    assert (lo, hi) == (0, 3)
    bad = _tampered(mp, intervals={**mp.intervals, ga: (lo, lo)})  # "dead" after step 0
    # without poison the wrong plan happens to give the right answer: the bug hides
    np.testing.assert_allclose(ExecutionPlan(g, bad).run({x: X})[0], want, rtol=1e-6)
    # poison mode fills the buffer with NaN once it is considered dead: the read shows up
    assert np.isnan(ExecutionPlan(g, bad, poison=True).run({x: X})[0]).all()
    # and a correct plan in poison mode, run twice, stays NaN-free
    for _ in range(2):
        assert not np.isnan(ExecutionPlan(g, mp, poison=True).run({x: X})[0]).any()


def test_poisoned_training_plan_matches_plain_plan():
    plan_a, params_a, _, xp, yp = _training_plan("memory", poison=True)
    plan_b, params_b, _, xq, yq = _training_plan("memory", poison=False)
    X, Y = _data()
    for _ in range(3):
        la = plan_a.run({"x": X, "y": Y})[0]
        lb = plan_b.run({"x": X, "y": Y})[0]
        assert np.isfinite(la) and la == lb
    for p, q in zip(params_a, params_b):
        np.testing.assert_array_equal(p.data, q.data)


# ---------------------------------------------------------------------------- feeds
def _snapshot(params, sgd):
    return [p.data.copy() for p in params] + [t.data.copy() for t in
                                              sgd.state_tensors().values()]


def _count_steps(plan):
    calls = [0]

    def wrap(step):
        def run():
            calls[0] += 1
            step()
        return run
    plan.steps = [wrap(s) for s in plan.steps]
    return calls


def _bad_feeds(xp, yp):
    X, Y = _data()
    return {
        "missing": ({xp: X}, GraphError),
        "missing_by_name": ({"y": Y}, GraphError),
        "wrong_shape": ({xp: X[:-1], yp: Y}, ShapeError),
        "wrong_rank": ({xp: X.reshape(-1), yp: Y}, ShapeError),
        "float_into_int32": ({xp: X, yp: Y.astype(np.float32)}, DTypeError),
        "float64_into_int32": ({"x": X, "y": Y.astype(np.float64)}, DTypeError),
        "complex_into_float32": ({xp: X.astype(np.complex64), yp: Y}, DTypeError),
        "unknown_name": ({"x": X, "y": Y, "z": X}, GraphError),
        "foreign_placeholder": ({sg.Placeholder((N, D), name="x"): X, yp: Y}, GraphError),
        "list_too_short": ([X], GraphError),
        "list_wrong_dtype": ([X, Y.astype(np.float32)], DTypeError),
    }


BAD_FEEDS = ["missing", "missing_by_name", "wrong_shape", "wrong_rank", "float_into_int32",
             "float64_into_int32", "complex_into_float32", "unknown_name", "foreign_placeholder",
             "list_too_short", "list_wrong_dtype"]


@pytest.mark.parametrize("case", BAD_FEEDS)
@pytest.mark.parametrize("poison", [False, True])
def test_bad_feeds_raise_before_any_step(case, poison):
    plan, params, sgd, xp, yp = _training_plan(poison=poison)
    X, Y = _data()
    plan.run({xp: X, yp: Y})  # one real step, so the momentum buffers are non-zero
    before = _snapshot(params, sgd)
    calls = _count_steps(plan)
    feeds, err = _bad_feeds(xp, yp)[case]
    with pytest.raises(err):
        plan.run(feeds)
    assert calls[0] == 0
    for a, b in zip(before, _snapshot(params, sgd)):
        np.testing.assert_array_equal(a, b)
    # the plan still works afterwards, by Placeholder, by name and as a list
    plan.run({xp: X, yp: Y})
    plan.run({"x": X, "y": Y})
    plan.run([X, Y])
    assert calls[0] == 3 * len(plan.steps)


def test_feeds_that_cast_safely_are_accepted():
    plan, params, sgd, xp, yp = _training_plan()
    X, Y = _data()
    l1 = plan.run({xp: X.astype(np.float64), yp: Y.astype(np.int64)})[0]  # same kind
    assert np.isfinite(l1)
    l2 = plan.run({xp: sg.Tensor(data=X, requires_grad=False), yp: Y})[0]  # a Tensor feed
    assert np.isfinite(l2)


def test_an_input_no_node_reads_takes_a_feed():
    x, unused = sg.Placeholder((3,), name="x"), sg.Placeholder((2,), name="unused")
    with building():
        y = ops.exp(x) + 1.0
    plan = compile(Graph([y], inputs=[x, unused]))
    verify(plan)
    X = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(plan.run({x: X, unused: np.zeros(2, np.float32)})[0],
                               np.exp(X) + 1, rtol=1e-6)
    with pytest.raises(ShapeError):
        plan.run({x: X, unused: np.zeros(3, np.float32)})


# ---------------------------------------------------------------------------- live hyperparameters
def test_changing_lr_between_runs_needs_no_recompilation():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, D)).astype(np.float32)
    Y = rng.standard_normal((N, 2)).astype(np.float32)
    W = sg.Parameter(data=rng.standard_normal((D, 2)).astype(np.float32), name="W")
    sgd = opt.SGD(lr=0.1)
    xp, yp = sg.Placeholder((N, D), name="x"), sg.Placeholder((N, 2), name="y")
    with building():
        d = ops.matmul(xp, W) - yp
        loss = ops.mean(d * d)
        sgd(loss)
    plan = compile(Graph([loss] + sgd.take_update_tokens(), inputs=[xp, yp]))
    verify(plan)
    steps = list(plan.steps)

    w = W.data.astype(np.float64)
    for lr in (0.1, 0.1, 0.02, 0.5, 0.0):
        sgd.lr = lr
        assert sgd.lr == lr
        r = X @ w - Y
        want_loss = np.mean(r * r)
        w = w - lr * (2.0 / r.size) * X.T @ r
        got_loss = plan.run({xp: X, yp: Y})[0]
        np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
        np.testing.assert_allclose(W.data, w, rtol=1e-5, atol=1e-6)
    assert all(a is b for a, b in zip(plan.steps, steps))  # the same prepared steps


# ---------------------------------------------------------------------------- reports
@pytest.mark.parametrize("policy", POLICIES)
def test_memory_report_is_consistent(policy):
    plan, params, sgd, xp, yp = _training_plan(policy)
    rep = plan.memory_report()
    for key in ("schedule", "arena_bytes", "lower_bound_bytes", "no_reuse_bytes",
                "persistent_bytes", "arena_over_lower_bound", "arena_over_no_reuse", "steps",
                "inplace_ops"):
        assert key in rep, key
    assert rep["schedule"] == policy
    assert rep["steps"] == len(plan.steps) == len(plan.graph.nodes)
    assert rep["lower_bound_bytes"] > 0
    assert rep["lower_bound_bytes"] <= rep["arena_bytes"] <= rep["no_reuse_bytes"]
    assert rep["arena_bytes"] == plan.memory.arena_bytes == plan.arena.nbytes
    # parameters, their momentum buffers and the two feeds are all persistent
    least = 2 * sum(p.nbytes for p in params) + xp.nbytes + yp.nbytes
    assert rep["persistent_bytes"] >= least
    assert 0 < rep["arena_over_no_reuse"] <= 1 <= rep["arena_over_lower_bound"]
    # no inplace -> no fewer bytes
    rep2 = compile(plan.graph, schedule=policy, inplace=False).memory_report()
    assert rep2["inplace_ops"] == 0
    assert rep2["lower_bound_bytes"] >= rep["lower_bound_bytes"]


def test_training_plan_matches_eager():
    plan, params, sgd, xp, yp = _training_plan("memory", poison=True)
    eparams = [sg.Parameter(data=p.data.copy(), name=p.name) for p in params]
    esgd = opt.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3)
    for seed in range(3):
        X, Y = _data(seed)
        lg = plan.run({xp: X, yp: Y})[0]
        le = _forward(sg.Tensor(data=X, requires_grad=False),
                      sg.Tensor(data=Y, requires_grad=False), eparams)
        esgd(le)
        np.testing.assert_allclose(lg, le.data, rtol=1e-5)
    for p, q in zip(params, eparams):
        np.testing.assert_allclose(p.data, q.data, rtol=1e-5, atol=1e-6)

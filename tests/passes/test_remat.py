"""Memory budgets met by rematerialisation (passes/remat.py).

For the MLP, CNN, ResNet, a small GPT and an MLP with Dropout, a training plan compiled
with a budget between the smallest feasible one and the unbudgeted arena: the arena
(workspace included)
fits the budget, the plan verifies, and the losses, parameters and BatchNorm statistics
after 3 steps are bitwise those of the plan without a budget. A budget below the smallest
feasible one raises MemoryBudgetError naming it before anything changes; eager mode refuses
budgets; random DAGs (hypothesis) give plans that verify, fit and compute the same values.
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import singa_graph as sg
from singa_graph import layer, ops, opt, zoo
from singa_graph import random as sg_random
from singa_graph.errors import MemoryBudgetError
from singa_graph.ir import Graph, building
from singa_graph.passes import compile, verify
from singa_graph.passes.remat import minimum_budget, parse_budget

MIB = 1 << 20
NUMPY_DOMAIN = 389047


class DropoutMLP(zoo._Classifier):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = layer.Linear(256), layer.Linear(256), layer.Linear(10)
        self.relu = layer.ReLU()
        self.drop = layer.Dropout(0.3)

    def forward(self, x):
        y = self.drop(self.relu(self.l1(x)))
        y = self.relu(self.l2(y))
        return self.l3(self.drop(y))


def _gpt():
    from singa_graph import cli

    ex = cli.load_example("gpt")
    return ex.GPT(vocab_size=10, seq_len=16, d_model=32, num_heads=4, blocks=2)


MODELS = {
    "gpt": (_gpt, (8, 16)),  # token ids: embeddings, attention, LayerNorm
    "mlp": (lambda: zoo.MLP(hidden=(512, 512, 512)), (512, 64)),
    "cnn": (lambda: zoo.CNN(), (16, 1, 28, 28)),
    "resnet": (lambda: zoo.ResNet(widths=(8, 16)), (8, 3, 16, 16)),
    "dropout": (DropoutMLP, (512, 32)),
}


def _data(name):
    shape = MODELS[name][1]
    rng = np.random.default_rng(0)
    if name == "gpt":
        return (rng.integers(0, 10, shape).astype(np.int32),
                rng.integers(0, 10, shape).astype(np.int32))
    return (rng.standard_normal(shape).astype(np.float32),
            rng.integers(0, 10, shape[0]).astype(np.int32))


def _model(name, **kw):
    sg_random.seed(0)
    m = MODELS[name][0]()
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    x, _ = _data(name)
    m.compile([x], is_train=True, use_graph=True, **kw)
    return m


def _snapshot(m):
    out = {f"p/{k}": np.array(v.data) for k, v in m.get_params().items()}
    out.update({f"s/{k}": np.array(v.data) for k, v in m.get_states().items()})
    for o in m._optimizers():
        out.update({f"o/{k}": np.array(v.data) for k, v in o.state_tensors().items()})
    return out


def _budget_between(name):
    """A budget halfway between the smallest feasible arena and the unbudgeted one."""
    m = _model(name)
    x, y = _data(name)
    plan = m.plan_for(x, y)
    base = plan.memory.arena_bytes
    least = minimum_budget(plan.graph, plan.memory.order)
    return base, least, (base + least) // 2


@pytest.mark.parametrize("name", list(MODELS))
def test_budgeted_training_is_bitwise_the_unbudgeted_one(name):
    base, least, budget = _budget_between(name)
    assert least < base, f"{name}: nothing to recompute (min {least}, arena {base})"
    x, y = _data(name)
    ref = _model(name)
    ref.plan_for(x, y)  # traced right after seeding, as the other one: same Dropout seeds
    got = _model(name, memory_budget=budget)
    plan = got.plan_for(x, y)
    verify(plan)
    r = plan.memory_report()
    assert r["arena_bytes"] <= budget < base
    assert r["budget_bytes"] == budget and r["recomputed_nodes"] > 0
    assert 0 < r["recompute_flops"] < 1
    for _ in range(3):
        lr, lg = ref(x, y)[1].to_numpy(), got(x, y)[1].to_numpy()
        assert np.array_equal(lr, lg)
    a, b = _snapshot(ref), _snapshot(got)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("name", ["resnet", "dropout"])
def test_numpy_allocations_stay_within_the_budgeted_plan(name):
    _, _, budget = _budget_between(name)
    x, y = _data(name)
    warm = _model(name, memory_budget=budget)
    warm(x, y)
    m = _model(name, memory_budget=budget)
    gc.collect()
    tracemalloc.start()
    try:
        m.plan_for(x, y)
        held = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.DomainFilter(True, NUMPY_DOMAIN)])
        compiled = sum(t.size for t in held.traces)
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(3):
            m(x, y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    r = m.memory_report()
    assert r["arena_bytes"] <= budget
    assert compiled >= r["arena_bytes"]
    assert compiled + peak - before <= 1.05 * r["plan_bytes"] + MIB


def test_below_the_minimum_raises_naming_it_and_changes_nothing():
    _, least, _ = _budget_between("resnet")
    x, y = _data("resnet")
    m = _model("resnet", memory_budget=least - 64)
    before = _snapshot(m)
    with pytest.raises(MemoryBudgetError) as e:
        m(x, y)
    assert e.value.minimum == least
    assert f"{least} bytes" in str(e.value)
    after = _snapshot(m)
    assert before.keys() <= after.keys()
    for k in before:
        assert np.array_equal(before[k], after[k]), k
    assert all(not np.any(v) for k, v in after.items() if k not in before)  # fresh state
    assert m.plans == [] and m.last_plan is None
    ok = _model("resnet", memory_budget=least)  # the minimum itself is met
    assert ok.plan_for(x, y).memory.arena_bytes <= least


def test_eager_mode_refuses_a_budget():
    m = MODELS["mlp"][0]()
    m.set_optimizer(opt.SGD(lr=0.1))
    with pytest.raises(MemoryBudgetError, match="graph mode"):
        m.compile([np.zeros((4, 64), np.float32)], use_graph=False, memory_budget="1MiB")
    m.compile([np.zeros((4, 64), np.float32)], memory_budget="1MiB")
    with pytest.raises(MemoryBudgetError, match="graph mode"):
        m.graph(False)


def test_budget_strings():
    assert parse_budget(1000) == 1000
    assert parse_budget("64MiB") == 64 << 20
    assert parse_budget("1.5 KiB") == 1536
    assert parse_budget("2GB") == 2 * 10 ** 9
    assert parse_budget("50%", reference=1000) == 500
    for bad in ("fast", "-1MiB", "10 parsecs", 0, -5, True, "50%"):
        with pytest.raises(MemoryBudgetError):
            parse_budget(bad)
    with pytest.raises(MemoryBudgetError):
        _model("mlp", memory_budget="lots")


@pytest.mark.parametrize("method", ["milp", "dtr", "chen"])
def test_each_method_fits_and_matches(method):
    x, y = _data("cnn")
    base, least, budget = _budget_between("cnn")
    kw = {"memory_budget": budget} if method != "chen" else {}
    ref = _model("cnn")
    ref.plan_for(x, y)
    got = _model("cnn", remat=method, **kw)
    plan = got.plan_for(x, y)
    verify(plan)
    if method != "chen":
        assert plan.memory.arena_bytes <= budget
    assert plan.memory_report()["recomputed_nodes"] > 0
    for _ in range(3):
        assert np.array_equal(ref(x, y)[1].to_numpy(), got(x, y)[1].to_numpy())
    a, b = _snapshot(ref), _snapshot(got)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_relative_budget_is_a_share_of_the_unbudgeted_arena():
    x, y = _data("resnet")
    base, least, _ = _budget_between("resnet")
    share = -(-100 * least // base) + 2  # a whole percentage above the minimum
    plan = _model("resnet", memory_budget=f"{share}%").plan_for(x, y)
    r = plan.memory_report()
    assert r["budget_bytes"] == int(share / 100 * base)
    assert r["arena_bytes"] <= r["budget_bytes"]
    assert r["unbudgeted_arena_bytes"] == base


# ---------------------------------------------------------------------------- random DAGs
UNARY = (ops.relu, ops.sigmoid, ops.tanh, lambda a: a * 1.5)
BINARY = (lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b)


@st.composite
def dags(draw):
    n = draw(st.integers(4, 14))
    spec = []
    for i in range(n):
        if i and draw(st.booleans()):
            spec.append(("b", draw(st.integers(0, len(BINARY) - 1)),
                         draw(st.integers(0, i - 1)), draw(st.integers(0, i - 1))))
        else:
            spec.append(("u", draw(st.integers(0, len(UNARY) - 1)),
                         draw(st.integers(0, max(i - 1, 0))), 0))
    outs = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True))
    return spec, outs


def _build(spec, outs):
    xp = sg.Placeholder((32, 64), name="x")
    with building():
        vals = []
        for kind, f, a, b in spec:
            src = vals[a] if vals else xp
            vals.append(UNARY[f](src) if kind == "u" else BINARY[f](vals[a], vals[b]))
        res = [ops.sum(vals[i] * vals[-1]) for i in outs]  # early values read late
    return Graph(res, inputs=[xp]), xp


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.floats(0.0, 1.0))
def test_random_dags_verify_fit_and_agree(dag, where):
    x = np.random.default_rng(0).standard_normal((32, 64)).astype(np.float32)
    g, xp = _build(*dag)
    ref = compile(g)
    want = ref.run([x])
    base = ref.memory.arena_bytes
    with pytest.raises(MemoryBudgetError) as e:
        compile(_build(*dag)[0], memory_budget=1)
    least = e.value.minimum
    assert least <= base
    budget = int(least + where * (base - least))
    plan = compile(_build(*dag)[0], memory_budget=budget)
    verify(plan)
    assert plan.memory.arena_bytes <= budget
    for a, b in zip(want, plan.run([x])):
        assert np.array_equal(a, b)


def test_low_level_rematerialize_rewrites_the_graph_in_place():
    from singa_graph.passes import rematerialize

    spec = [("u", i % 3, max(i - 1, 0), 0) for i in range(8)]  # a chain...
    x = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    outs = [6, 4, 2, 1]  # ...whose values are all read with its last one
    want = compile(_build(spec, outs)[0], fuse=False).run([x])
    g = _build(spec, outs)[0]
    base = compile(_build(spec, outs)[0], fuse=False).memory.arena_bytes
    least = minimum_budget(g, "memory")
    assert least < base
    n = len(g.nodes)
    assert rematerialize(g, "memory", least) is g
    assert len(g.nodes) == n + len(g.recomputed) and g.recomputed
    plan = compile(g, fuse=False, schedule="sequential", memory_budget=least)
    verify(plan)
    assert plan.memory.arena_bytes <= least
    assert all(np.array_equal(a, b) for a, b in zip(want, plan.run([x])))

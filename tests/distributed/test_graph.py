"""DistOpt in one process (a world of one rank): fusion rule, sharding, where the collective
nodes land in the schedule and in the arena, and equality with the wrapped optimizer."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("mpi4py")

from singa_graph import opt, random as sg_random, zoo  # noqa: E402
from singa_graph.dist import DistOpt, iterate_shard, shard  # noqa: E402
from singa_graph.passes import dist as pdist  # noqa: E402
from singa_graph.passes.verify import verify  # noqa: E402


def test_fusion_follows_singa_rule():
    # larger than the threshold: alone; smaller: fused until the bucket exceeds it
    assert pdist.split([10, 3, 3, 3, 3, 20, 1], threshold=8) == [[0], [1, 2, 3], [5], [4, 6]]
    assert pdist.split([5, 5, 5], threshold=0) == [[0], [1], [2]]
    assert pdist.split([5, 5, 5], threshold=100) == [[0, 1, 2]]
    # buffSize (capacity) closes a bucket before it would overflow
    assert pdist.split([4, 4, 4], threshold=100, capacity=8) == [[0, 1], [2]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=30), st.integers(0, 60),
       st.one_of(st.none(), st.integers(1, 80)))
def test_fusion_keeps_order_and_bounds(sizes, threshold, capacity):
    buckets = pdist.split(sizes, threshold, capacity)
    assert sorted(i for b in buckets for i in b) == list(range(len(sizes)))
    for b in buckets:
        assert b == sorted(b)
        total = sum(sizes[i] for i in b)
        if len(b) > 1:  # fused: only gradients within the threshold, the last one tipping it
            assert all(sizes[i] <= threshold for i in b)
            assert sum(sizes[i] for i in b[:-1]) <= threshold
            if capacity is not None:
                assert total <= capacity


@pytest.mark.parametrize("world", [1, 2, 3])
def test_shards_are_disjoint_equal_and_cover(world):
    n = 103
    parts = [shard(n, r, world, epoch=2, seed=5) for r in range(world)]
    assert len({len(p) for p in parts}) == 1
    joined = np.concatenate(parts)
    assert len(set(joined)) == len(joined) == n - n % world
    assert not np.array_equal(shard(n, 0, world, epoch=3, seed=5), parts[0])
    padded = [shard(n, r, world, drop_last=False) for r in range(world)]
    assert set(np.concatenate(padded)) == set(range(n))
    x, y = np.arange(n)[:, None], np.arange(n)
    assert sum(1 for _ in iterate_shard(x, y, 4, 0, world)) == (n // world) // 4
    with pytest.raises(ValueError):
        shard(n, world, world)


def _model(graph, dist, threshold=100, seed=3, poison=False):
    sg_random.seed(seed)
    m = zoo.CNN(bn=False, channels=(4, 8))
    sgd = opt.SGD(lr=0.05, momentum=0.9)
    if dist:
        m.set_optimizer(DistOpt(sgd, timeout=30, threshold=threshold))
    else:
        m.set_optimizer(sgd)
    x = np.random.default_rng(0).random((6, 1, 8, 8)).astype(np.float32)
    y = np.arange(6, dtype=np.int32)
    m.compile([x], is_train=True, use_graph=graph, poison=poison)
    return m, x, y


@pytest.mark.parametrize("schedule", ["topological", "memory"])
def test_starts_follow_their_gradients_and_waits_come_after_the_backward(schedule):
    m, x, y = _model(True, True)
    m.schedule = schedule
    plan = m.plan_for(x, y)
    verify(plan.memory)
    order = plan.nodes
    pos = {n.id: i for i, n in enumerate(order)}
    producer = {id(o): n for n in order for o in n.outputs}
    starts = [n for n in order if n.type == "AllReduceStart"]
    waits = [n for n in order if n.type == "AllReduceWait"]
    assert len(starts) == len(waits) > 1
    for s in starts:  # right after its last gradient is final
        assert pos[s.id] == max(pos[producer[id(g)].id] for g in s.inputs) + 1
    first_wait = min(pos[w.id] for w in waits)
    assert all(n.type in ("AllReduceWait", "SGDUpdate") for n in order[first_wait:])
    assert all(pos[s.id] < first_wait for s in starts)
    for w in waits:  # the bucket is a transient arena buffer, live from start to wait
        g = plan.memory.groups.root(w.inputs[0])
        assert not plan.memory.groups.persistent(g)
        a, b = plan.memory.intervals[g]
        assert (a, b) == (pos[producer[id(w.inputs[0])].id], pos[w.id])


@pytest.mark.parametrize("graph", [True, False])
def test_one_rank_trains_exactly_like_the_wrapped_optimizer(graph):
    runs = []
    for dist in (False, True):
        m, x, y = _model(graph, dist)
        losses = [m(x, y)[1].data.item() for _ in range(3)]
        runs.append((losses, {k: p.data.copy() for k, p in m.get_params().items()}))
    assert runs[0][0] == runs[1][0]
    for k, v in runs[0][1].items():
        np.testing.assert_array_equal(runs[1][1][k], v, err_msg=k)


def test_buckets_survive_poison_mode():
    """Poison mode overwrites every arena region after its last use: a bucket read after it
    was freed, or reused while the all-reduce owns it, would turn into NaN."""
    runs = []
    for poison in (False, True):
        m, x, y = _model(True, True, poison=poison)
        runs.append([m(x, y)[1].data.item() for _ in range(3)])
    assert runs[0] == runs[1] and np.isfinite(runs[1]).all()


def test_checkpoints_hold_the_wrapped_optimizer_state(tmp_path):
    m, x, y = _model(True, True)
    m(x, y)
    m.save_states(str(tmp_path / "c.zip"))
    with np.load(tmp_path / "c.zip") as z:
        assert str(z["meta/optimizer"]) == "SGD"
        assert any(k.startswith("opt/") for k in z.files)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="mpiexec"):
        DistOpt(opt.SGD(), nccl_id=object())
    with pytest.raises(ValueError, match="world_size=4 but MPI says 1"):
        DistOpt(opt.SGD(), world_size=4)
    with pytest.raises(TypeError):
        DistOpt("sgd")
    with pytest.raises(ValueError, match="timeout"):
        DistOpt(opt.SGD(), timeout=0)
    d = DistOpt(opt.SGD(lr=0.2))
    assert (d.world_size, d.global_rank, d.local_rank) == (1, 0, 0)
    assert d.lr == pytest.approx(0.2)
    d.lr = 0.05  # reaches the wrapped optimizer
    assert d.opt.lr == pytest.approx(0.05)

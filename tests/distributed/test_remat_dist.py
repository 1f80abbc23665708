"""A memory budget under DistOpt (a world of one rank, in process): the all-reduce buckets
live in the arena and count against the budget; training matches the unbudgeted plan bit
for bit."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mpi4py")

from singa_graph import opt, random as sg_random, zoo  # noqa: E402
from singa_graph.dist import DistOpt  # noqa: E402
from singa_graph.errors import MemoryBudgetError  # noqa: E402
from singa_graph.passes.verify import verify  # noqa: E402


def _model(budget=None):
    sg_random.seed(3)
    m = zoo.CNN(channels=(8, 16))
    m.set_optimizer(DistOpt(opt.SGD(lr=0.05, momentum=0.9), timeout=30, threshold=100))
    x = np.random.default_rng(0).random((16, 1, 16, 16)).astype(np.float32)
    y = np.arange(16, dtype=np.int32) % 10
    m.compile([x], is_train=True, use_graph=True, memory_budget=budget)
    return m, x, y


def test_budget_counts_the_buckets_and_training_is_unchanged():
    ref, x, y = _model()
    base = ref.plan_for(x, y).memory.arena_bytes
    with pytest.raises(MemoryBudgetError) as e:
        _model(budget=1)[0].plan_for(x, y)
    least = e.value.minimum
    assert least < base
    budget = (least + base) // 2
    got = _model(budget=budget)[0]
    plan = got.plan_for(x, y)
    verify(plan)
    mp = plan.memory
    assert mp.arena_bytes <= budget and plan.memory_report()["recomputed_nodes"] > 0
    starts = [n for n in mp.order if n.type == "AllReduceStart"]
    assert starts
    for n in starts:  # each bucket is an arena buffer, inside the budget
        g = mp.groups.root(n.outputs[0])
        assert g in mp.intervals and mp.offsets[g] + mp.groups.size(g) <= budget
    for _ in range(3):
        assert np.array_equal(ref(x, y)[1].to_numpy(), got(x, y)[1].to_numpy())
    for (k, p), q in zip(got.get_params().items(), ref.get_params().values()):
        assert np.array_equal(p.data, q.data), k

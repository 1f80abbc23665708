"""A memory budget on the CUDA device: the plan recomputes values (BatchNorm included) to
fit, and trains bit for bit as the plan without a budget on the same device."""
import numpy as np
import pytest

from singa_graph import opt, random as sg_random, tensor, zoo
from singa_graph.errors import MemoryBudgetError
from singa_graph.passes.verify import verify

SHAPE = (2, 1, 8, 8)


def _model(dev, budget=None):
    sg_random.seed(0)
    m = zoo.CNN(channels=(2, 4))
    m.set_optimizer(opt.SGD(lr=0.05, momentum=0.9))
    m.compile([tensor.Tensor(SHAPE, dev)], is_train=True, use_graph=True,
              memory_budget=budget)
    return m


def test_budgeted_cuda_training_matches_the_unbudgeted_one(gpu):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    y = rng.integers(0, 10, SHAPE[0]).astype(np.int32)
    ref = _model(gpu)
    base = ref.plan_for(x, y).memory.arena_bytes
    with pytest.raises(MemoryBudgetError) as e:
        _model(gpu, budget=1).plan_for(x, y)
    least = e.value.minimum
    assert least < base
    budget = (least + base) // 2
    got = _model(gpu, budget=budget)
    plan = got.plan_for(x, y)
    verify(plan)
    r = plan.memory_report()
    assert r["arena_bytes"] <= budget and r["recomputed_nodes"] > 0
    for _ in range(3):
        assert np.array_equal(ref(x, y)[1].to_numpy(), got(x, y)[1].to_numpy())
    for (k, p), q in zip(got.get_params().items(), ref.get_params().values()):
        assert gpu.is_array(p.data), k
        assert np.array_equal(p.to_numpy(), q.to_numpy()), k
    for (k, s), q in zip(got.get_states().items(), ref.get_states().values()):
        assert np.array_equal(s.to_numpy(), q.to_numpy()), k

"""A plan owns every byte it uses: what numpy allocates while a plan is compiled and run is
what ``memory_report()`` says the plan holds.

For the MLP, CNN, ResNet, small Xception and GPT training plans and their inference plans, the
numpy bytes allocated from the start of compiling through 3 steps are at most
``1.05 * plan_bytes + 1 MiB``, where ``plan_bytes`` is the arena (workspace included) plus
the persistent buffers the plan created itself. Measured with tracemalloc, where numpy
registers every data buffer (domain 389047): the numpy bytes still held when compiling ends
(a snapshot filtered to numpy's domain, so the Python objects of the graph do not count),
plus the peak growth of all traced bytes while the 3 steps run (anything a kernel allocates,
even if it frees it before returning). The JIT is warmed first by the same configuration in
another model, so Numba's compiler is not measured. Then every plan still verifies.
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from singa_graph import cli, opt, zoo
from singa_graph import random as sg_random
from singa_graph.passes.verify import verify

MIB = 1 << 20
NUMPY_DOMAIN = 389047  # numpy's tracemalloc domain (PyTraceMalloc_Track in numpy's allocator)


def _xception():
    ex = cli.load_example("xception")
    cfg = dict(ex.SMALL)
    cfg.pop("size")
    return ex.XceptionModel(num_classes=10, in_channels=3, image_size=32, **cfg)


def _gpt():
    ex = cli.load_example("gpt")
    return ex.GPT(vocab_size=10, seq_len=16, d_model=32, num_heads=4, blocks=2)


MODELS = {
    "mlp": (lambda: zoo.MLP(), (64, 784)),
    "cnn": (lambda: zoo.CNN(), (64, 1, 28, 28)),
    "resnet": (lambda: zoo.ResNet(widths=(16, 32, 64)), (32, 3, 32, 32)),
    "xception": (_xception, (8, 3, 32, 32)),
    "gpt": (_gpt, (8, 16)),  # token ids; attention plans its score workspace
}


def _model(name, train, x):
    sg_random.seed(0)
    m = MODELS[name][0]()
    m.set_optimizer(opt.SGD(lr=0.01, momentum=0.9))
    m.compile([x], is_train=train, use_graph=True)
    return m


def _steps(m, train, x, y, n):
    for _ in range(n):
        m(x, y) if train else m(x)


@pytest.mark.parametrize("train", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("name", list(MODELS))
def test_numpy_allocations_stay_within_the_plan(name, train):
    shape = MODELS[name][1]
    rng = np.random.default_rng(0)
    if name == "gpt":
        x = rng.integers(0, 10, shape).astype(np.int32)
        y = rng.integers(0, 10, shape).astype(np.int32)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
        y = rng.integers(0, 10, shape[0]).astype(np.int32)
    _steps(_model(name, train, x), train, x, y, 2)  # JIT warm-up
    m = _model(name, train, x)
    gc.collect()
    tracemalloc.start()
    try:
        m.plan_for(x, y) if train else m.plan_for(x)
        held = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.DomainFilter(True, NUMPY_DOMAIN)])
        compiled = sum(t.size for t in held.traces)
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        _steps(m, train, x, y, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    allocated = compiled + peak - before
    plan = m._last_plan
    r = plan.memory_report()
    assert r["plan_bytes"] == r["arena_bytes"] + r["owned_persistent_bytes"]
    bound = 1.05 * r["plan_bytes"] + MIB
    assert allocated <= bound, (f"{name} {'train' if train else 'infer'}: numpy allocated "
                                f"{allocated / MIB:.2f} MiB, the plan reports "
                                f"{r['plan_bytes'] / MIB:.2f} MiB")
    assert compiled >= r["arena_bytes"]  # the measurement sees the arena itself
    verify(plan)

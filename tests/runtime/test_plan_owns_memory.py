"""A plan owns every byte it uses: what numpy allocates while a plan is compiled and run is
what ``memory_report()`` says the plan holds.

For the MLP, CNN, ResNet, small Xception and two GPT training plans and their inference plans, the
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


def _gpt(seq_len=16, d_model=32):
    ex = cli.load_example("gpt")
    return ex.GPT(vocab_size=10, seq_len=seq_len, d_model=d_model, num_heads=4, blocks=2)


MODELS = {
    "mlp": (lambda: zoo.MLP(), (64, 784)),
    "cnn": (lambda: zoo.CNN(), (64, 1, 28, 28)),
    "resnet": (lambda: zoo.ResNet(widths=(16, 32, 64)), (32, 3, 32, 32)),
    "xception": (_xception, (8, 3, 32, 32)),
    "gpt": (_gpt, (8, 16)),  # token ids; attention plans its score workspace
    # scores of 128 x 128: attention's workspace (1 MiB forward, 2 MiB backward) is more
    # than the bound's slack, so a kernel allocating its own scratch would fail the bound
    "gpt-seq128": (lambda: _gpt(128, 64), (16, 128)),
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
    if name.startswith("gpt"):
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


def test_gpt_attention_memory_is_planned_reported_and_drawn():
    """Attention's score workspace and what it keeps for the backward (its output and the
    logsumexp of every row) are arena buffers: memory_report() names them by op, and the
    pictures' data has them with their lifetimes."""
    from singa_graph.runtime.kernels.cpu.attention import PARTS
    from singa_graph.runtime.registry import carved_bytes
    from singa_graph.viz.extract import extract

    b, s, d, h = 16, 128, 64, 4
    rng = np.random.default_rng(0)
    x = rng.integers(0, 10, (b, s)).astype(np.int32)
    m = _model("gpt-seq128", True, x)
    m(x, rng.integers(0, 10, (b, s)).astype(np.int32))
    r = m.memory_report()
    scores = carved_bytes(((min(PARTS, b * h), s, s), np.float32))
    assert r["workspace_by_op"]["ScaledDotProductAttention"] == scores
    assert r["workspace_by_op"]["ScaledDotProductAttentionGrad"] == 2 * scores
    kept = r["kept_for_backward_by_op"]
    assert kept["ScaledDotProductAttention"] == 2 * (b * s * d + b * h * s) * 4  # out, lse
    assert r["kept_for_backward_bytes"] == sum(kept.values()) <= r["arena_bytes"]
    bufs = extract(m).buffers
    ws = [v for v in bufs if v.workspace and v.producer.startswith("ScaledDotProduct")]
    assert len(ws) == 4 and {v.size for v in ws} == {scores, 2 * scores}
    lse = [v for v in bufs if v.producer.startswith("ScaledDotProductAttention_")
           and v.shape == (b, h, s)]
    assert len(lse) == 2 and all(v.role == "forward" for v in lse)
    assert all(v.last_reader.startswith("ScaledDotProductAttentionGrad") for v in lse)

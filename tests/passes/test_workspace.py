"""Kernel workspace is planned memory: each step's scratch is a buffer of the arena that
lives for exactly that step, verify() checks it like any buffer, poison mode fills it when
it dies, and eager mode takes it from one reusable per-thread pool."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from singa_graph.errors import PlanError
from singa_graph.ir import Graph
from singa_graph.passes import compile, verify
from singa_graph.passes.liveness import live_profile
from singa_graph.runtime import device as devices
from singa_graph.runtime.registry import workspace_bytes

rng = np.random.default_rng(0)


def _conv_chain():
    """Two padded 3x3 convs and a strided one, with a ReLU between: three workspaces."""
    x = sg.Placeholder((4, 3, 10, 10), name="x")
    w1 = sg.Parameter(data=rng.standard_normal((6, 3, 3, 3)).astype(np.float32), name="w1")
    w2 = sg.Parameter(data=rng.standard_normal((6, 6, 3, 3)).astype(np.float32), name="w2")
    w3 = sg.Parameter(data=rng.standard_normal((4, 6, 3, 3)).astype(np.float32), name="w3")
    y = ops.conv2d(ops.relu(ops.conv2d(x, w1, padding=1)), w2, padding=1)
    z = ops.conv2d(ops.relu(y), w3, stride=2, padding=1)
    return Graph([ops.sum(z)], inputs=[x])


def test_each_workspace_lives_exactly_its_step_and_is_planned():
    plan = compile(_conv_chain())
    mp = plan.memory
    conv_steps = [s for s, n in enumerate(mp.order) if n.type.startswith("Conv2d")]
    assert sorted(mp.workspace) == conv_steps
    for s, (off, size) in mp.workspace.items():
        n = mp.order[s]
        assert size == workspace_bytes(n.op, n.inputs, n.outputs) > 0
        assert 0 <= off and off + size <= mp.arena_bytes
    keys = [k for k, *_ in mp.buffers() if isinstance(k, tuple)]
    assert len(keys) == len(conv_steps)
    r = plan.memory_report()
    assert r["workspace_steps"] == 3
    assert r["workspace_peak_bytes"] == max(b for _, b in mp.workspace.values())
    # the lower bound counts workspace: it is live memory at its step
    sizes = {g: mp.groups.size(g) for g in mp.intervals}
    without = max(live_profile(sizes, mp.intervals, len(mp.order)))
    assert r["lower_bound_bytes"] > without
    verify(plan)


def test_verify_catches_workspace_overlapping_a_live_buffer():
    plan = compile(_conv_chain())
    mp = plan.memory
    s, (off, size) = next(iter(mp.workspace.items()))
    live = [g for g, (a, b) in mp.intervals.items() if a <= s <= b]
    assert live
    g = live[0]
    moved = (mp.offsets[g], min(size, mp.groups.size(g)))
    bad = dataclasses.replace(mp, workspace={**mp.workspace, s: moved})
    with pytest.raises(PlanError, match="workspace of .*overlap|overlap.*workspace of"):
        verify(bad)
    outside = dataclasses.replace(mp, workspace={**mp.workspace, s: (mp.arena_bytes, size)})
    with pytest.raises(PlanError, match="outside the arena"):
        verify(outside)


def test_poison_mode_fills_dead_workspace_and_changes_no_result():
    g = _conv_chain()
    x = rng.standard_normal((4, 3, 10, 10)).astype(np.float32)
    plain = compile(g).run([x])
    poisoned = compile(g, poison=True)
    np.testing.assert_array_equal(poisoned.run([x])[0], plain[0])
    dead = [r for regions in poisoned._dead for r in regions]
    for s, (off, size) in poisoned.memory.workspace.items():
        assert any(r.ctypes.data == poisoned.arena[off:].ctypes.data and r.nbytes == size
                   for r in dead)
    # every byte of a workspace is NaN-filled right after its step
    plan = compile(g, poison=True)
    plan._load_feeds([x])
    plan.arena.fill(0xFF)
    for i, (step, regions) in enumerate(zip(plan.steps, plan._dead)):
        step()
        for r in regions:
            r.fill(0xFF)
        if i in plan.memory.workspace:
            off, size = plan.memory.workspace[i]
            assert np.all(plan.arena[off:off + size] == 0xFF)


def test_eager_workspace_comes_from_one_reused_pool():
    x = sg.Tensor(data=rng.standard_normal((4, 3, 10, 10)).astype(np.float32))
    w = sg.Tensor(data=rng.standard_normal((6, 3, 3, 3)).astype(np.float32))
    small = sg.Tensor(data=rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    ops.conv2d(x, w, padding=1)
    first = devices.scratch(None, 1).ctypes.data
    size = devices.scratch_bytes()
    assert size >= workspace_bytes(ops.Conv2d(1, 1), [x, w], [ops.Conv2d(1, 1).infer(x, w)[0]])
    for _ in range(3):  # smaller requests reuse the pool: no new allocation
        ops.conv2d(small, w, padding=1)
        ops.conv2d(x, w, padding=1)
    assert devices.scratch(None, 1).ctypes.data == first
    assert devices.scratch_bytes() == size

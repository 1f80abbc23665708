"""The snapshot pickle has PyTorch's memory-snapshot layout and loads with torch's own
``torch.cuda._memory_viz`` helpers (when torch is installed)."""
from __future__ import annotations

import pickle
import sys

import pytest

from singa_graph import viz

from viz_plans import expected_live


def _snapshot(plan, tmp_path):
    p = tmp_path / "cnn.snapshot.pickle"
    viz.dump(plan, p)
    with open(p, "rb") as f:
        return pickle.load(f)


def test_snapshot_replays_the_plan(cnn_plan, tmp_path):
    snap = _snapshot(cnn_plan, tmp_path)
    (trace,) = snap["device_traces"]
    live, peak, base = {}, 0, snap["segments"][0]["address"]
    for e in trace:
        if e["action"] == "alloc":
            assert all(e["addr"] >= a + s or e["addr"] + e["size"] <= a
                       for a, s in live.items())
            live[e["addr"]] = e["size"]
            peak = max(peak, sum(live.values()))
            assert e["addr"] + e["size"] <= base + cnn_plan.memory.arena_bytes
        elif e["action"] == "free_completed":
            del live[e["addr"]]
    assert live == {}
    assert peak == max(expected_live(cnn_plan))
    arena, persistent = snap["segments"]
    assert arena["total_size"] == cnn_plan.memory.arena_bytes
    assert sum(b["requested_size"] for b in persistent["blocks"]) == \
        cnn_plan.memory.persistent_bytes


def test_snapshot_is_written_without_torch(cnn_plan, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # importing torch would now fail
    _snapshot(cnn_plan, tmp_path)


def test_torch_memory_viz_reads_it(cnn_plan, tmp_path):
    mv = pytest.importorskip("torch.cuda._memory_viz",
                             reason="torch is not installed (make bench installs it)")
    snap = _snapshot(cnn_plan, tmp_path)
    summary = mv.segsum(snap)  # checks that the blocks account for every segment byte
    assert "segments: 2" in summary
    text = mv.trace(snap)
    n_alloc = sum(e["action"] == "alloc" for e in snap["device_traces"][0])
    assert f"{len(snap['device_traces'][0])} entries" in text
    assert text.count(" = a[") == n_alloc  # every allocation lies in the arena segment 'a'
    assert text.count("del ") == n_alloc
    lines = mv.segments(snap, format_flamegraph=lambda s: s)
    assert "active_allocated" in lines and "parameter conv1.W" in lines
    mem = mv.memory(snap, format_flamegraph=lambda s: s)
    assert "stream_0;inactive" in mem
    html = mv.trace_plot(snap)  # the page PyTorch's viewer renders from the same pickle
    assert "snapshot.pickle" in html

"""json, the memory map and the shared extraction: buffers match the memory plan exactly,
workspaces are marked, and every format reads the same data."""
from __future__ import annotations

import json

import pytest

from singa_graph import viz
from singa_graph.errors import GraphError
from singa_graph.viz.charmap import CHARS
from singa_graph.viz.extract import extract

from viz_plans import expected_buffers, expected_live, workspaces


def _check_buffers(plan, buffers):
    mp = plan.memory
    groups = [b for b in buffers if not b["workspace"]]
    assert len(groups) == len(mp.intervals)
    ws = {b["first"]: (b["offset"], b["size"]) for b in buffers if b["workspace"]}
    assert ws == workspaces(plan)
    by_offset = {(mp.offsets[g], mp.intervals[g]): g for g in mp.intervals}
    for b in groups:
        g = by_offset[(b["offset"], (b["first"], b["last"]))]
        assert b["size"] == mp.groups.size(g)
        assert b["tensor"] == mp.groups.tensors[g].name
        assert b["producer"] == plan.nodes[b["first"]].name
        assert b["last_reader"] == plan.nodes[b["last"]].name
        assert b["offset"] + b["size"] <= mp.arena_bytes


def test_json_has_nodes_edges_schedule_and_buffers(cnn_plan, tmp_path):
    p = tmp_path / "cnn.json"
    assert viz.dump(cnn_plan, p) == "json"
    d = json.loads(p.read_text())
    assert [n["name"] for n in d["nodes"]] == [n.name for n in cnn_plan.graph.nodes]
    assert d["schedule"] == [n.name for n in cnn_plan.nodes]
    assert len(d["edges"]) == sum(len(n.inputs) for n in cnn_plan.graph.nodes)
    assert d["arena_bytes"] == cnn_plan.memory.arena_bytes
    assert d["live"] == expected_live(cnn_plan)
    assert max(d["live"]) <= cnn_plan.memory.arena_bytes
    if not workspaces(cnn_plan):
        assert max(d["live"]) == cnn_plan.memory.lower_bound
    assert sum(t["nbytes"] for t in d["persistent"]) == cnn_plan.memory.persistent_bytes
    _check_buffers(cnn_plan, d["buffers"])
    roles = {n["role"] for n in d["nodes"]}
    assert roles == {"forward", "backward", "update"}
    assert {t["role"] for t in d["leaves"]} == {"input", "parameter", "state"}


def test_live_buffers_never_overlap(cnn_plan):
    bufs = extract(cnn_plan).buffers
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                assert a.offset + a.size <= b.offset or b.offset + b.size <= a.offset


def test_workspace_buffers_are_marked(cnn_plan, monkeypatch):
    """MemoryPlan.workspace maps a step to the (offset, bytes) of its kernel's scratch."""
    mp = cnn_plan.memory
    step = 0
    before = expected_live(cnn_plan)[step] - sum(
        n for s, (_, n) in workspaces(cnn_plan).items() if s == step)
    monkeypatch.setattr(mp, "workspace", {step: (mp.arena_bytes, 4096)}, raising=False)
    view = extract(cnn_plan)
    (ws,) = [b for b in view.buffers if b.workspace]
    assert (ws.first, ws.last, ws.size, ws.offset) == (step, step, 4096, mp.arena_bytes)
    assert ws.producer == cnn_plan.nodes[step].name
    assert view.live[step] == before + 4096
    d = json.loads(viz.to_json(view))
    assert sum(b["workspace"] for b in d["buffers"]) == 1
    assert 'class="buf ws"' in viz.timeline_svg(view)
    assert "workspace" in viz.memory_map(view)


def test_memory_map_rows(cnn_plan):
    text = viz.memory_map(cnn_plan, width=40)
    rows = [r for r in text.splitlines() if r[:5].strip().isdigit() and "|" in r]
    assert len(rows) == len(cnn_plan.nodes)
    view = extract(cnn_plan)
    for step, row in enumerate(rows):
        cells = row.split("|")[1]
        assert len(cells) == 40
        assert float(row.split("|")[2].split()[0]) == pytest.approx(view.live[step] / 1024,
                                                                    abs=0.06)
        assert row.rstrip().endswith(cnn_plan.nodes[step].name)
        big = [b for b in view.buffers if b.first <= step <= b.last
               and b.size > 2 * view.arena_bytes / 40]
        for b in big:  # a buffer wider than two columns shows at its middle
            mid = int((b.offset + b.size / 2) / (view.arena_bytes / 40))
            assert cells[mid] == CHARS[b.id % len(CHARS)]
    assert viz.memory_map(cnn_plan.memory, width=40) == text
    with pytest.raises(ValueError, match="width"):
        viz.memory_map(cnn_plan, width=3)


def test_model_and_errors(cnn_plan, tmp_path):
    from singa_graph import zoo

    with pytest.raises(GraphError, match="no compiled plan"):
        viz.dump(zoo.MLP(), tmp_path / "m.html")
    with pytest.raises(TypeError, match="viz.dump takes"):
        viz.dump(42, tmp_path / "m.html")
    with pytest.raises(ValueError, match="format"):
        viz.dump(cnn_plan, tmp_path / "m.txt")
    from singa_graph.ir.graph import Graph

    with pytest.raises(ValueError, match="memory plan"):
        viz.dump(Graph(cnn_plan.graph.outputs), tmp_path / "m.memory.svg")
    assert viz.format_of("a/b.memory.svg") == "memory.svg"
    assert viz.format_of("x.SNAPSHOT.pickle") == "snapshot.pickle"
    assert list(tmp_path.iterdir()) == []


def test_memory_svg_draws_every_buffer(cnn_plan, tmp_path):
    import xml.etree.ElementTree as ET

    p = tmp_path / "cnn.memory.svg"
    viz.dump(cnn_plan, p)
    root = ET.parse(p).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    rects = [r for r in root.iter(f"{ns}rect") if "buf" in r.get("class", "").split()]
    assert len(rects) == expected_buffers(cnn_plan)
    assert [ln.get("class") for ln in root.iter(f"{ns}line") if ln.get("class")] == \
        ["arena", "bound"]
    assert len(list(root.iter(f"{ns}polyline"))) == 1  # the live-bytes curve


def test_layer_scopes_are_per_thread():
    """Nodes remember the layer that made them; a scope entered in one thread is not seen
    by nodes created in another."""
    import threading

    from singa_graph.ir import node as _node

    seen = {}

    def other():
        seen["scope"] = _node.current_scope()

    with _node.scope("block1.conv1"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert _node.current_scope() == "block1.conv1"
    assert seen["scope"] is None and _node.current_scope() is None

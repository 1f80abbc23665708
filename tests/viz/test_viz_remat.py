"""Pictures of a plan under a memory budget: recompute nodes in the graph, recomputed
buffers and the budget line in the memory timeline (and so in viz.dump's files)."""
from __future__ import annotations

import json

import numpy as np

from singa_graph import opt, random as sg_random, viz, zoo


def _plans():
    x = np.zeros((8, 3, 16, 16), np.float32)
    y = np.zeros(8, np.int32)
    out = []
    for budget in (None, "80%"):
        sg_random.seed(0)
        m = zoo.ResNet(widths=(8, 16))
        m.set_optimizer(opt.SGD(lr=0.1))
        m.compile([x], memory_budget=budget)
        out.append(m.plan_for(x, y))
    return out


def test_recompute_nodes_buffers_and_the_budget_are_drawn(tmp_path):
    plain, budgeted = _plans()
    view = viz.extract(budgeted)
    rec = [n for n in view.nodes if n.recompute]
    assert rec and len(rec) == budgeted.memory_report()["recomputed_nodes"]
    assert any(b.recomputed for b in view.buffers)
    dot = viz.dot.to_dot(view)
    assert dot.count("dashed") >= len(rec)
    svg = viz.timeline_svg(view)
    assert 'class="budget"' in svg and "recomputed" in svg
    assert 'class="budget"' not in viz.timeline_svg(viz.extract(plain))
    assert not any(n.recompute for n in viz.extract(plain).nodes)
    viz.dump(budgeted, str(tmp_path / "p.html"))
    html = (tmp_path / "p.html").read_text()
    assert 'class="budget"' in html and "recomputed nodes" in html
    viz.dump(budgeted, str(tmp_path / "p.memory.svg"))
    assert 'class="budget"' in (tmp_path / "p.memory.svg").read_text()
    viz.dump(budgeted, str(tmp_path / "p.json"))
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["report"]["budget_bytes"] == budgeted.memory.budget
    assert sum(n["recompute"] for n in data["nodes"]) == len(rec)

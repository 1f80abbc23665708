"""The DOT dump parses back (pydot, and Graphviz's dot where installed) with every node and
edge of the graph; svg/png need dot and say how to install it when it is missing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from singa_graph import viz
from singa_graph.errors import ToolMissingError
from singa_graph.ir.graph import Graph

pydot = pytest.importorskip("pydot")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pyparsing, in pydot


def _expected(plan):
    g = plan.graph
    prod = g.producer()
    nodes = {n.name for n in g.nodes} | {t.name for t in g.leaves()}
    edges = set()
    for n in g.nodes:
        for x in n.inputs:
            p = prod.get(id(x))
            edges.add((p.name if p is not None else x.name, n.name))
    return nodes, edges


def _walk(graph, nodes, edges):
    for n in graph.get_nodes():
        name = n.get_name().strip('"')
        if name not in ("node", "edge", "graph") and (name not in nodes
                                                       or n.get_attributes()):
            nodes[name] = n  # a cluster lists its nodes by name; keep the declaration
    for e in graph.get_edges():
        edges.add((e.get_source().strip('"'), e.get_destination().strip('"')))
    for sub in graph.get_subgraphs():
        _walk(sub, nodes, edges)


@pytest.fixture(scope="module")
def parsed_cnn(cnn_plan):
    """The CNN plan's DOT parsed by pydot (once: pyparsing takes seconds)."""
    (parsed,) = pydot.graph_from_dot_data(viz.to_dot(cnn_plan))
    return parsed


def test_dot_parses_back_with_pydot(cnn_plan, parsed_cnn):
    parsed = parsed_cnn
    nodes, edges = {}, set()
    _walk(parsed, nodes, edges)
    want_nodes, want_edges = _expected(cnn_plan)
    assert want_nodes <= set(nodes)
    assert want_edges <= edges
    assert len(edges) == len(want_edges)
    # op nodes carry their step and op, and are filled by role
    step = {n.name: i for i, n in enumerate(cnn_plan.nodes)}
    for n in cnn_plan.graph.nodes:
        label = nodes[n.name].get("label")
        assert f"#{step[n.name]}  {n.type}" in label and n.name in label
        assert ("+ReLU" in label) == bool(getattr(n.op, "relu", False))  # fused epilogues
    fills = {nodes[n.name].get("fillcolor") for n in cnn_plan.graph.nodes}
    assert len(fills) == 3  # forward, backward, optimizer update


def test_edges_carry_shape_and_dtype(cnn_plan, parsed_cnn):
    parsed = parsed_cnn
    first = cnn_plan.graph.nodes[0]  # Conv2d reading x
    labels = {(e.get_source().strip('"'), e.get_destination().strip('"')): e.get("label")
              for e in parsed.get_edges()}
    assert labels[("x", first.name)].strip('"') == "4x1x28x28 f32"


def test_clusters_follow_layer_hierarchy(resnet_plan):
    (parsed,) = pydot.graph_from_dot_data(viz.to_dot(resnet_plan, leaves=False))

    def clusters(g, out):
        for s in g.get_subgraphs():
            out.append(s.get("label").strip('"'))
            clusters(s, out)
        return out

    labels = clusters(parsed, [])
    assert "stages.0" in labels and "stages.0 (grad)" in labels
    assert "stages.1.down" not in labels  # a one-node layer gets no box, its label says it
    scopes = {n.scope for n in resnet_plan.graph.nodes}
    assert "stages.0.conv1" in scopes and "stages.1.down_bn" in scopes


def test_graph_without_plan_and_without_leaves(cnn_plan):
    g = Graph(cnn_plan.graph.outputs)
    text = viz.to_dot(g, leaves=False)
    (parsed,) = pydot.graph_from_dot_data(text)
    nodes, edges = {}, set()
    _walk(parsed, nodes, edges)
    assert set(nodes) == {n.name for n in g.nodes}
    assert "#" not in nodes[g.nodes[0].name].get("label")  # no steps without a plan


@pytest.mark.skipif(shutil.which("dot") is None,
                    reason="Graphviz's dot is not installed (Debian: apt-get install graphviz)")
def test_dot_program_reads_it_and_renders(cnn_plan, tmp_path):
    r = subprocess.run(["dot", "-Tjson"], input=viz.to_dot(cnn_plan).encode(),
                       capture_output=True, check=True)
    laid = json.loads(r.stdout)
    objs = laid["objects"]
    names = {o["name"] for o in objs if "nodes" not in o}  # clusters list their nodes
    want_nodes, want_edges = _expected(cnn_plan)
    assert want_nodes == names
    got = {(objs[e["tail"]]["name"], objs[e["head"]]["name"]) for e in laid["edges"]}
    assert got == want_edges
    for fmt, magic in (("svg", b"<svg"), ("png", b"\x89PNG")):
        p = tmp_path / f"cnn.{fmt}"
        assert viz.dump(cnn_plan, p) == fmt
        assert magic in p.read_bytes()[:400]


def test_svg_without_graphviz_says_how_to_install(cnn_plan, tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ToolMissingError, match="apt-get install graphviz"):
        viz.dump(cnn_plan, tmp_path / "cnn.svg")
    with pytest.raises(ToolMissingError, match="librsvg2-bin"):
        viz.dump(cnn_plan, tmp_path / "cnn.memory.png")
    assert os.listdir(tmp_path) == []  # a failed dump leaves nothing behind

"""Graphviz DOT text of a :class:`~singa_graph.viz.extract.View`.

Nodes are labelled with their op, name and (in a plan) step, and filled by role; edges carry
the shape and dtype of the tensor they stand for; clusters follow the layer hierarchy, with the
gradient and update nodes of a layer in a cluster of their own next to its forward cluster.
"""
from __future__ import annotations

from .extract import View, op_text, shape_text, short_dtype
from .style import COLORS, ROLE_TEXT


def quote(s: str) -> str:
    """A DOT double-quoted string."""
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _html(s: str) -> str:
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def node_label(n, scope: bool = False, name: bool = True) -> str:
    """An HTML-like label: step and op in bold, then the node name (and its layer when no
    cluster box shows it; only the layer with ``name=False``)."""
    head = f"#{n.step}  {op_text(n)}" if n.step is not None else op_text(n)
    layer = n.scope if scope and n.scope else ""
    sub = (n.name + (f"  ({layer})" if layer else "")) if name else layer
    if not sub:
        return f"<<B>{_html(head)}</B>>"
    return f'<<B>{_html(head)}</B><BR/><FONT POINT-SIZE="9">{_html(sub)}</FONT>>'


def _connected(nodes, edges) -> bool:
    """Whether ``nodes`` form one weakly connected piece through ``edges`` among them."""
    names = {n.name for n in nodes}
    parent = {k: k for k in names}

    def find(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for e in edges:
        if e.src in names and e.dst in names:
            parent[find(e.src)] = find(e.dst)
    return len({find(k) for k in names}) <= 1


def _all_nodes(sub) -> list:
    out = list(sub.get("__nodes__", []))
    for k, v in sub.items():
        if k != "__nodes__":
            out.extend(_all_nodes(v))
    return out


def _cluster_tree(view: View) -> dict:
    """``{part: subtree}`` with ``"__nodes__"`` lists: forward scopes under ``fwd``,
    gradient/update scopes under ``grad``."""
    tree: dict = {}
    for n in view.nodes:
        if not n.scope:
            continue
        phase = "fwd" if n.role == "forward" else "grad"
        sub = tree.setdefault(phase, {})
        for part in n.scope.split("."):
            sub = sub.setdefault(part, {})
        sub.setdefault("__nodes__", []).append(n)
    return tree


def _emit_cluster(lines, name, sub, prefix, phase, indent, counter, edges, boxed):
    """Emit the cluster ``sub`` unless it holds one node or pieces that are not connected
    among themselves (a layer called twice, such as a shared ReLU): a box around those
    would drag distant parts of the graph together."""
    everything = _all_nodes(sub)
    if len(everything) < 2 or not _connected(everything, edges):
        for k in sub:
            if k != "__nodes__":
                _emit_cluster(lines, k, sub[k], f"{prefix}.{name}" if prefix else name, phase,
                              indent, counter, edges, boxed)
        return
    children = [k for k in sub if k != "__nodes__"]
    nodes = sub.get("__nodes__", [])
    # collapse chains such as ``stages`` -> ``0`` into one cluster labelled ``stages.0``
    while not nodes and len(children) == 1:
        name = f"{name}.{children[0]}"
        sub = sub[children[0]]
        children = [k for k in sub if k != "__nodes__"]
        nodes = sub.get("__nodes__", [])
    path = f"{prefix}.{name}" if prefix else name
    counter[0] += 1
    pad = "  " * indent
    label = path if phase == "fwd" else f"{path} (grad)"
    lines.append(f"{pad}subgraph {quote(f'cluster_{counter[0]}')} {{")
    lines.append(f"{pad}  label={quote(label)}; style=\"rounded,dashed\"; color=\"#888888\"; "
                 f"fontcolor=\"#555555\";")
    for n in nodes:
        lines.append(f"{pad}  {quote(n.name)};")
        boxed.add(n.name)
    for k in children:
        _emit_cluster(lines, k, sub[k], path, phase, indent + 1, counter, edges, boxed)
    lines.append(f"{pad}}}")


def to_dot(view: View, leaves: bool = True, edge_labels: bool = True,
           node_names: bool = True) -> str:
    """DOT text of ``view``. With ``leaves=False`` only op nodes and the edges between them
    are drawn (inputs, parameters and state are left out). For compact pictures (documents),
    ``edge_labels=False`` keeps shapes and dtypes as edge tooltips only and
    ``node_names=False`` labels nodes with step, op and layer, without the node name."""
    # newrank: without it dot's ranking fails ("trouble in init_rank") on some graphs whose
    # layer clusters are crossed by many edges (the blocks of a transformer)
    lines = [f"digraph {quote(view.name)} {{",
             '  graph [rankdir=TB, newrank=true, fontname="Helvetica", fontsize=12, '
             'nodesep=0.2, ranksep=0.3, labelloc=t, label=' + quote(_title(view)) + "];",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=11, '
             'margin="0.08,0.03", height=0.3, color="#555555"];',
             '  edge [fontname="Helvetica", fontsize=8, color="#777777", fontcolor="#444444", '
             "arrowsize=0.6];"]
    if leaves:
        for t in view.leaves:
            shape = {"input": "invhouse", "parameter": "box"}.get(t.role, "box")
            lab = f"{t.name}\n{shape_text(t.shape)} {short_dtype(t.dtype)}"
            lines.append(f"  {quote(t.name)} [label={quote(lab)}, shape={shape}, "
                         f"style=\"filled\", fillcolor={quote(COLORS[t.role])}, fontsize=9, "
                         f"tooltip={quote(ROLE_TEXT[t.role])}];")
    clusters, boxed, counter = [], set(), [0]
    for phase, sub in _cluster_tree(view).items():
        for k in sub:
            _emit_cluster(clusters, k, sub[k], "", phase, 1, counter, view.edges, boxed)
    for n in view.nodes:
        tip = f"{ROLE_TEXT[n.role]}" + (f", layer {n.scope}" if n.scope else "")
        # recompute nodes (passes/remat.py): a forward op run again, drawn dashed
        mark = ', style="rounded,filled,dashed", penwidth=2, color="#7a3b00"' \
            if n.recompute else ""
        tip += ", recomputed" if n.recompute else ""
        lines.append(f"  {quote(n.name)} [label={node_label(n, n.name not in boxed, node_names)}, "
                     f"fillcolor={quote(COLORS[n.role])}, tooltip={quote(tip)}{mark}];")
    lines.extend(clusters)
    leaf_names = {t.name for t in view.leaves}
    role = {n.name: n.role for n in view.nodes}
    for e in view.edges:
        if not leaves and e.src in leaf_names:
            continue
        lab = f"{shape_text(e.shape)} {short_dtype(e.dtype)}"
        attr = f"label={quote(lab)}, tooltip={quote(e.tensor)}" if edge_labels else \
            f"tooltip={quote(f'{e.tensor}: {lab}')}"
        if role.get(e.src) == "forward" and role.get(e.dst) != "forward":
            attr += ", weight=0"  # saved activations: keep the forward chain straight
        lines.append(f"  {quote(e.src)} -> {quote(e.dst)} [{attr}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _title(view: View) -> str:
    if not view.report:
        return f"{view.name}: {len(view.nodes)} nodes"
    return (f"{view.name}: {len(view.nodes)} nodes, schedule {view.report.get('schedule')}")

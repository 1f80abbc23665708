"""A layered drawing of the op graph as SVG, for the HTML page (no Graphviz needed).

Nodes are ranked by their longest path from a source, ordered inside a rank by the mean
position of their predecessors (a few barycentre sweeps, as in Sugiyama-style layouts), and
joined by curves. Each node is a ``g.node`` element with ``data-name``, so the page's script
can highlight it and its buffers.
"""
from __future__ import annotations

from xml.sax.saxutils import escape

from .extract import View, op_text, shape_text, short_dtype
from .style import COLORS, ROLE_TEXT

CHAR_W, NODE_H, RANK_GAP, NODE_GAP = 6.6, 34, 34, 14


def _ranks(view: View) -> dict[str, int]:
    names = {n.name for n in view.nodes}
    preds: dict[str, list[str]] = {n.name: [] for n in view.nodes}
    for e in view.edges:
        if e.src in names:
            preds[e.dst].append(e.src)
    rank: dict[str, int] = {}
    for n in view.nodes:  # creation order is a topological order
        rank[n.name] = 1 + max((rank[p] for p in preds[n.name] if p in rank), default=-1)
    return rank


def layout(view: View) -> tuple[dict[str, tuple[float, float, float]], float, float]:
    """``({node: (x centre, y top, width)}, total width, total height)``."""
    rank = _ranks(view)
    layers: dict[int, list[str]] = {}
    for n in view.nodes:
        layers.setdefault(rank[n.name], []).append(n.name)
    preds: dict[str, list[str]] = {n.name: [] for n in view.nodes}
    for e in view.edges:
        if e.src in preds:
            preds[e.dst].append(e.src)
    pos = {name: float(i) for lay in layers.values() for i, name in enumerate(lay)}
    for _ in range(4):
        for r in sorted(layers):
            lay = layers[r]
            key = {m: (sum(pos[p] for p in preds[m]) / len(preds[m]) if preds[m] else pos[m])
                   for m in lay}
            lay.sort(key=lambda m: key[m])
            for i, m in enumerate(lay):
                pos[m] = float(i)
    widths = {n.name: CHAR_W * max(len(_head(n)), len(n.name)) + 16 for n in view.nodes}
    row_w = {r: sum(widths[m] for m in lay) + NODE_GAP * (len(lay) - 1)
             for r, lay in layers.items()}
    total_w = max(row_w.values(), default=0) + 20
    places = {}
    for r, lay in layers.items():
        x = (total_w - row_w[r]) / 2
        for m in lay:
            places[m] = (x + widths[m] / 2, 10 + r * (NODE_H + RANK_GAP), widths[m])
            x += widths[m] + NODE_GAP
    total_h = 10 + (max(layers, default=0) + 1) * (NODE_H + RANK_GAP)
    return places, total_w, total_h


def _head(n) -> str:
    return f"#{n.step} {op_text(n)}" if n.step is not None else op_text(n)


def graph_svg(view: View) -> str:
    """The op graph of ``view`` as an SVG element (leaves are left out)."""
    places, w, h = layout(view)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h:.0f}" '
           f'font-family="Helvetica, Arial, sans-serif" class="graph">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/>'
           '</marker></defs>', '<g class="edges">']
    for e in view.edges:
        if e.src not in places:
            continue
        (x0, y0, _), (x1, y1, _) = places[e.src], places[e.dst]
        y0 += NODE_H
        my = (y0 + y1) / 2
        out.append(f'<path class="edge" data-src="{escape(e.src)}" data-dst="{escape(e.dst)}" '
                   f'd="M{x0:.1f},{y0:.1f} C{x0:.1f},{my:.1f} {x1:.1f},{my:.1f} {x1:.1f},'
                   f'{y1:.1f}" fill="none" stroke="#999" stroke-width="1" '
                   f'marker-end="url(#arrow)"><title>{escape(e.tensor)}: '
                   f'{shape_text(e.shape)} {short_dtype(e.dtype)}</title></path>')
    out.append('</g><g class="nodes">')
    for n in view.nodes:
        x, y, nw = places[n.name]
        tip = f"{n.name} ({ROLE_TEXT[n.role]}" + (f", layer {n.scope})" if n.scope else ")")
        out.append(f'<g class="node" data-name="{escape(n.name)}" '
                   f'transform="translate({x - nw / 2:.1f},{y:.1f})">'
                   f'<title>{escape(tip)}</title>'
                   f'<rect width="{nw:.1f}" height="{NODE_H}" rx="6" fill="{COLORS[n.role]}" '
                   f'stroke="#555"/>'
                   f'<text x="{nw / 2:.1f}" y="14" font-size="11" font-weight="bold" '
                   f'text-anchor="middle">{escape(_head(n))}</text>'
                   f'<text x="{nw / 2:.1f}" y="27" font-size="10" text-anchor="middle">'
                   f'{escape(n.name)}</text></g>')
    out.append("</g></svg>")
    return "\n".join(out)

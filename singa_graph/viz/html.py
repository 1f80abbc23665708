"""The ``html`` dump: one self-contained page (no network references) with the graph, the
schedule, the memory timeline and, when measured, the per-op time profile.

Hovering over a buffer of the timeline shows its tensor, shape, producer, last reader and
bytes; clicking a node (in the graph or the schedule) highlights the buffers it writes or
reads, and clicking a buffer highlights its producer and last reader.
"""
from __future__ import annotations

import json
from html import escape

from .extract import View, op_text, shape_text
from .layout import graph_svg
from .style import COLORS, ROLE_TEXT, human_bytes
from .timeline import timeline_svg

CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px}
.facts span{margin-right:18px}
.row{display:flex;gap:16px;align-items:flex-start}
#graph{flex:0 0 42%;max-height:78vh;overflow:auto;border:1px solid #ccc}
#right{flex:1;min-width:0}
svg.timeline{width:100%;height:auto}
g.node{cursor:pointer} g.node.sel rect{stroke:#d00;stroke-width:3}
g.node.dim{opacity:.35} path.edge.dim{opacity:.15}
rect.buf{cursor:pointer} rect.buf.hl{stroke:#d00;stroke-width:2.5}
rect.buf.dim{opacity:.3}
#tip{position:absolute;display:none;background:#fffff0;border:1px solid #888;
 padding:5px 7px;font-size:12px;white-space:pre;pointer-events:none;z-index:10}
#info{font-size:13px;white-space:pre-wrap;background:#f7f7f7;padding:8px;min-height:3em}
table{border-collapse:collapse;font-size:12px} td,th{padding:2px 8px;text-align:left}
tr:nth-child(even){background:#f6f6f6} tr.sel{background:#ffe9a8}
#schedule tbody tr{cursor:pointer} td.num{text-align:right}
.bar{background:#9dc3e6;height:10px;display:inline-block}
.key{display:inline-block;width:12px;height:10px;margin:0 4px 0 10px}
"""

SCRIPT = r"""
(function () {
  const D = JSON.parse(document.getElementById('viz-data').textContent);
  const tip = document.getElementById('tip'), info = document.getElementById('info');
  const rects = Array.from(document.querySelectorAll('rect.buf'));
  const nodes = Array.from(document.querySelectorAll('g.node'));
  const rows = Array.from(document.querySelectorAll('#schedule tbody tr'));
  const byName = {};
  D.nodes.forEach(n => { byName[n.name] = n; });
  function kb(n) { return n >= 1048576 ? (n / 1048576).toFixed(2) + ' MiB'
                   : n >= 1024 ? (n / 1024).toFixed(1) + ' KiB' : n + ' B'; }
  function bufText(b) {
    return b.tensor + (b.workspace ? '  (kernel workspace)' : '') + '\n' +
      (b.workspace ? '' : 'shape ' + b.shape.join('x') + ' ' + b.dtype + '\n') +
      'bytes ' + kb(b.size) + ' at offset ' + b.offset + '\n' +
      'steps ' + b.first + '..' + b.last + '\nproducer ' + b.producer +
      '\nlast reader ' + b.last_reader +
      (b.tensors.length > 1 ? '\nshared by ' + b.tensors.join(', ') : '');
  }
  function clear() {
    document.querySelectorAll('.sel,.hl,.dim').forEach(e => e.classList.remove('sel', 'hl', 'dim'));
  }
  function touches(b, n) {
    if (b.producer === n.name || b.last_reader === n.name) return true;
    return b.tensors.some(t => n.inputs.includes(t) || n.outputs.includes(t));
  }
  function selectNode(name) {
    const n = byName[name]; if (!n) return;
    clear();
    const mine = D.buffers.filter(b => touches(b, n));
    rects.forEach(r => r.classList.add(mine.includes(D.buffers[+r.dataset.id]) ? 'hl' : 'dim'));
    nodes.forEach(g => g.classList.toggle('sel', g.dataset.name === name));
    rows.forEach(r => r.classList.toggle('sel', r.dataset.name === name));
    const g = nodes.find(g => g.dataset.name === name);
    if (g && g.scrollIntoView) g.scrollIntoView({block: 'nearest', inline: 'nearest'});
    info.textContent = n.name + ': ' + n.op + ' (' + n.role + (n.scope ? ', layer ' + n.scope : '') +
      ')' + (n.step === null ? '' : ', step ' + n.step) +
      (n.seconds === null || n.seconds === undefined ? '' : ', ' + (n.seconds * 1e3).toFixed(3) + ' ms') +
      '\ninputs: ' + n.inputs.join(', ') + '\noutputs: ' + n.outputs.join(', ') +
      (Object.keys(n.attrs).length ? '\nattributes: ' + Object.entries(n.attrs).map(
        ([k, v]) => k + '=' + v).join(', ') : '') +
      '\narena buffers: ' + (mine.length ? mine.map(b => b.tensor + ' (' + kb(b.size) + ')').join(', ') : 'none');
  }
  rects.forEach(r => {
    const b = D.buffers[+r.dataset.id];
    const t = r.querySelector('title'); if (t) t.remove();
    r.addEventListener('mousemove', ev => {
      tip.textContent = bufText(b); tip.style.display = 'block';
      tip.style.left = (ev.pageX + 14) + 'px'; tip.style.top = (ev.pageY + 10) + 'px';
    });
    r.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
    r.addEventListener('click', () => {
      clear();
      r.classList.add('hl');
      nodes.forEach(g => g.classList.toggle('sel', g.dataset.name === b.producer ||
                                                   g.dataset.name === b.last_reader));
      info.textContent = bufText(b);
    });
  });
  nodes.forEach(g => g.addEventListener('click', () => selectNode(g.dataset.name)));
  rows.forEach(r => r.addEventListener('click', () => selectNode(r.dataset.name)));
  const pane = document.getElementById('graph');  // start with the first node in view
  if (nodes.length) {
    const box = nodes[0].getBoundingClientRect(), pb = pane.getBoundingClientRect();
    pane.scrollLeft = Math.max(0, box.left - pb.left - (pb.width - box.width) / 2);
  }
  document.body.dataset.ready = String(nodes.length) + ' nodes, ' + rects.length + ' buffers';
})();
"""


def _facts(view: View) -> str:
    r = view.report
    if not r:
        return f"<p class='facts'>{len(view.nodes)} nodes (no plan: no schedule or memory)</p>"
    items = [("schedule", escape(str(r.get("schedule")))), ("steps", str(len(view.schedule))),
             ("arena", human_bytes(view.arena_bytes)),
             ("lower bound", human_bytes(view.lower_bound)),
             ("no reuse", human_bytes(r.get("no_reuse_bytes", 0))),
             ("persistent", human_bytes(r.get("persistent_bytes", 0))),
             ("kept for backward", human_bytes(r.get("kept_for_backward_bytes", 0))),
             ("in-place ops", str(r.get("inplace_ops", 0)))]
    if r.get("budget_bytes") is not None:
        items += [("budget", human_bytes(r["budget_bytes"])),
                  ("recomputed nodes", str(r.get("recomputed_nodes", 0))),
                  ("recompute FLOPs", f"{100 * r.get('recompute_flops', 0):.1f}%")]
    return "<p class='facts'>" + "".join(f"<span><b>{k}</b> {v}</span>" for k, v in items) + \
        "</p>"


def _legend(view: View) -> str:
    """The colours of the roles present in the graph and the timeline."""
    present = {n.role for n in view.nodes} | {"workspace" for b in view.buffers if b.workspace}
    return "<p>" + "".join(f"<span class='key' style='background:{COLORS[r]}'></span>"
                           f"{ROLE_TEXT[r]}" for r in ("forward", "backward", "update",
                                                       "workspace") if r in present) + "</p>"


def _schedule_table(view: View) -> str:
    by_name = {n.name: n for n in view.nodes}
    timed = any(n.seconds is not None for n in view.nodes)
    head = ("<tr><th>step</th><th>node</th><th>op</th><th>role</th><th>layer</th>"
            "<th>outputs</th><th>live</th>" + ("<th>ms</th>" if timed else "") + "</tr>")
    out = [f"<table id='schedule'><thead>{head}</thead><tbody>"]
    shapes = {e.tensor: e.shape for e in view.edges}
    for step, name in enumerate(view.schedule):
        n = by_name[name]
        outs = ", ".join(f"{escape(o)} {shape_text(shapes[o])}" if o in shapes else escape(o)
                         for o in n.outputs)
        ms = (f"<td class='num'>{n.seconds * 1e3:.3f}</td>" if timed and n.seconds is not None
              else "<td></td>" if timed else "")
        out.append(f"<tr data-name='{escape(name)}'><td class='num'>{step}</td>"
                   f"<td>{escape(name)}</td><td>{escape(op_text(n))}</td><td>{n.role}</td>"
                   f"<td>{escape(n.scope or '')}</td><td>{outs}</td>"
                   f"<td class='num'>{human_bytes(view.live[step])}</td>{ms}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _profile(view: View) -> str:
    p = view.profile
    if not p:
        return ""
    total = max(p["total_seconds"], 1e-12)
    rows = "".join(f"<tr><td>{escape(t)}</td><td class='num'>{c}</td>"
                   f"<td class='num'>{s * 1e3:.3f}</td><td class='num'>{100 * s / total:.1f}</td>"
                   f"<td><span class='bar' style='width:{300 * s / total:.0f}px'></span></td>"
                   "</tr>" for t, c, s in p["by_type"])
    return (f"<h2>Time profile</h2><p>{p['total_seconds'] * 1e3:.3f} ms per run (median of "
            f"the measured runs, per node)</p><table id='profile'><thead><tr><th>op type</th>"
            f"<th>count</th><th>ms</th><th>%</th><th></th></tr></thead><tbody>{rows}"
            "</tbody></table>")


def to_html(view: View) -> str:
    data = json.dumps(view.to_dict(), default=str).replace("</", "<\\/")
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             f"<title>{escape(view.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(view.name)}</h1>", _facts(view), _legend(view),
             "<div class='row'>",
             f"<div id='graph'>{graph_svg(view)}</div><div id='right'>"]
    if view.schedule:
        parts += ["<h2>Memory timeline</h2>", timeline_svg(view, title=False),
                  "<p>Hover over a buffer for its tensor; click a node or a schedule row to "
                  "highlight its buffers.</p>"]
    parts += ["<div id='info'>Click a node or a buffer.</div></div></div>"]
    if view.schedule:
        parts += ["<h2>Schedule</h2>", _schedule_table(view)]
    parts += [_profile(view), "<div id='tip'></div>",
              f"<script type='application/json' id='viz-data'>{data}</script>",
              f"<script>{SCRIPT}</script></body></html>"]
    return "\n".join(parts) + "\n"

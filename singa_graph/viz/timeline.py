"""The memory timeline as SVG: every arena buffer as a rectangle (steps x byte offsets), the
live-bytes curve, the lower bound and the arena size.

The same SVG is the ``memory.svg`` dump and the timeline of the HTML page (which adds hover
and click handling to the ``rect.buf`` elements through their ``data-id``).
"""
from __future__ import annotations

from xml.sax.saxutils import escape

from .extract import View, shape_text
from .style import COLORS, ROLE_TEXT, human_bytes

MiB = float(1 << 20)


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def _tick_unit(top: float) -> tuple[float, str]:
    for size, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top >= 2 * size:
            return float(size), unit
    return 1.0, "B"


def buffer_tip(b) -> str:
    kind = "kernel workspace" if b.workspace else f"{ROLE_TEXT[b.role]} buffer"
    also = [t for t in b.tensors if t != b.tensor]
    lines = [f"{b.tensor} ({kind})", f"{shape_text(b.shape)} {b.dtype}, {human_bytes(b.size)}",
             f"offset {b.offset}, steps {b.first}..{b.last}",
             f"producer {b.producer}, last reader {b.last_reader}"]
    if also:
        lines.append("shared with " + ", ".join(also))
    return "\n".join(lines)


def timeline_svg(view: View, width: int = 960, height: int = 430, title: bool = True,
                 labels: bool = True) -> str:
    """The timeline of ``view`` (which must come from a plan) as an SVG document."""
    if not view.schedule:
        raise ValueError("a memory timeline needs a plan (a schedule and a memory plan), "
                         "not a bare Graph")
    steps = len(view.schedule)
    arena, bound = view.arena_bytes, view.lower_bound
    budget = view.report.get("budget_bytes")
    top = max([arena, bound, budget or 0, 1] + view.live) * 1.06
    left, right, upper, lower = 64, 196, 46 if title else 14, 40
    pw, ph = width - left - right, height - upper - lower
    xs = lambda s: left + pw * s / steps  # noqa: E731
    ys = lambda b: upper + ph * (1 - b / top)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" '
           f'class="timeline">',
           '<rect x="0" y="0" width="100%" height="100%" fill="white"/>']
    if title:
        r = view.report
        out.append(f'<text x="{left}" y="18" font-size="15" font-weight="bold">'
                   f'{escape(view.name)}: memory plan ({steps} steps, schedule '
                   f'{escape(str(r.get("schedule", "")))})</text>')
        out.append(f'<text x="{left}" y="36" font-size="12" fill="#333">arena '
                   f'{human_bytes(arena)}, lower bound {human_bytes(bound)}, no reuse '
                   f'{human_bytes(r.get("no_reuse_bytes", 0))}, persistent '
                   f'{human_bytes(r.get("persistent_bytes", 0))} (outside the arena)</text>')
    unit, uname = _tick_unit(top)
    tick = _nice_step(top / unit, 6)
    v = 0.0
    while v * unit <= top:
        y = ys(v * unit)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#eeeeee"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">'
                   f'{v:g}</text>')
        v += tick
    out.append(f'<text x="14" y="{upper + ph / 2:.1f}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {upper + ph / 2:.1f})">arena offset ({uname})</text>')
    sstep = max(1, int(_nice_step(steps, 12)))
    for s in range(0, steps + 1, sstep):
        out.append(f'<text x="{xs(s + 0.5) if s < steps else xs(s):.1f}" '
                   f'y="{upper + ph + 15}" font-size="11" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 6}" font-size="12" '
               f'text-anchor="middle">step</text>')
    out.append('<g class="buffers">')
    for b in view.buffers:
        x0, x1 = xs(b.first), xs(b.last + 1)
        y0, y1 = ys(b.offset + b.size), ys(b.offset)
        fill = COLORS["workspace"] if b.workspace else COLORS[b.role]
        cls = "buf ws" if b.workspace else "buf recomputed" if b.recomputed else "buf"
        # a recomputed buffer (written by a recompute node) gets a dark dashed outline
        edge = ('stroke="#7a3b00" stroke-width="1.2" stroke-dasharray="3 2"' if b.recomputed
                else 'stroke="#ffffff" stroke-width="0.6"')
        tip = buffer_tip(b) + (" (recomputed)" if b.recomputed else "")
        out.append(f'<rect class="{cls}" data-id="{b.id}" x="{x0:.2f}" y="{y0:.2f}" '
                   f'width="{max(x1 - x0, 0.5):.2f}" height="{max(y1 - y0, 0.5):.2f}" '
                   f'fill="{fill}" {edge}>'
                   f'<title>{escape(tip)}</title></rect>')
        if labels and (x1 - x0) > 6.6 * len(b.tensor) + 8 and (y1 - y0) > 13:
            out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{(y0 + y1) / 2 + 4:.1f}" '
                       f'font-size="10" text-anchor="middle" fill="#222" '
                       f'pointer-events="none">{escape(b.tensor)}</text>')
    out.append("</g>")
    pts = []
    for s, live in enumerate(view.live):
        pts.append(f"{xs(s):.1f},{ys(live):.1f}")
        pts.append(f"{xs(s + 1):.1f},{ys(live):.1f}")
    out.append(f'<polyline class="live" points="{" ".join(pts)}" fill="none" stroke="#222" '
               f'stroke-width="1.6"/>')
    out.append(f'<line class="arena" x1="{left}" x2="{left + pw}" y1="{ys(arena):.1f}" '
               f'y2="{ys(arena):.1f}" stroke="#c00000" stroke-width="1.4"/>')
    out.append(f'<line class="bound" x1="{left}" x2="{left + pw}" y1="{ys(bound):.1f}" '
               f'y2="{ys(bound):.1f}" stroke="#2060c0" stroke-width="1.4" '
               f'stroke-dasharray="6 4"/>')
    if budget is not None:
        out.append(f'<line class="budget" x1="{left}" x2="{left + pw}" y1="{ys(budget):.1f}" '
                   f'y2="{ys(budget):.1f}" stroke="#e08000" stroke-width="1.6" '
                   f'stroke-dasharray="2 3"/>')
    out.append(f'<rect x="{left}" y="{upper}" width="{pw}" height="{ph}" fill="none" '
               f'stroke="#888"/>')
    out.extend(_legend(view, left + pw + 14, upper))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(view: View, x: float, y: float) -> list[str]:
    roles = [r for r in ("forward", "backward", "update")
             if any(b.role == r and not b.workspace for b in view.buffers)]
    if any(b.workspace for b in view.buffers):
        roles.append("workspace")
    out = []
    for r in roles:
        out.append(f'<rect x="{x}" y="{y}" width="14" height="11" fill="{COLORS[r]}"/>')
        out.append(f'<text x="{x + 20}" y="{y + 10}" font-size="12">{ROLE_TEXT[r]}</text>')
        y += 19
    y += 6
    lines = [("#222", "", "live bytes"),
             ("#2060c0", ' stroke-dasharray="6 4"',
              f"lower bound {human_bytes(view.lower_bound)}"),
             ("#c00000", "", f"arena {human_bytes(view.arena_bytes)}")]
    if view.report.get("budget_bytes") is not None:
        lines.append(("#e08000", ' stroke-dasharray="2 3"',
                      f"budget {human_bytes(view.report['budget_bytes'])}"))
    if any(b.recomputed for b in view.buffers):
        lines.append(("#7a3b00", ' stroke-dasharray="3 2"', "recomputed"))
    for color, dash, text in lines:
        out.append(f'<line x1="{x}" x2="{x + 14}" y1="{y + 6}" y2="{y + 6}" stroke="{color}" '
                   f'stroke-width="1.6"{dash}/>')
        out.append(f'<text x="{x + 20}" y="{y + 10}" font-size="12">{escape(text)}</text>')
        y += 19
    return out

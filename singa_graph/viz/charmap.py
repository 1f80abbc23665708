"""A character map of the arena, one row per step, as TensorFlow Lite Micro's memory planner
prints it: each buffer is drawn with its own character over the columns of the bytes it
occupies while it is live, ``.`` is free, and every row ends with the live bytes and the node.
"""
from __future__ import annotations

import string

from .extract import View
from .style import human_bytes

CHARS = string.digits + string.ascii_letters


def memory_map(view: View, width: int = 80, legend: bool = True) -> str:
    """The map of ``view`` (a plan's view), ``width`` columns of arena bytes per row."""
    if not view.schedule:
        raise ValueError("a memory map needs a plan, not a bare Graph")
    if width < 8:
        raise ValueError(f"width must be at least 8 columns, got {width}")
    arena = max(view.arena_bytes, max((b.offset + b.size for b in view.buffers), default=1))
    per_col = arena / width
    lines = [f"arena {human_bytes(arena)} ({arena} B), {width} columns of "
             f"{human_bytes(per_col)}; one row per step, one character per buffer, '.' free",
             f"{'step':>4} |{'-' * width}| {'live kB':>9}  node"]
    for step, node in enumerate(view.schedule):
        row = ["."] * width
        small = []
        for b in view.buffers:
            if not (b.first <= step <= b.last and b.size > 0):
                continue
            # a column shows the buffer holding its middle byte; live buffers never overlap
            c0 = int(b.offset / per_col + 0.5)
            c1 = min(width, int((b.offset + b.size) / per_col + 0.5))
            if c1 <= c0:
                small.append(b)
            for c in range(c0, c1):
                row[c] = CHARS[b.id % len(CHARS)]
        for b in small:  # smaller than a column: shown where it starts unless that is taken
            c = min(width - 1, int(b.offset / per_col))
            row[c] = CHARS[b.id % len(CHARS)] if row[c] == "." else "*"
        live = view.live[step] if view.live else 0
        lines.append(f"{step:>4} |{''.join(row)}| {live / 1024:>9.1f}  {node}")
    if legend:
        lines.append("legend ('*': buffers smaller than a column share one):")
        for b in view.buffers:
            kind = " workspace" if b.workspace else ""
            lines.append(f"  {CHARS[b.id % len(CHARS)]} {b.tensor}{kind}: "
                         f"{human_bytes(b.size)} at {b.offset}, steps {b.first}..{b.last}")
    return "\n".join(lines) + "\n"

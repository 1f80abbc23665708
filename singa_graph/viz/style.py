"""Colours and labels shared by every picture, so a role looks the same everywhere."""
from __future__ import annotations

COLORS = {
    "input": "#ffd966",
    "parameter": "#9fd49b",
    "state": "#dddddd",
    "output": "#f2f2f2",
    "forward": "#9dc3e6",
    "backward": "#f4b183",
    "update": "#c9a7de",
    "workspace": "#a6a6a6",
}
ROLE_TEXT = {
    "input": "input",
    "parameter": "parameter",
    "state": "state / constant",
    "output": "graph output",
    "forward": "forward",
    "backward": "backward",
    "update": "optimizer update",
    "workspace": "kernel workspace",
}


def human_bytes(n: float) -> str:
    """``1.5 MiB``, ``12.0 KiB``, ``96 B``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.{2 if unit != 'KiB' else 1}f} {unit}"
    return f"{int(n)} B"

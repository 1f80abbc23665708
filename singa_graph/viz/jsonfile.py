"""The ``json`` dump: nodes, leaves, edges, the schedule, the buffers and the report, for
other tools. Buffers carry offset, size, first and last step, tensor, producer, last reader
and whether they are a kernel workspace."""
from __future__ import annotations

import json

from .extract import View

FORMAT_VERSION = 1


def to_json(view: View, indent: int | None = 1) -> str:
    data = {"format": "singa_graph.viz", "version": FORMAT_VERSION}
    data.update(view.to_dict())
    data["arena_bytes"] = view.arena_bytes
    data["lower_bound_bytes"] = view.lower_bound
    return json.dumps(data, indent=indent, default=_plain)


def _plain(o):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    return str(o)

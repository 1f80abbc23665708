"""Pictures of graphs, schedules and memory plans.

    from singa_graph import viz
    viz.dump(model, "cnn.html")              # graph + schedule + memory timeline, one file
    viz.dump(plan, "cnn.dot")                # Graphviz text; .svg/.png need Graphviz's dot
    viz.dump(plan, "cnn.memory.svg")         # the memory timeline alone
    viz.dump(plan, "cnn.snapshot.pickle")    # open with PyTorch's memory_viz
    print(viz.memory_map(plan))              # a character map of the arena per step

Every format reads the same :class:`~singa_graph.viz.extract.View`, extracted once from a
Graph, an ExecutionPlan, a MemoryPlan or a Model (its most recent plan).
"""
from __future__ import annotations

import os

from . import dot as _dot
from .extract import View, extract
from .files import graphviz, svg_to_png, write_atomic
from .html import to_html
from .jsonfile import to_json
from .charmap import memory_map as _memory_map
from .snapshot import to_pickle, to_snapshot
from .timeline import timeline_svg

FORMATS = ("dot", "svg", "png", "json", "html", "memory.svg", "memory.png",
           "snapshot.pickle")
NEEDS_PLAN = ("memory.svg", "memory.png", "snapshot.pickle")

__all__ = ["dump", "dump_all", "extract", "memory_map", "to_dot", "to_json", "to_html",
           "timeline_svg", "to_snapshot", "View", "FORMATS"]


def format_of(path: str) -> str:
    """The format named by ``path``'s suffix (``x.memory.svg`` -> ``memory.svg``)."""
    name = os.path.basename(str(path)).lower()
    for f in sorted(FORMATS, key=len, reverse=True):
        if name.endswith("." + f):
            return f
    raise ValueError(f"cannot tell the format of {path!r} from its suffix; pass format= one "
                     f"of {', '.join(FORMATS)}")


def to_dot(obj, leaves: bool = True) -> str:
    """DOT text of a Graph, plan or Model (see :mod:`singa_graph.viz.dot`)."""
    return _dot.to_dot(obj if isinstance(obj, View) else extract(obj), leaves=leaves)


def render(view: View, fmt: str, leaves: bool = True) -> bytes | str:
    """The bytes (or text) of ``view`` in format ``fmt``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt in NEEDS_PLAN and not view.schedule:
        raise ValueError(f"format {fmt!r} draws a memory plan; give a compiled plan or a "
                         "Model, not a bare Graph")
    if fmt == "dot":
        return _dot.to_dot(view, leaves=leaves)
    if fmt in ("svg", "png"):
        return graphviz(_dot.to_dot(view, leaves=leaves), fmt)
    if fmt == "json":
        return to_json(view)
    if fmt == "html":
        return to_html(view)
    if fmt == "memory.svg":
        return timeline_svg(view)
    if fmt == "memory.png":
        return svg_to_png(timeline_svg(view))
    return to_pickle(view)


def dump(obj, path, format: str | None = None, profile=None, leaves: bool = True) -> str:
    """Write a picture (or data file) of a Graph, ExecutionPlan, MemoryPlan or Model.

    Args:
        obj: what to draw; a Model gives its most recent compiled plan.
        path: the file to write (written atomically: a failed dump leaves nothing behind).
        format: one of :data:`FORMATS`; by default taken from ``path``'s suffix.
        profile: a ``Profile`` (from ``plan.profile(...)``) to show in the HTML page; by
            default the plan's most recent one, if any.
        leaves: draw inputs, parameters and state as nodes in dot/svg/png.

    Returns the format written. ``svg``/``png`` need Graphviz's ``dot`` program and
    ``memory.png`` an SVG rasteriser; without them :class:`~singa_graph.errors.ToolMissingError`
    says how to install one.
    """
    fmt = format or format_of(path)
    data = render(extract(obj, profile=profile), fmt, leaves=leaves)
    write_atomic(os.fspath(path), data)
    return fmt


def dump_all(obj, directory, stem: str = "plan", formats=None, profile=None) -> list[str]:
    """Write ``stem.<format>`` into ``directory`` for ``formats`` (default: every format whose
    external program is installed). Returns the paths written."""
    import shutil

    view = extract(obj, profile=profile)
    if formats is None:
        formats = [f for f in FORMATS if not (f in ("svg", "png") and shutil.which("dot") is None)
                   and not (f == "memory.png" and not _can_rasterise())
                   and not (f in NEEDS_PLAN and not view.schedule)]
    os.makedirs(directory, exist_ok=True)
    paths = []
    for f in formats:
        p = os.path.join(directory, f"{stem}.{f}")
        write_atomic(p, render(view, f))
        paths.append(p)
    return paths


def _can_rasterise() -> bool:
    import importlib.util
    import shutil

    return shutil.which("rsvg-convert") is not None or \
        importlib.util.find_spec("cairosvg") is not None


def memory_map(obj, width: int = 80, legend: bool = True) -> str:
    """A character map of the arena of a plan or Model: one row per step, live kB per row."""
    return _memory_map(obj if isinstance(obj, View) else extract(obj), width=width,
                       legend=legend)

"""Make the README's pictures of the CNN training step: its graph and its memory timeline.

    python docs/make_pictures.py          # or: make pictures

Needs Graphviz's ``dot`` (the graph) and ``rsvg-convert`` or cairosvg (the PNG timeline).
Writes docs/images/cnn_train_graph.{png,svg} and docs/images/cnn_train_memory.{png,svg}.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from singa_graph import opt, random as sg_random, viz, zoo
from singa_graph.ir.tensor import Placeholder
from singa_graph.viz.files import graphviz, svg_to_png, write_atomic

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "images")
BATCH = 32


def cnn_training_plan():
    """The training plan `make demo` runs: zoo.CNN, batch 32, SGD with momentum."""
    sg_random.seed(0)
    model = zoo.CNN()
    model.set_optimizer(opt.SGD(lr=0.005, momentum=0.9))
    x = Placeholder((BATCH, 1, 28, 28), np.float32, name="x")
    y = Placeholder((BATCH,), np.int32, name="y")
    model.compile([x], is_train=True, use_graph=True, schedule="memory")
    return model.plan_for(x, y)


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    view = viz.extract(cnn_training_plan())
    # README size: op nodes only, shapes as tooltips, so the labels stay legible
    dot = viz.dot.to_dot(view, leaves=False, edge_labels=False, node_names=False)
    write_atomic(os.path.join(OUT, "cnn_train_graph.svg"), graphviz(dot, "svg"))
    write_atomic(os.path.join(OUT, "cnn_train_graph.png"), graphviz(dot, "png", dpi=144))
    svg = viz.timeline_svg(view, width=900, height=420)
    write_atomic(os.path.join(OUT, "cnn_train_memory.svg"), svg)
    write_atomic(os.path.join(OUT, "cnn_train_memory.png"), svg_to_png(svg, scale=2.0))
    print(f"wrote the pictures into {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

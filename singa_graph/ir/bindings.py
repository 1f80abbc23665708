"""What the IR needs from the packages built on it, handed over when they are imported.

The IR describes tensors, nodes and graphs; it computes no numbers and never imports the
runtime or the op library. Three things it does need at run time come from there, so those
packages register them here once, at import (``singa_graph/__init__`` imports both):

- ``default_device()``: where a tensor goes when none is named (``runtime.device``);
- ``run_eager(op, inputs, outputs)``: how an op called on concrete tensors runs at once
  (``runtime.registry``);
- ``ops``: the op library, for the Tensor methods that build ops (``t + u``, ``t.reshape``).

Each is set once, at import, by one package, and only read afterwards: like the kernel table
it is a registration, not state that tracing or running changes.
"""
from __future__ import annotations

from typing import Any

from ..errors import SingaGraphError

_bound: dict[str, Any] = {}


def bind(name: str, value) -> None:
    """Register ``value`` under ``name`` (``default_device``, ``run_eager`` or ``ops``)."""
    if name not in ("default_device", "run_eager", "ops"):
        raise ValueError(f"unknown IR binding {name!r}")
    _bound[name] = value


def _get(name: str):
    try:
        return _bound[name]
    except KeyError:
        raise SingaGraphError(
            f"the IR has no {name!r}: import singa_graph (not singa_graph.ir alone), which "
            "registers the runtime and the op library") from None


def default_device():
    """The device tensors go to when none is named."""
    return _get("default_device")()


def run_eager(op, inputs, outputs) -> None:
    """Run ``op`` on concrete ``inputs`` at once, filling ``outputs``' data."""
    _get("run_eager")(op, inputs, outputs)


def ops():
    """The op library (the module ``singa_graph.ops``)."""
    return _get("ops")


__all__: list[str] = ["bind", "default_device", "run_eager", "ops"]

"""Kernels, registered per (op type, device kind).

A kernel is a *factory*: ``factory(op, ins, outs) -> step`` receives the op (its attributes)
and the input and output arrays, and returns a zero-argument callable that computes ``outs``
from ``ins``. Compiled plans call the factory once per node with arena views and keep the
step, so running a plan costs one Python call per node; eager mode calls the factory and the
step at once. Kernels write into the outputs they are given and never allocate them.
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ..errors import UnsupportedOpError

KERNELS: dict[tuple[str, str], Callable] = {}


def kernel(op_type: str, device: str = "cpu"):
    """Register the decorated factory as the kernel of ``op_type`` on ``device``."""

    def deco(factory):
        KERNELS[(op_type, device)] = factory
        return factory

    return deco


def get_kernel(op_type: str, device: str = "cpu") -> Callable:
    _load(device)
    try:
        return KERNELS[(op_type, device)]
    except KeyError:
        raise UnsupportedOpError(f"no {device} kernel for op {op_type}") from None


_loaded: set[str] = set()
_load_lock = threading.RLock()  # re-entrant: a kernel module may look up another kernel


def _load(device: str) -> None:
    """Import the kernels of ``device`` once. A device counts as loaded only after its import
    has finished, and other threads wait for it under the lock, so the first calls from two
    threads never see a half-filled registry."""
    if device in _loaded:
        return
    with _load_lock:
        if device in _loaded:
            return
        if device == "cpu":
            from .kernels import cpu  # noqa: F401  (registers on import)
        elif device == "cuda":
            from .kernels import cuda  # noqa: F401
        _loaded.add(device)


def run_eager(op, inputs, outputs) -> None:
    """Run one op at once: allocate its outputs, build the step, call it.

    Class indices are checked before the kernel runs; inside a transaction (a Model step) the
    inputs the op mutates are journalled first, so a failure later in the step can undo it."""
    from .checks import active_journal, check_op_indices

    check_op_indices(op, inputs)
    journal = active_journal()
    if journal is not None:
        for k in op.mutates:
            journal.record(inputs[k].data)
    outs = [np.empty(t.shape, t.dtype) for t in outputs]
    for o, i in op.alias.items():  # views, as inside a plan: the kernel then does nothing
        outs[o] = inputs[i].data.reshape(outputs[o].shape)
    step = get_kernel(op.type, inputs[0].device.kind if inputs else "cpu")(
        op, [x.data for x in inputs], outs)
    step()
    for t, a in zip(outputs, outs):
        t.data = a

"""What makes a training step transactional: value checks before the first step, and an undo
journal for eager steps.

A plan checks every feed before it runs a step: shape and dtype, a non-empty batch, integers
that fit the input's dtype (an int64 label of 2**32 + 3 would wrap to 3 in an int32 input),
and class indices within the range that the op reading them declares
(:meth:`~singa_graph.ir.op.Operation.index_inputs`). Eager mode checks class indices before
the kernel runs and, inside a Model step, journals the first write to every tensor an op
mutates so that a failure later in the step restores all of them.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..errors import FeedError


def check_feed_values(name: str, a: np.ndarray, dtype, allow_empty: bool = False) -> None:
    """Refuse an empty feed (unless ``allow_empty``: a step that changes no state may run on
    empty data, as ONNX models do), and integers that would wrap when cast to ``dtype``."""
    if a.size == 0 and a.ndim > 0 and not allow_empty:
        raise FeedError(f"feed for {name} is empty (shape {a.shape}); a batch needs at "
                        "least one sample")
    dtype = np.dtype(dtype)
    if a.dtype.kind in "iu" and dtype.kind in "iu" and a.dtype != dtype and a.size:
        info = np.iinfo(dtype)
        lo, hi = a.min(), a.max()
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise FeedError(f"feed for {name} holds {bad}, which does not fit the input's "
                            f"dtype {dtype} ([{info.min}, {info.max}]); it would wrap")


def check_indices(name: str, a: np.ndarray, n: int, reader: str) -> None:
    """Class indices must lie in ``[0, n)``."""
    if a.size == 0:
        return
    lo, hi = a.min(), a.max()
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        raise FeedError(f"{name} holds class label {bad}, out of range [0, {n}) for "
                        f"{reader} ({n} classes)")


def index_feed_checks(graph, inputs) -> list[tuple[int, int, str]]:
    """``(feed position, n, reader)`` for every graph input whose values some node reads as
    class indices in ``[0, n)`` (directly or through reshape-like aliases)."""
    position = {id(t): i for i, t in enumerate(inputs)}
    out, seen = [], set()
    for node in graph.nodes:
        for k, n in node.op.index_inputs(node.inputs).items():
            t = node.inputs[k]
            while id(t) not in position and t.creator is not None:  # through views
                src = t.creator
                i = next((i for o, i in src.op.alias.items() if src.outputs[o] is t), None)
                if i is None:
                    break
                t = src.inputs[i]
            if id(t) in position and (id(t), n) not in seen:
                seen.add((id(t), n))
                out.append((position[id(t)], n, f"{node.type} (node {node.name})"))
    return out


def check_op_indices(op, inputs) -> None:
    """Eager mode: check the class indices an op reads before its kernel runs."""
    for k, n in op.index_inputs(inputs).items():
        x = inputs[k]
        check_indices(f"input {k} ({x.name})", x.host_data(), n, op.type)


# ---------------------------------------------------------------------------- undo journal
class Journal:
    """Copies of tensors taken just before their first in-place write; :meth:`rollback`
    writes them back."""

    def __init__(self):
        self._saved: dict[int, tuple] = {}

    def record(self, arr, device=None) -> None:
        """Keep a copy of ``arr`` (an array of ``device``, the CPU when None)."""
        if id(arr) not in self._saved:
            self._saved[id(arr)] = (arr, device, arr.copy() if device is None
                                    else device.duplicate(arr))

    def rollback(self) -> None:
        for arr, device, old in self._saved.values():
            if device is None:
                np.copyto(arr, old)
            else:
                device.copy(arr, old)
        self._saved.clear()


class _Active(threading.local):
    journal: Journal | None = None


_active = _Active()


def active_journal() -> Journal | None:
    """The journal of the transaction running in this thread, if any."""
    return _active.journal


@contextlib.contextmanager
def transaction():
    """Eager ops run in the block journal what they mutate; if the block raises, every
    mutated tensor is restored before the exception propagates."""
    outer = _active.journal
    journal = Journal() if outer is None else outer
    _active.journal = journal
    try:
        yield journal
    except BaseException:
        if outer is None:
            journal.rollback()
        raise
    finally:
        _active.journal = outer

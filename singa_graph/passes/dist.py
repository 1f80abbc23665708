"""Gradient buckets and the collective nodes of data-parallel training (opt.DistOpt).

:class:`Buckets` applies SINGA's fusion rule to the stream of ``(param, grad)`` pairs that
the backward yields, in the order gradients become final: a gradient larger than
``threshold`` elements is reduced on its own; smaller ones accumulate in a bucket that is
closed once it holds more than ``threshold`` elements (or would overflow ``capacity``,
SINGA's ``buffSize``). The builders below turn a closed bucket into graph nodes (or, with
concrete tensors, run them at once), so graph and eager mode share the same kernels.
"""
from __future__ import annotations

import numpy as np

from ..ir.tensor import Tensor
from ..ops.dist import AllReduceStart, AllReduceWait, PartialAverage, SparseAllReduce


class Buckets:
    """Group a stream of items with sizes into buckets by SINGA's fusion rule.

    ``add(item, size)`` returns the buckets (lists of items) that this item closes, in the
    order they should be sent; ``flush()`` returns the last open one.
    """

    def __init__(self, threshold: int, capacity: int | None = None):
        if threshold < 0:
            raise ValueError(f"fusion threshold must be >= 0 elements, got {threshold}")
        self.threshold = int(threshold)
        self.capacity = None if capacity is None else int(capacity)
        self._open: list = []
        self._acc = 0

    def add(self, item, size: int) -> list[list]:
        if size > self.threshold:
            return [[item]]
        closed = []
        if self._open and self.capacity is not None and self._acc + size > self.capacity:
            closed.append(self._close())
        self._open.append(item)
        self._acc += size
        if self._acc > self.threshold:
            closed.append(self._close())
        return closed

    def flush(self) -> list[list]:
        return [self._close()] if self._open else []

    def _close(self) -> list:
        out, self._open, self._acc = self._open, [], 0
        return out


def split(sizes, threshold: int, capacity: int | None = None) -> list[list[int]]:
    """Bucket indices ``0..len(sizes)-1`` by :class:`Buckets`' rule (for tests and reports)."""
    b = Buckets(threshold, capacity)
    out = [bucket for i, n in enumerate(sizes) for bucket in b.add(i, n)]
    return out + b.flush()


def _listed(out) -> list[Tensor]:
    return list(out) if isinstance(out, tuple) else [out]


def start_allreduce(comm, grads: list[Tensor], name: str, scale: float):
    """Start the all-reduce of a bucket; returns ``finish() -> [scaled sums]``, which adds
    (or runs) the wait. Call ``finish`` after the rest of the backward has been built."""
    channel = comm.channel(name)
    bucket = AllReduceStart(channel)(*grads)

    def finish() -> list[Tensor]:
        return _listed(AllReduceWait(channel, [g.shape for g in grads], scale)(bucket))
    return finish


def sparse_allreduce(comm, grads: list[Tensor], residual: Tensor | None, spars: float,
                     topK: bool, scale: float) -> list[Tensor]:
    """The sparsified sum of a bucket over all ranks, times ``scale``, per gradient."""
    op = SparseAllReduce(comm, [g.shape for g in grads], spars, topK, residual is not None,
                         scale, comm.world_size)
    ins = list(grads) + ([residual] if residual is not None else [])
    return _listed(op(*ins))


def partial_average(comm, updated: list[Tensor], partitions: list[list[int]],
                    counter: Tensor) -> Tensor:
    """Average partition ``counter % len(partitions)`` of the updated parameters."""
    return _listed(PartialAverage(comm, partitions, comm.world_size)(*updated, counter))[0]


def zeros_state(size: int, dtype, name: str, device=None) -> Tensor:
    """A persistent state tensor (a sparsification residual, a counter) on ``device``."""
    return Tensor(data=np.zeros(size, dtype), device=device, requires_grad=False, name=name)

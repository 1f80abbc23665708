"""Collective communication as graph ops (data-parallel training, see singa_graph.dist).

A fused all-reduce is two nodes, so that the scheduler can put the backward between them:

- :class:`AllReduceStart` copies a bucket of gradients into one flat buffer and starts a
  non-blocking sum all-reduce of it (``run_asap``: it runs the moment its last gradient is
  final);
- :class:`AllReduceWait` completes it and writes the mean back as one tensor per gradient
  (``run_late``: it runs only when nothing else is ready, i.e. just before the updates that
  read it).

The bucket is an ordinary transient buffer: it lives in the arena from the start to the wait,
which is exactly while the network owns it. :class:`SparseAllReduce` (SINGA's top-K and
threshold sparsification) and :class:`PartialAverage` (SINGA's partial update) are blocking.

The ops hold their communication handle in ``_channel``/``_comm`` (not an attribute that dumps
show); kernels are in ``runtime/kernels/cpu/dist.py``.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import DTypeError, ShapeError
from ..ir.op import Operation
from ..ir.tensor import TensorSpec

__all__ = ["AllReduceStart", "AllReduceWait", "SparseAllReduce", "PartialAverage"]


def _same_float_dtype(op, ts) -> np.dtype:
    if not ts:
        raise ShapeError(f"{op} needs at least one tensor")
    dt = ts[0].dtype
    for t in ts:
        if t.dtype != dt:
            raise DTypeError(f"all tensors of a bucket need one dtype; {t.name} is {t.dtype}, "
                             f"{ts[0].name} is {dt}")
    if dt.kind != "f":
        raise DTypeError(f"only floating-point tensors are all-reduced, got {dt}")
    return dt


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


class AllReduceStart(Operation):
    """Pack gradients into a flat bucket and start a non-blocking sum all-reduce of it.

    Inputs: the gradients (one float dtype). Output: the bucket, shape ``(total size,)``.
    """

    differentiable = False
    run_asap = True
    starts_comm = True  # the greedy scheduler also starts it as soon as it is ready

    def __init__(self, channel):
        self._channel = channel
        self.bucket = channel.name

    def infer(self, *grads):
        dt = _same_float_dtype(self.type, grads)
        return [TensorSpec((sum(g.size for g in grads),), dt)]


class AllReduceWait(Operation):
    """Complete the all-reduce of a bucket; output ``scale`` times it (1 / world size gives
    the mean), unpacked into tensors of ``shapes``."""

    differentiable = False
    run_late = True

    def __init__(self, channel, shapes, scale: float):
        self._channel = channel
        self.bucket = channel.name
        self.shapes = [tuple(s) for s in shapes]
        self.scale = float(scale)

    def infer(self, bucket):
        total = sum(_size(s) for s in self.shapes)
        if bucket.shape != (total,):
            raise ShapeError(f"bucket has shape {bucket.shape}, expected ({total},) for "
                             f"gradients {self.shapes}")
        return [TensorSpec(s, bucket.dtype) for s in self.shapes]


class SparseAllReduce(Operation):
    """Sum a bucket of gradients over all ranks sending only its significant elements
    (SINGA's ``backward_and_sparse_update``); outputs ``scale`` times the sum per gradient.

    On every rank the bucket ``x`` (plus the accumulated residual when ``corr``) keeps the
    elements with ``|x| >= spars`` (``topK=False``), or the ``ceil(spars * size)`` elements
    of largest magnitude (``topK=True``); the kept (index, value) pairs are all-gathered and
    summed in rank order. With ``corr`` the elements not sent become the new residual.

    Inputs: the gradients, then the residual (``(size,)``, mutated) when ``corr``. Outputs:
    one tensor per gradient. The kernel's scratch for packing and receiving
    (:meth:`scratch_layout`) is planned workspace.
    """

    differentiable = False
    run_asap = True

    def __init__(self, comm, shapes, spars: float, topK: bool, corr: bool, scale: float,
                 world_size: int):
        self._comm = comm
        self.shapes = [tuple(s) for s in shapes]
        self.spars = float(spars)
        self.topK = bool(topK)
        self.corr = bool(corr)
        self.scale = float(scale)
        self.world_size = int(world_size)
        if self.topK and not 0.0 < self.spars <= 1.0:
            raise ValueError(f"topK sparsification sends a fraction spars in (0, 1] of the "
                             f"elements; got spars={spars}")
        if not self.topK and self.spars < 0:
            raise ValueError(f"the threshold spars must be >= 0, got {spars}")

    @property
    def mutates(self):
        return (len(self.shapes),) if self.corr else ()

    @property
    def size(self) -> int:
        return sum(_size(s) for s in self.shapes)

    @property
    def capacity(self) -> int:
        """Most elements one rank sends."""
        return max(1, math.ceil(self.spars * self.size)) if self.topK else self.size

    def scratch_layout(self, itemsize: int) -> dict:
        """Byte offsets of the scratch arrays: bucket, |bucket|, sent indices and values,
        received indices and values, counts and displacements."""
        n, c, w = self.size, self.capacity, self.world_size
        sizes = [("x", n * itemsize), ("mag", n * itemsize), ("sidx", c * 4),
                 ("sval", c * itemsize), ("ridx", w * c * 4), ("rval", w * c * itemsize),
                 ("counts", w * 4), ("displs", w * 4), ("nnz", 4)]
        out, off = {}, 0
        for name, nb in sizes:
            out[name] = (off, nb)
            off += (nb + 63) // 64 * 64
        out["total"] = (0, off)
        return out

    def infer(self, *ins):
        n = len(self.shapes)
        grads = ins[:n]
        if len(ins) != n + (1 if self.corr else 0):
            raise ShapeError(f"{self.type} takes {n} gradients"
                             f"{' and a residual' if self.corr else ''}, got {len(ins)} inputs")
        dt = _same_float_dtype(self.type, grads)
        for g, s in zip(grads, self.shapes):
            if g.shape != s:
                raise ShapeError(f"gradient {g.name} has shape {g.shape}, expected {s}")
        if self.corr and ins[n].shape != (self.size,):
            raise ShapeError(f"residual has shape {ins[n].shape}, expected ({self.size},)")
        return [TensorSpec(s, dt) for s in self.shapes]


class PartialAverage(Operation):
    """SINGA's partial update: on step ``s`` average (over all ranks) the parameters of
    partition ``s % len(partitions)`` and leave the others as each rank updated them.

    Inputs: the (updated) parameters, then a 0-d int64 step counter; both are mutated.
    Output: an alias of the first input (keeps the node in the graph). The fused partition
    is packed in planned workspace.
    """

    differentiable = False
    alias = {0: 0}

    def __init__(self, comm, partitions, world_size: int):
        self._comm = comm
        self.partitions = [list(p) for p in partitions]
        self.world_size = int(world_size)

    @property
    def mutates(self):
        return tuple(range(sum(len(p) for p in self.partitions) + 1))

    def infer(self, *ins):
        params, counter = ins[:-1], ins[-1]
        if sorted(i for p in self.partitions for i in p) != list(range(len(params))):
            raise ShapeError(f"partitions {self.partitions} do not cover the "
                             f"{len(params)} parameters exactly once")
        dt = _same_float_dtype(self.type, params)
        if counter.shape != () or counter.dtype != np.int64:
            raise DTypeError(f"step counter must be 0-d int64, got {counter.shape} "
                             f"{counter.dtype}")
        return [TensorSpec(params[0].shape, dt)]

    def largest_partition(self, params) -> int:
        """Elements of the largest partition (the size of the kernel's packing buffer)."""
        return max(sum(int(np.prod(params[i].shape)) for i in p) for p in self.partitions)

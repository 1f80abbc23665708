"""``DistOpt``: SINGA's data-parallel optimizer wrapper, over MPI.

Every process (rank) runs the same model on its own shard of each batch; gradients are
summed over all ranks and divided by their number before the wrapped optimizer's update, so
``n`` ranks with batch ``B`` each train like one process with batch ``n * B``.

In graph mode the communication is part of the training graph (see ops/dist.py): each fused
bucket's non-blocking all-reduce starts as soon as its last gradient is final and is waited
for only when nothing else is left to run, just before the updates that read it, so it
overlaps the rest of the backward. In eager mode the same ops run at once, in the same order.

Parameters, buffers and optimizer state are broadcast from rank 0 before the first step
(``Model`` calls :meth:`DistOpt.sync`), so ranks need not share a seed. BatchNorm running
statistics are buffers that each rank then updates from its own data, as in SINGA and
PyTorch's DistributedDataParallel: they differ between ranks; checkpoints hold rank 0's.
"""
from __future__ import annotations

import contextlib
import hashlib

import numpy as np

from ..ir.op import building, is_building
from ..passes import dist as _dist
from ..passes.autodiff import backward as _eager_backward
from ..passes.autodiff import iter_gradients
from .comm import Communicator, DistError


class DistOpt:
    """Wrap an optimizer for data-parallel training over MPI (SINGA's ``opt.DistOpt``).

    Args:
        opt: the optimizer to wrap (``SGD()`` by default).
        nccl_id, local_rank, world_size: SINGA's arguments for processes started without
            MPI; here ``mpiexec`` starts them, so ``nccl_id`` must be None and the two
            others, when given, must agree with MPI's.
        buffSize: capacity of a fused bucket in elements (SINGA's default, 4M).
        threshold: the fusion threshold (elements) that the update methods use when called
            without one, e.g. through ``optimizer(loss)``; SINGA's default, 2M.
        comm: an mpi4py communicator (``MPI.COMM_WORLD`` by default).
        timeout: seconds a collective may take before the job stops with
            :class:`~singa_graph.dist.DistError` (see :mod:`singa_graph.dist.comm`).

    Attributes:
        world_size, global_rank, local_rank: as in SINGA.
        communicator: the :class:`~singa_graph.dist.comm.Communicator`.
    """

    wraps_optimizer = True  # Model looks through it for checkpoints and the first-step sync

    def __init__(self, opt=None, nccl_id=None, local_rank=None, world_size=None,
                 buffSize: int = 4194304, comm=None, timeout: float | None = None,
                 threshold: int = 2097152):
        from ..opt import SGD, Optimizer

        if nccl_id is not None:
            raise ValueError("DistOpt runs over MPI: start the processes with mpiexec and "
                             "leave nccl_id=None")
        self.opt = SGD() if opt is None else opt
        if not isinstance(self.opt, Optimizer):
            raise TypeError(f"DistOpt wraps an opt.Optimizer, got {type(opt).__name__}")
        if int(buffSize) < 1:
            raise ValueError(f"buffSize must be >= 1 elements, got {buffSize}")
        self.buffSize = int(buffSize)
        self.threshold = int(threshold)
        self.communicator = Communicator(comm, timeout)
        c = self.communicator
        for name, given, actual in (("world_size", world_size, c.world_size),
                                    ("local_rank", local_rank, c.local_rank)):
            if given is not None and int(given) != actual:
                raise ValueError(f"{name}={given} but MPI says {actual}")
        self.world_size = c.world_size
        self.global_rank = c.global_rank
        self.local_rank = c.local_rank
        self.synced = False
        self._residuals: dict = {}  # sparse update: bucket index -> residual tensor
        self._partial_step = _dist.zeros_state((), np.int64, "dist.partial_step")

    # SINGA's names --------------------------------------------------------------------
    @property
    def rank_in_global(self):
        return self.global_rank

    @property
    def rank_in_local(self):
        return self.local_rank

    def __setattr__(self, k, v):
        # dist.lr = 0.01 sets the wrapped optimizer's hyperparameter, as reading it does
        inner = self.__dict__.get("opt")
        if inner is not None and k in ("lr",) + type(inner)._hyper:
            setattr(inner, k, v)
        else:
            object.__setattr__(self, k, v)

    def __getattr__(self, k):
        # lr, step_counter, get_states ... of the wrapped optimizer
        if k.startswith("__") or "opt" not in self.__dict__:
            raise AttributeError(k)
        return getattr(self.__dict__["opt"], k)

    def __call__(self, loss) -> None:
        self.backward_and_update(loss)

    def step(self) -> None:
        self.opt.step()

    # SINGA's eager collectives ------------------------------------------------------------
    def all_reduce(self, tensor) -> None:
        """Sum a concrete tensor over all ranks, in place."""
        self.communicator.allreduce(_contiguous(tensor), "all_reduce")

    def fused_all_reduce(self, tensors, send: bool = True) -> None:
        """Sum concrete tensors over all ranks in place, as one message (``send`` is
        SINGA's; every call sends at once here)."""
        arrays = [_contiguous(t) for t in tensors]
        if not arrays:
            return
        buf = np.concatenate([a.reshape(-1) for a in arrays])
        self.communicator.allreduce(buf, "fused_all_reduce")
        off = 0
        for a in arrays:
            a.reshape(-1)[...] = buf[off:off + a.size]
            off += a.size

    def wait(self) -> None:
        """SINGA's wait for outstanding communication: the collectives above complete
        before they return, and graph-mode ones inside the step."""

    # first step ---------------------------------------------------------------------
    def sync(self, model) -> None:
        """Broadcast rank 0's parameters, buffers and optimizer state to every rank, after
        checking that all ranks hold the same model. ``Model`` calls it before its first
        step; call it yourself after changing parameters on one rank only."""
        named = {f"param/{k}": t for k, t in model.get_params().items()}
        named.update({f"state/{k}": t for k, t in model.get_states().items()})
        named.update({f"opt/{k}": t for k, t in self.opt.state_tensors().items()})
        items = sorted(named.items())
        sig = hashlib.sha256(repr([(k, t.shape, str(t.dtype)) for k, t in items])
                             .encode()).digest()
        mine = np.frombuffer(sig, np.uint8).copy()
        every = np.empty((self.world_size, mine.size), np.uint8)
        self.communicator.allgather(mine, every, "model check")
        differ = [r for r in range(self.world_size) if (every[r] != every[0]).any()]
        if differ:
            raise DistError(f"rank(s) {differ} hold a model whose parameter names, shapes or "
                            f"dtypes differ from rank 0's")
        self._broadcast([t for _, t in items])
        self.synced = True

    def _broadcast(self, tensors) -> None:
        """Rank 0's values into ``tensors`` on every rank; GPU tensors go through host
        copies (MPICH from PyPI is not CUDA-aware)."""
        hosts = [t.host_data() for t in tensors]  # the data itself on the CPU
        self.communicator.broadcast(hosts, 0, "initial broadcast")
        for t, h in zip(tensors, hosts):
            if h is not t.data:
                t.copy_from_numpy(h)

    def _sync_params(self, loss) -> None:
        from ..passes.autodiff import _reach

        seen, params = set(), []
        for n in _reach(loss):
            for x in n.inputs:
                if x.stores_grad and x.creator is None and id(x) not in seen:
                    seen.add(id(x))
                    params.append(x)
        state = self.opt.state_tensors()
        # creation order: the same on every rank
        self._broadcast(params + [state[k] for k in sorted(state)])
        self.synced = True

    # the update rules -----------------------------------------------------------------
    def update(self, param, grad):
        """Update ``param`` with a summed gradient: divide by ``world_size``, then the
        wrapped optimizer's update (SINGA's ``DistOpt.update``)."""
        return self.opt.update(param, grad * (1.0 / self.world_size))

    def backward_and_update(self, loss, threshold: int | None = None) -> None:
        """Backpropagate ``loss``, all-reduce the gradients in fused buckets and update.

        Gradients of more than ``threshold`` elements are all-reduced on their own; smaller
        ones are fused into buckets of just over ``threshold`` elements (at most
        ``buffSize``). Each bucket's all-reduce starts as soon as its last gradient is final.
        """
        with self._mode(loss) as graph:
            buckets = self._buckets(threshold)
            pending = []
            for bucket in self._stream(loss, buckets, graph):
                pending.append((bucket, self._start(bucket, len(pending))))
            for bucket, finish in pending:
                for (p, _), g in zip(bucket, finish()):
                    self.opt.update(p, g)

    def backward_and_partial_update(self, loss, threshold: int | None = None) -> None:
        """SINGA's asynchronous partial update: every rank updates all parameters with its
        own gradients, then one partition of the parameters (partitions are formed by the
        fusion rule of :meth:`backward_and_update`, partition ``step % count`` on each step)
        is replaced by its average over all ranks."""
        with self._mode(loss) as graph:
            tokens, sizes = [], []
            for p, g in self._pairs(loss, graph):
                tokens.append(self.opt.update(p, g))
                sizes.append(p.size)
            if not tokens:
                return
            parts = _dist.split(sizes, self.threshold if threshold is None else threshold,
                                self.buffSize)
            self._keep(_dist.partial_average(self.communicator, tokens, parts,
                                             self._partial_counter(tokens[0].device)))

    def backward_and_sparse_update(self, loss, threshold: int | None = None, spars: float = 0.05,
                                   topK: bool = False, corr: bool = True) -> None:
        """SINGA's sparsified all-reduce: per fused bucket, send only the elements with
        ``|g| >= spars`` (``topK=False``) or the ``spars`` fraction of largest magnitude
        (``topK=True``); with ``corr`` the unsent rest is kept per rank and added to the next
        step's gradient. The sum over ranks, divided by ``world_size``, is applied."""
        with self._mode(loss) as graph:
            buckets = self._buckets(threshold)
            for k, bucket in enumerate(self._stream(loss, buckets, graph)):
                grads = [g for _, g in bucket]
                res = self._residual(k, grads) if corr else None
                sums = _dist.sparse_allreduce(self.communicator, grads, res, spars, topK,
                                              1.0 / self.world_size)
                for (p, _), g in zip(bucket, sums):
                    self.opt.update(p, g)

    # helpers ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _mode(self, loss):
        """Graph mode (yields True) while tracing; else eager, with the optimizer's step."""
        graph = loss.data is None or is_building()
        if graph:
            with building():
                yield True
        else:
            if not self.synced:  # used without a Model: make the ranks agree from now on
                self._sync_params(loss)
            yield False
            self.opt.step()

    def _buckets(self, threshold):
        return _dist.Buckets(self.threshold if threshold is None else threshold, self.buffSize)

    def _pairs(self, loss, graph):
        return iter_gradients(loss) if graph else _eager_backward(loss)

    def _stream(self, loss, buckets, graph):
        for p, g in self._pairs(loss, graph):
            yield from buckets.add((p, g), p.size)
        yield from buckets.flush()

    def _start(self, bucket, k):
        names = ",".join(p.name for p, _ in bucket[:3]) + (",..." if len(bucket) > 3 else "")
        return _dist.start_allreduce(self.communicator, [g for _, g in bucket],
                                     f"bucket {k} ({names})", 1.0 / self.world_size)

    def _residual(self, k, grads):
        size = sum(g.size for g in grads)
        r = self._residuals.get(k)
        if r is None or r.shape != (size,):
            r = self._residuals[k] = _dist.zeros_state(
                (size,), grads[0].dtype, f"dist.residual{k}", device=grads[0].device)
        return r

    def _partial_counter(self, device):
        """The partial update's step counter, on the device of the parameters."""
        if self._partial_step.device != device:
            self._partial_step.to_device(device)
        return self._partial_step

    def _keep(self, token) -> None:
        """List a graph-mode node output among the traced graph's outputs so it runs."""
        if token.data is None:
            from ..opt import record_graph_update

            record_graph_update(token, self.opt)

    def __repr__(self):
        return f"DistOpt({self.opt!r}, {self.communicator!r})"


def _contiguous(t) -> np.ndarray:
    a = getattr(t, "data", t)
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
        raise TypeError("all_reduce takes concrete tensors (or C-contiguous arrays)")
    return a

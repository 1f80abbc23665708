"""Rank programs of the data-parallel tests, launched with mpiexec by test_dist.py:

    mpiexec -n 2 python tests/distributed/worker.py equiv OUT_DIR
    mpiexec -n 2 python tests/distributed/worker.py semantics OUT_DIR
    mpiexec -n 2 python tests/distributed/worker.py kill|hang OUT_DIR TIMEOUT
"""
from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

from singa_graph import opt, random as sg_random, tensor, zoo
from singa_graph.dist import DistOpt
from singa_graph.passes import dist as pdist

B = 8          # batch per rank
STEPS = 5
LR, MOMENTUM = 0.05, 0.9
# fusion thresholds: below every gradient (each alone), in between, above all (one bucket)
THRESHOLDS = {"small": 1, "mid": 200, "large": 2097152}


def make_model():
    return zoo.CNN(bn=False, channels=(4, 8))


def batches(world_size: int):
    """``STEPS`` global batches of ``world_size * B`` 8x8 images (fixed data)."""
    rng = np.random.default_rng(7)
    x = rng.random((STEPS, world_size * B, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, (STEPS, world_size * B)).astype(np.int32)
    return x, y


LAST_REPORT: list = [None]  # the memory report of the last plan train() ran


def train(model_opt, rank: int, world: int, graph: bool, seed: int, budget=None):
    """Train STEPS steps on rank's shard; returns (losses, params, all-reduce nodes)."""
    sg_random.seed(seed)
    m = make_model()
    m.set_optimizer(model_opt)
    x, y = batches(world)
    m.compile([x[0, :B]], is_train=True, use_graph=graph, memory_budget=budget)
    losses = []
    for s in range(STEPS):
        xs, ys = x[s, rank * B:(rank + 1) * B], y[s, rank * B:(rank + 1) * B]
        _, loss = m(xs, ys)
        losses.append(np.asarray(loss.data).item())
    starts = sum(n.type == "AllReduceStart" for n in m.last_plan.nodes) if graph else -1
    LAST_REPORT[:] = [m.last_plan.memory_report() if graph else None]
    checkpoint_round_trip(m, model_opt)
    return np.array(losses), {k: p.data.copy() for k, p in m.get_params().items()}, starts


def checkpoint_round_trip(m, d):
    """save_states on every rank: rank 0 writes, all return once the file is complete; then
    every rank loads it back."""
    path = os.path.join(os.environ["WORKER_OUT"], "ckpt.zip")
    if d.global_rank == 0 and os.path.exists(path):
        os.unlink(path)
    d.communicator.barrier()
    m.save_states(path)
    assert os.path.exists(path), f"rank {d.global_rank} returned before the checkpoint exists"
    before = {k: p.data.copy() for k, p in m.get_params().items()}
    for p in m.get_params().values():
        p.data[...] = 0
    m.load_states(path)
    for k, p in m.get_params().items():
        assert np.array_equal(p.data, before[k]), f"rank {d.global_rank}: {k} not restored"
    d.communicator.barrier()


CONFIGS = {"graph-small": (True, "small"), "graph-mid": (True, "mid"),
           "graph-large": (True, "large"), "eager-mid": (False, "mid"),
           # a memory budget met by recomputation (the smallest is about 82% here)
           "graph-mid-budget": (True, "mid", "90%")}


def equiv(out):
    rows = {}
    for name, (graph, thr, *budget) in CONFIGS.items():
        d = DistOpt(opt.SGD(lr=LR, momentum=MOMENTUM), threshold=THRESHOLDS[thr], timeout=60)
        losses, params, starts = train(d, d.global_rank, d.world_size, graph,
                                       100 + d.global_rank, *budget)
        if budget:  # the plan recomputed values to fit its budget
            r = LAST_REPORT[0]
            assert r["recomputed_nodes"] > 0 and r["arena_bytes"] <= r["budget_bytes"], r
        rows[f"{name}/buckets"] = np.array(starts)
        mean = np.ascontiguousarray(losses)
        d.communicator.allreduce(mean)
        rows[f"{name}/loss"] = mean / d.world_size
        for k, v in params.items():
            rows[f"{name}/param/{k}"] = v
            every = np.empty((d.world_size,) + v.shape, v.dtype)
            d.communicator.allgather(v, every)
            assert all(np.array_equal(every[0], e) for e in every), f"{name}: {k} differs"
    if d.global_rank == 0:
        np.savez(os.path.join(out, "equiv.npz"), **rows)


def semantics(out):
    comm = DistOpt(opt.SGD(lr=0.1), timeout=60).communicator
    rank, world = comm.global_rank, comm.world_size
    rows = {}
    shapes = [(3, 4), (5,), (2, 2, 2)]
    for topk in (False, True):
        for corr in (False, True):
            key = f"sparse-topk{int(topk)}-corr{int(corr)}"
            size = sum(int(np.prod(s)) for s in shapes)
            res = pdist.zeros_state((size,), np.float32, "res") if corr else None
            for step in range(3):
                rng = np.random.default_rng([rank, step])
                grads = [tensor.from_numpy(rng.standard_normal(s).astype(np.float32))
                         for s in shapes]
                sums = pdist.sparse_allreduce(comm, grads, res, 0.3 if topk else 0.8, topk,
                                              0.5)
                rows[f"{key}/{step}/sum"] = np.concatenate([t.data.ravel() for t in sums])
                if corr:
                    rows[f"{key}/{step}/res{rank}"] = res.data.copy()
    # partial average
    shapes = [(4,), (2, 3), (5,)]
    ps = [tensor.from_numpy(np.random.default_rng([rank, 9, i]).standard_normal(s)
                            .astype(np.float32)) for i, s in enumerate(shapes)]
    counter = pdist.zeros_state((), np.int64, "counter")
    for step in range(3):
        pdist.partial_average(comm, ps, [[0], [1, 2]], counter)
        for i, p in enumerate(ps):
            rows[f"partial/{step}/{i}/rank{rank}"] = p.data.copy()
            every = np.empty((world,) + p.shape, np.float32)
            comm.allgather(np.ascontiguousarray(p.data), every)
            rows[f"partial/{step}/{i}/all"] = every
    d = DistOpt(opt.SGD(), timeout=60)
    a, b = (tensor.from_numpy(np.full(s, rank + 1.0, np.float32)) for s in ((3,), (2, 2)))
    d.all_reduce(a)
    d.fused_all_reduce([b, a])
    d.wait()
    rows[f"eager-collectives/rank{rank}"] = np.concatenate([a.data, b.data.ravel()])
    rows.update(end_to_end(comm))
    gathered = comm.comm.gather(rows, root=0)
    if rank == 0:
        merged = {}
        for r in gathered:
            merged.update(r)
        np.savez(os.path.join(out, "semantics.npz"), **merged)


class Custom(zoo.CNN):
    """A CNN whose training step calls one of DistOpt's update methods."""

    def __init__(self, method, **kw):
        super().__init__(bn=False, channels=(4, 8))
        self.method, self.kw = method, kw

    def train_one_batch(self, x, y):
        out = self.forward(x)
        loss = self.softmax_cross_entropy(out, y)
        getattr(self.optimizer, self.method)(loss, **self.kw)
        return out, loss


def end_to_end(comm):
    """Partial and sparse updates through Model in both modes: per step, which parameters
    agree on every rank (as a 0/1 vector in get_params() order)."""
    rows = {}
    for graph in (True, False):
        for method, kw in (("backward_and_partial_update", {"threshold": 200}),
                           ("backward_and_sparse_update", {"threshold": 200, "spars": 0.01,
                                                           "topK": False, "corr": True}),
                           ("backward_and_sparse_update", {"threshold": 200, "spars": 0.1,
                                                           "topK": True, "corr": False})):
            d = DistOpt(opt.SGD(lr=LR, momentum=MOMENTUM), timeout=60)
            sg_random.seed(100 + d.global_rank)
            m = Custom(method, **kw)
            m.set_optimizer(d)
            x, y = batches(d.world_size)
            r = d.global_rank
            m.compile([x[0, :B]], is_train=True, use_graph=graph)
            key = f"e2e/{int(graph)}/{method}/{kw.get('topK', '')}"
            for s in range(3):
                m(x[s, r * B:(r + 1) * B], y[s, r * B:(r + 1) * B])
                same = []
                for p in m.get_params().values():
                    every = np.empty((d.world_size,) + p.shape, p.dtype)
                    d.communicator.allgather(np.ascontiguousarray(p.data), every)
                    same.append(all(np.array_equal(every[0], e) for e in every))
                rows[f"{key}/{s}"] = np.array(same)
            rows[f"{key}/sizes"] = np.array([p.size for p in m.get_params().values()])
    return rows


def fail(out, how: str, timeout: float):
    d = DistOpt(opt.SGD(lr=LR, momentum=MOMENTUM), timeout=timeout)
    with open(os.path.join(out, f"pid.{d.global_rank}"), "w") as f:
        f.write(str(os.getpid()))
    sg_random.seed(0)
    m = make_model()
    m.set_optimizer(d)
    x, y = batches(d.world_size)
    m.compile([x[0, :B]], is_train=True, use_graph=True)
    for s in range(1000):
        if s == 3 and d.global_rank == 1:
            with open(os.path.join(out, "died"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        m(x[s % STEPS, :B], y[s % STEPS, :B])
    print("rank", d.global_rank, "finished without noticing", flush=True)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    os.environ["WORKER_OUT"] = out
    if mode == "equiv":
        equiv(out)
    elif mode == "semantics":
        semantics(out)
    else:
        fail(out, mode, float(sys.argv[3]))

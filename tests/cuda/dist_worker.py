"""Rank program of the CUDA data-parallel test (launched by test_dist_cuda.py):

    mpiexec -n 2 python tests/cuda/dist_worker.py OUT_DIR

Each rank trains the tiny MLP of test_training.py on the CUDA device (the simulator in
tests) with DistOpt: all-reduce buckets in graph mode at two fusion thresholds, eager mode,
and the sparse update; rank 0 writes the losses and parameters to OUT_DIR/cuda_dist.npz.
"""
from __future__ import annotations

import os
import sys

import numpy as np

from singa_graph import device, opt, random as sg_random, tensor, zoo
from singa_graph.dist import DistOpt

B, STEPS, SHAPE = 4, 3, (12,)
CONFIGS = {"graph-small": (True, 1), "graph-large": (True, 1 << 20), "eager": (False, 64),
           "sparse": (True, None)}


def make_model():
    return zoo.MLP(hidden=(16,), num_classes=10)


def batches(world: int):
    rng = np.random.default_rng(3)
    return (rng.standard_normal((STEPS, world * B) + SHAPE).astype(np.float32),
            rng.integers(0, 10, (STEPS, world * B)).astype(np.int32))


def main(out):
    dev = device.create_cuda_gpu()
    rows = {}
    for name, (graph, threshold) in CONFIGS.items():
        d = DistOpt(opt.SGD(lr=0.05, momentum=0.9), threshold=threshold or 64, timeout=120)
        if name == "sparse":  # top 60% of each bucket, no residual: still trains alike
            d.backward_and_update = lambda loss, d=d: d.backward_and_sparse_update(
                loss, spars=0.6, topK=True, corr=False)
        rank, world = d.global_rank, d.world_size
        sg_random.seed(100 + rank)  # different seeds: rank 0's weights must be broadcast
        m = make_model()
        m.set_optimizer(d)
        m.compile([tensor.Tensor((B,) + SHAPE, dev)], is_train=True, use_graph=graph)
        x, y = batches(world)
        losses = []
        for s in range(STEPS):
            _, loss = m(x[s, rank * B:(rank + 1) * B], y[s, rank * B:(rank + 1) * B])
            losses.append(float(loss.to_numpy()[0]))
        mean = np.array(losses)
        d.communicator.allreduce(mean)
        rows[f"{name}/loss"] = mean / world
        for k, p in m.get_params().items():
            assert dev.is_array(p.data), f"{k} left the device"
            v = p.to_numpy()
            every = np.empty((world,) + v.shape, v.dtype)
            d.communicator.allgather(np.ascontiguousarray(v), every)
            assert all(np.array_equal(every[0], e) for e in every), f"{name}: {k} differs"
            rows[f"{name}/param/{k}"] = v
    if d.global_rank == 0:
        np.savez(os.path.join(out, "cuda_dist.npz"), **rows)


if __name__ == "__main__":
    main(sys.argv[1])

"""Each rank's part of a data set, a different one every epoch.

All ranks draw the same permutation (from ``seed`` and ``epoch``) and rank ``r`` takes every
``world_size``-th index starting at ``r``, so the shards are disjoint and together cover the
data set. Every rank gets the same number of samples (the last ``n % world_size`` of the
permutation are dropped, or, with ``drop_last=False``, the permutation is padded by
repeating its head), because every rank must run the same number of steps: a rank with one
batch more would wait in an all-reduce that the others never start.
"""
from __future__ import annotations

import numpy as np


def shard(n: int, rank: int, world_size: int, epoch: int = 0, seed: int = 0,
          shuffle: bool = True, drop_last: bool = True) -> np.ndarray:
    """The indices of the samples rank ``rank`` reads in epoch ``epoch`` (PyTorch's
    DistributedSampler). Pass a new ``epoch`` each epoch for a new permutation."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of {world_size} processes")
    if n < world_size and drop_last:
        raise ValueError(f"{n} samples cannot give each of {world_size} ranks one")
    idx = (np.random.default_rng([seed, epoch]).permutation(n) if shuffle
           else np.arange(n))
    if drop_last:
        idx = idx[:n - n % world_size]
    elif n % world_size:
        idx = np.concatenate([idx, np.resize(idx, world_size - n % world_size)])
    return idx[rank::world_size]


def iterate_shard(x, y, batch_size: int, rank: int, world_size: int, epoch: int = 0,
                  seed: int = 0, shuffle: bool = True):
    """Yield this rank's ``(x_batch, y_batch)`` of ``batch_size`` rows for one epoch; every
    rank yields the same number of batches."""
    if len(x) != len(y):
        raise ValueError(f"iterate_shard: {len(x)} inputs but {len(y)} labels")
    if batch_size < 1:
        raise ValueError(f"iterate_shard: batch_size must be >= 1, got {batch_size}")
    idx = shard(len(x), rank, world_size, epoch, seed, shuffle)
    for s in range(0, len(idx) - len(idx) % batch_size, batch_size):
        b = idx[s:s + batch_size]
        yield x[b], y[b]

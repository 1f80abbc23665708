"""Kernel cases: the collective ops (runtime/kernels/cuda/dist.py) against a stand-in for a
second rank that contributes exactly what this one does (so a sum doubles); real MPI runs
are in tests/distributed."""
import numpy as np

from singa_graph.ops import dist
from singa_graph.runtime import registry

from harness import Case, rand

WORLD = 2


class MirrorChannel:
    """A bucket's channel whose all-reduce adds one more rank holding the same bucket."""

    name = "bucket0"

    def __init__(self):
        self.buf = None

    def start(self, buf):
        self.buf = buf

    def wait(self):
        self.buf *= WORLD


class MirrorComm:
    """Collectives of ``WORLD`` ranks that all hold this rank's data."""

    def allgather(self, send, recv, what=""):
        recv.reshape(WORLD, -1)[:] = send.reshape(1, -1)

    def allgatherv(self, send, recv, counts, what=""):
        n = send.size
        for r in range(WORLD):
            recv[r * n:(r + 1) * n] = send

    def allreduce(self, buf, what=""):
        buf *= WORLD


def _started(start_op):
    def prepare(device, ins):
        # the wait's bucket is the start's output: pack it (from itself) and start
        registry.bind(start_op, [ins[0]], [ins[0]], device.kind)()
    return prepare


_shapes = [(3, 4), (5,)]
_grads = [rand(3, 4, seed=1), rand(5, seed=2)]
_ch_start, _ch_wait = MirrorChannel(), MirrorChannel()
CASES = [
    Case(dist.AllReduceStart(_ch_start), _grads, name="AllReduceStart packs the bucket"),
    Case(dist.AllReduceWait(_ch_wait, _shapes, 1.0 / WORLD), [rand(17, seed=3)],
         prepare=_started(dist.AllReduceStart(_ch_wait)), name="AllReduceWait mean"),
    Case(dist.SparseAllReduce(MirrorComm(), _shapes, 0.5, False, False, 0.5, WORLD), _grads,
         name="SparseAllReduce threshold"),
    Case(dist.SparseAllReduce(MirrorComm(), _shapes, 0.3, True, True, 0.5, WORLD),
         _grads + [rand(17, seed=4) * 0.1], name="SparseAllReduce topK with residual"),
    Case(dist.PartialAverage(MirrorComm(), [[0], [1]], WORLD),
         [rand(3, 4, seed=5), rand(5, seed=6), np.array(1, np.int64)], steps=3,
         name="PartialAverage over three steps"),
]

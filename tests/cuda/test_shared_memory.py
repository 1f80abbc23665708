"""Every thread of a block sees one ``cuda.shared.array``: on a GPU by construction, on the
simulator because tests/cuda/conftest.py makes its allocation thread-safe (numba-cuda 0.30
can hand two threads that interleave there two different arrays, which the short switch
interval set there makes likely)."""
import threading

import numpy as np
import pytest
from numba import cuda, float64

THREADS = 128


@cuda.jit
def _block_sum(out):
    sh = cuda.shared.array(THREADS, float64)
    t = cuda.threadIdx.x
    sh[t] = t + 1
    cuda.syncthreads()
    if t == 0:
        s = 0.0
        for i in range(THREADS):
            s += sh[i]
        out[cuda.blockIdx.x] = s


def test_a_blocks_threads_share_one_array(gpu):
    out = cuda.to_device(np.zeros(4))
    _block_sum[4, THREADS](out)
    cuda.synchronize()
    np.testing.assert_array_equal(out.copy_to_host(), THREADS * (THREADS + 1) / 2)


def test_simulated_shared_arrays_are_created_once_under_contention(simulated):
    if not simulated:
        pytest.skip("the simulator's allocation; a GPU has real shared memory")
    from numba.cuda.simulator.kernelapi import FakeCUDAShared

    def race():
        shared, start, got = FakeCUDAShared(0), threading.Barrier(16), []

        def thread():
            start.wait()
            got.append(shared.array(8, np.float32))  # one call site for all 16 threads

        threads = [threading.Thread(target=thread) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return got

    for _ in range(30):  # unlocked, about one race in five went wrong
        got = race()
        assert len(got) == 16 and all(a is got[0] for a in got)

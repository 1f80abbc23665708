"""Launch plumbing: a step bound earlier keeps its own grid when the same kernel is bound
again with another (the simulator configures kernel objects in place)."""
import numpy as np

from singa_graph.runtime.kernels.cuda.blas import gemm_step


def test_bound_gemms_keep_their_grids(gpu):
    big_a, big_b = np.ones((9, 3), np.float32), np.ones((3, 10), np.float32)
    a, b = gpu.put(big_a), gpu.put(big_b)
    c = gpu.zeros((9, 10), np.float32)
    first = gemm_step(a, b, c)  # a grid of 3x3 tiles in the simulator
    small = gpu.zeros((1, 1), np.float32)
    gemm_step(gpu.put(big_a[:1]), gpu.put(big_b[:, :1]), small)  # a grid of one tile
    first()
    gpu.synchronize()
    np.testing.assert_array_equal(gpu.get(c), big_a @ big_b)

"""CUDA kernels: numba.cuda grid-stride kernels, one module per op family as on the CPU,
with the same factory contract (called once with arena views; the step allocates nothing).
GEMMs go to cuBLAS through CuPy (:mod:`.blas`), with a tiled numba.cuda GEMM where CuPy is
absent (the CUDA simulator).

Importing this package registers every CUDA kernel; it is imported the first time an op
runs on, or a plan is compiled for, a CUDA device.
"""
from ...gpu import numpy_compat

numpy_compat()  # before the kernel modules import numba.cuda

from . import (activation, attention, conv, dist, dropout, elementwise, indexing,  # noqa: F401
               layout, linalg, loss, norm, pool, recurrent, reduce, shape, update)

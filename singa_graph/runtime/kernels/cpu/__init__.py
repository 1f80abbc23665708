"""CPU kernels: Numba ``@njit(cache=True)`` loops where fusing or parallelising pays, and
numpy ufunc / BLAS calls where a single compiled library routine already does the work
(wrapping one ufunc in njit would only add compile time).

Importing this package registers every CPU kernel.
"""
from . import (activation, attention, conv, conv_channels_last, conv_direct,  # noqa: F401
               conv_direct_last, conv_nd, matmul_direct, dist, dropout, elementwise,
               index_nd, integer, layout, linalg, loss, norm, pool, pool_nd, quant,
               recurrent, reduce, resize, sample, shape, update)
from . import control  # noqa: F401  (If, Loop, Scan: run the plans of their bodies)

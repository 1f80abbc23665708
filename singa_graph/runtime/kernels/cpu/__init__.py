"""CPU kernels: Numba ``@njit(cache=True)`` loops where fusing or parallelising pays, and
numpy ufunc / BLAS calls where a single compiled library routine already does the work
(wrapping one ufunc in njit would only add compile time).

Importing this package registers every CPU kernel.
"""
from . import (activation, conv, dropout, elementwise, linalg, loss, math,  # noqa: F401
               norm, pool, reduce, shape, update)

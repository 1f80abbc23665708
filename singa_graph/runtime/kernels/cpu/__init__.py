"""CPU kernels: Numba ``@njit(cache=True)`` loops where fusing or parallelising pays, and
numpy ufunc / BLAS calls where a single compiled library routine already does the work
(wrapping one ufunc in njit would only add compile time).

Importing this package registers every CPU kernel.
"""
from . import (activation, conv, dropout, elementwise, layout, linalg, loss,  # noqa: F401
               math, norm, pool, recurrent, reduce, shape, update)

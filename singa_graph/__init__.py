"""singa_graph: a define-then-run deep-learning graph compiler with SINGA-style APIs."""
import os as _os

# Numba's OpenMP threads must sleep, not spin, between parallel loops: the batch-parallel
# GEMM kernels run on other threads (see runtime/threads.py) and a spinning OpenMP thread
# takes their core. Read once when the OpenMP runtime starts, so it is set before any
# kernel runs; an explicit setting in the environment wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from . import errors, ops  # noqa: F401  (ops registers every Operation)
from . import tensor  # noqa: F401  (adds SINGA's Tensor methods: copy_from, l2, t[i], ...)
from .errors import (CheckpointError, DTypeError, GraphError, PlanError, ShapeError,  # noqa: F401
                     SingaGraphError, UnsupportedOpError)
from .ir import Graph, Parameter, Placeholder, PlaceHolder, Tensor  # noqa: F401

__version__ = "0.1.0"

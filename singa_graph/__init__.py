"""singa_graph: a define-then-run deep-learning graph compiler with SINGA-style APIs."""
# before anything compiles: Numba's loops vectorise with whole AVX-512 registers
from .host import prefer_whole_vectors as _prefer_whole_vectors

_prefer_whole_vectors()
# first: the thread policy puts its wait policy in the environment before any pool starts
from .runtime.threads import get_num_threads, set_num_threads  # noqa: F401
from . import errors, ops  # noqa: F401  (ops registers every Operation)
from .runtime import device as _device, registry as _registry  # noqa: F401  (bind the IR's runtime hooks)
from . import tensor  # noqa: F401  (adds SINGA's Tensor methods: copy_from, l2, t[i], ...)
from .errors import (CheckpointError, DTypeError, GraphError, MemoryBudgetError,  # noqa: F401
                     PlanError, ShapeError,
                     SingaGraphError, UnsupportedOpError)
from .ir import Graph, Parameter, Placeholder, PlaceHolder, Tensor  # noqa: F401

__version__ = "0.1.0"

"""Compiler passes: pure functions over a Graph."""
from .autodiff import autodiff, backward, iter_gradients  # noqa: F401
from .compile import compile  # noqa: F401
from .liveness import StorageGroups, live_bytes_peak  # noqa: F401
from .memory import MemoryPlan, plan_memory  # noqa: F401
from .schedule import POLICIES, schedule  # noqa: F401
from .verify import verify  # noqa: F401
from .remat import minimum_budget, parse_budget, rematerialize  # noqa: F401

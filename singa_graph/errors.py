"""The one exception hierarchy of singa_graph.

Every error the library raises on purpose derives from :class:`SingaGraphError`, so a caller
can catch them all at once; the subclasses also derive from the matching builtin (ValueError,
TypeError, ...) so code written against numpy-style errors keeps working.
"""


class SingaGraphError(Exception):
    """Base class of every error raised by singa_graph."""


class ShapeError(SingaGraphError, ValueError):
    """Input shapes do not fit an op, or a feed has the wrong shape."""


class ArgumentShapeError(ShapeError, AssertionError):
    """An argument of SINGA's functional API has a rank or shape that SINGA asserts against
    (``softmax_cross_entropy`` of 3-d targets, ``add_bias`` on axis 3, ...). It is also an
    AssertionError, so SINGA code and tests that expect one keep working."""


class DTypeError(SingaGraphError, TypeError):
    """Input dtypes do not fit an op, or a feed has the wrong dtype."""


class UnsupportedOpError(SingaGraphError, NotImplementedError):
    """No definition, kernel or ONNX mapping exists for an op on the requested device."""


class GraphError(SingaGraphError, ValueError):
    """A graph is malformed: a cycle, a dangling tensor, a missing feed."""


class PlanError(SingaGraphError, RuntimeError):
    """A schedule or memory plan violates its contract (found by ``verify``)."""


class CheckpointError(SingaGraphError, ValueError):
    """A checkpoint does not match the model it is loaded into, or is unreadable."""


class DeviceError(SingaGraphError, RuntimeError):
    """A device is unavailable or a tensor lives on the wrong device."""


class ModelFormatError(SingaGraphError, ValueError):
    """A model file is truncated, malformed or not a model of the expected format."""


class ToolMissingError(SingaGraphError, RuntimeError):
    """An external program a dump needs (Graphviz ``dot``, an SVG-to-PNG converter) is not
    installed; the message says how to install it."""


class FeedError(SingaGraphError, ValueError):
    """A fed value cannot be used: an empty batch, a class label out of range, an integer
    that would wrap when cast to the input's dtype. Raised before any step runs."""


class StateUndefinedError(SingaGraphError, RuntimeError):
    """A step failed after it had already updated persistent state (parameters, buffers or
    optimizer state), which is now neither the old nor the new state."""


class MemoryBudgetError(SingaGraphError, ValueError):
    """A memory budget cannot be met (below the smallest arena the planner can reach, even
    recomputing values), is malformed, or was given where nothing is planned (eager mode).
    ``minimum`` holds the smallest feasible budget in bytes when it is known."""

    def __init__(self, message: str, minimum: int | None = None):
        super().__init__(message)
        self.minimum = minimum

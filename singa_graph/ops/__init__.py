"""The op library: one module per family, each op one Operation subclass plus a functional
wrapper. Importing this package registers every op in :data:`singa_graph.ir.op.OPS`."""
from .activation import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .by_value import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .conv_tiles import *  # noqa: F401,F403
from . import control  # noqa: F401  (If, Loop, Scan)
from .conv_nd import *  # noqa: F401,F403
from .dist import *  # noqa: F401,F403
from .dropout import *  # noqa: F401,F403
from .fused import FusedElementwise  # noqa: F401
from .elementwise import *  # noqa: F401,F403
from .index_nd import *  # noqa: F401,F403
from .indexing import *  # noqa: F401,F403
from .integer import *  # noqa: F401,F403
from .layout import *  # noqa: F401,F403
from .linalg import *  # noqa: F401,F403
from .logic import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .nonlinear import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from .pool_nd import *  # noqa: F401,F403
from .quant import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
from .reduce import *  # noqa: F401,F403
from .resize import *  # noqa: F401,F403
from .sample import *  # noqa: F401,F403
from .shape import *  # noqa: F401,F403
from .update import *  # noqa: F401,F403

# Tensor's operators (t + u, t.reshape, ...) build these ops; the IR reaches them through
# its bindings so that it never imports this package.
import sys as _sys

from ..ir import bindings as _bindings

_bindings.bind("ops", _sys.modules[__name__])

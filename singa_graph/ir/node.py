"""Nodes: one application of an Operation to input Tensors, producing output Tensors."""
from __future__ import annotations

import contextlib
import itertools
import threading

_ids = itertools.count()  # next() on a count is atomic: ids stay unique across threads
_scopes = threading.local()  # per thread: models traced in different threads keep their own


class _Capture(threading.local):
    """Passes that add nodes to an existing graph (autodiff, optimizer) push a list on this
    thread's stack; every Node this thread creates while it is there is appended to it."""

    def __init__(self):
        self.stack: list[list] = []


_capture = _Capture()


def capture_stack() -> list[list]:
    """This thread's stack of node-capturing lists."""
    return _capture.stack


class Node:
    """One op instance in a graph.

    Attributes:
        op: the :class:`~singa_graph.ir.op.Operation` (holds the attributes).
        inputs: the input Tensors, in the op's argument order.
        outputs: the output Tensors; each has ``creator`` set to this node.
        name: unique, readable (``MatMul_12`` or the layer-given name).
        id: creation index; sorting nodes by id gives program order.
        scope: the hierarchical name of the layer that created the node (``block1.conv1``),
            or None; gradient nodes take the scope of the node they differentiate.
    """

    __slots__ = ("op", "inputs", "outputs", "name", "id", "scope")

    def __init__(self, op, inputs, name: str | None = None):
        self.id = next(_ids)
        self.op = op
        self.inputs = list(inputs)
        self.outputs = []
        self.name = name or f"{op.type}_{self.id}"
        self.scope = current_scope()
        stack = _capture.stack
        if stack:
            stack[-1].append(self)

    @property
    def type(self) -> str:
        return self.op.type

    @property
    def label(self) -> str:
        """The op's readable name: its type, or the types a fused node computes
        ("Sigmoid+Mul")."""
        return self.op.label

    def backward(self, *dys):
        """SINGA's ``Operator.backward``: the gradients of this op's inputs given those of
        its outputs, computed now through the op's own gradient rule (eager tensors only).

        Each ``dy`` may be a Tensor, an array or a number (broadcast to the output's shape;
        ``backward()`` of a scalar loss uses 1.0, as SINGA). Returns one Tensor, or a tuple
        with one entry per forward input of SINGA's operator (None for inputs without a
        gradient); inputs that SINGA's operator takes as constructor arguments (a loss's
        target, Where's condition: ``op.attribute_inputs``) get no entry, as in SINGA.
        """
        import numpy as np

        from ..errors import GraphError
        from .op import no_grad
        from .tensor import Tensor

        if any(t.data is None for t in (*self.inputs, *self.outputs)):
            raise GraphError(f"{self.name}.backward() needs concrete (eager) tensors; in graph "
                             "mode use passes.autodiff")
        if not dys:
            dys = (1.0,)
        if len(dys) != len(self.outputs):
            raise GraphError(f"{self.name}.backward() got {len(dys)} gradients for "
                             f"{len(self.outputs)} outputs")

        def as_grad(d, y):
            if d is None or isinstance(d, Tensor):
                return d
            if y.dtype.kind != "f":
                return None  # nothing flows into an integer output (shape, argmax)
            arr = np.broadcast_to(np.asarray(d, y.dtype), y.shape)
            return Tensor(data=arr, device=y.device, requires_grad=False)

        needs = [x.dtype.kind == "f" for x in self.inputs]
        with no_grad():
            dxs = list(self.op.gradient(self.inputs, self.outputs,
                                        [as_grad(d, y) for d, y in zip(dys, self.outputs)],
                                        needs))
        dxs = [dx if need else None for dx, need in zip(dxs, needs)]
        return self.op.protocol_gradients(dxs, dys)

    def __repr__(self):
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"Node({self.name}: ({ins}) -> ({outs}))"


def current_scope() -> str | None:
    """The innermost scope entered with :func:`scope` in this thread, or None."""
    stack = getattr(_scopes, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def scope(name: str | None):
    """Nodes created inside the block get ``scope=name`` (a layer's hierarchical name).
    ``None`` keeps the enclosing scope."""
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    stack.append(name if name is not None else current_scope())
    try:
        yield
    finally:
        stack.pop()

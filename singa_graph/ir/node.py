"""Nodes: one application of an Operation to input Tensors, producing output Tensors."""
from __future__ import annotations

import contextlib
import itertools
import threading

_ids = itertools.count()
_scopes = threading.local()  # per thread: models traced in different threads keep their own

# Passes that add nodes to an existing graph (autodiff, optimizer) push a list here; every
# Node created while it is on the stack is appended to it, in creation order.
_capture_stack: list[list] = []


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
        if _capture_stack:
            _capture_stack[-1].append(self)

    @property
    def type(self) -> str:
        return self.op.type

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

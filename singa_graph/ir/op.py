"""The Operation base class and the op registry.

One op is one definition: an :class:`Operation` subclass holds the attributes, infers output
shapes and dtypes from input shapes alone (:meth:`Operation.infer`), and builds its gradient
out of other ops (:meth:`Operation.gradient`). Kernels live elsewhere, registered per device
(see :mod:`singa_graph.runtime.registry`), so eager mode and compiled plans share them.
"""
from __future__ import annotations

import contextlib
import threading
from typing import ClassVar, Sequence

import numpy as np

from ..errors import DTypeError, ShapeError, UnsupportedOpError
from . import bindings, node as _node
from .tensor import Tensor, TensorSpec

OPS: dict[str, type] = {}



class _TraceState(threading.local):
    """Whether eager ops record nodes, and how deep inside :func:`building` this thread is.
    Per thread, so one model tracing its step never changes what another thread's ops do."""

    record = True
    build = 0


_state = _TraceState()


@contextlib.contextmanager
def no_grad():
    """Eager ops run inside this block record no nodes, so no backward can pass through them."""
    old = _state.record
    _state.record = False
    try:
        yield
    finally:
        _state.record = old


@contextlib.contextmanager
def building():
    """Inside this block every op records a node and produces a symbolic tensor, even when all
    of its inputs hold data (a parameter transposed inside a model is still a graph op)."""
    _state.build += 1
    try:
        yield
    finally:
        _state.build -= 1


@contextlib.contextmanager
def not_building():
    """Suspend :func:`building` inside the block: ops on concrete tensors run at once again
    (parameter initialisers called while a model is being traced)."""
    saved = _state.build
    _state.build = 0
    try:
        yield
    finally:
        _state.build = saved


def is_building() -> bool:
    return _state.build > 0


class Operation:
    """Base of every op.

    Subclasses set, as class attributes:
        inplace: ``{out_index: in_index}`` pairs where the output may overwrite the input when
            the input dies at this node (elementwise ops).
        alias: ``{out_index: in_index}`` pairs where the output is a view of the input's buffer
            (reshape-like ops); the kernel then does nothing at all.
        mutates: indices of inputs that the op writes in place (optimizer updates, running
            statistics). The scheduler orders every other reader of such an input before it.
        differentiable: False for ops that have no gradient (argmax, updates).
        run_asap: schedulers run the node as soon as it is ready (optimizer updates: the
            gradient they consume dies at once; the start of an all-reduce).
        run_late: schedulers hold the node back while any other node is ready (the wait of
            an all-reduce, so that communication overlaps the rest of the backward).
        attribute_inputs: indices of inputs that SINGA's operator takes as constructor
            arguments rather than forward inputs (Where's condition, a loss's target), so
            that SINGA's ``y.creator.backward(dy)`` returns no gradient for them.

    and implement :meth:`infer` and, when differentiable, :meth:`gradient`.
    """

    type: ClassVar[str]
    inplace: ClassVar[dict] = {}
    alias: ClassVar[dict] = {}
    mutates: ClassVar[tuple] = ()
    differentiable: ClassVar[bool] = True
    run_asap: ClassVar[bool] = False
    run_late: ClassVar[bool] = False
    attribute_inputs: ClassVar[tuple] = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.type = cls.__dict__.get("type", cls.__name__)
        if not cls.__name__.startswith("_"):
            OPS[cls.type] = cls

    name: str | None = None

    @property
    def label(self) -> str:
        """How profiles and pictures name the op: its type, or for a node that fusion
        passes merged, what it computes (``Conv2d+Add+ReLU``)."""
        return self.type

    # ------------------------------------------------------------------ to override
    def infer(self, *inputs: Tensor) -> Sequence[TensorSpec]:
        """Output shapes and dtypes from the inputs' shapes and dtypes alone.

        Raise :class:`ShapeError` / :class:`DTypeError` with a message that names the shapes;
        ``__call__`` prefixes it with the op and node names.
        """
        raise NotImplementedError

    def gradient(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
                 dys: Sequence[Tensor | None], needs: Sequence[bool]) -> Sequence[Tensor | None]:
        """Build the gradients of the inputs from the gradients ``dys`` of the outputs.

        Called by autodiff with graph-mode or eager tensors; it must only call other ops, so
        the backward lands in the same graph. ``dys[i]`` is None when output i gets no
        gradient; ``needs[j]`` is False when nobody wants input j's gradient (return None
        there to save work). Returns one entry per input.
        """
        raise UnsupportedOpError(f"op {self.type} has no gradient")

    def protocol_gradients(self, dxs: list, dys: Sequence[Tensor]):
        """What SINGA's ``Operator.backward`` returns, given this op's input gradients
        ``dxs`` and the output gradients ``dys`` as the caller gave them (see
        :meth:`Node.backward`): one per input that is not in
        ``attribute_inputs``, a single one unwrapped."""
        dxs = [dx for i, dx in enumerate(dxs) if i not in self.attribute_inputs]
        return dxs[0] if len(dxs) == 1 else tuple(dxs)

    def index_inputs(self, inputs: Sequence[Tensor]) -> dict[int, int]:
        """Inputs that hold class indices, as ``{input index: n}``: every value must lie in
        ``[0, n)``. Plans check fed values before the first step runs, and eager mode before
        the kernel, so a bad label never reaches a kernel after state has been updated."""
        return {}

    def attributes(self) -> dict:
        """The op's attributes, for dumps, ONNX export and equality of plans."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "name"}

    # ------------------------------------------------------------------ calling
    def __call__(self, *inputs):
        inputs = [x if isinstance(x, Tensor) else _constant(x, inputs) for x in inputs]
        try:
            specs = list(self.infer(*inputs))
        except (ShapeError, DTypeError) as e:
            label = self.name or f"{self.type}_{next(_node._ids)}"  # the node it would have been
            raise type(e)(f"{self.type} (node {label}): {e}") from None
        device = inputs[0].device if inputs else None
        eager = not is_building() and all(x.data is not None for x in inputs)
        requires_grad = self.differentiable and any(x.requires_grad for x in inputs)
        record = not eager or (_state.record and requires_grad)
        node = _node.Node(self, inputs, self.name) if record else None
        outs = []
        for i, s in enumerate(specs):
            t = Tensor.symbolic(s.shape, s.dtype, device, creator=node,
                                requires_grad=requires_grad and record)
            if node is not None:
                t.name = node.name if len(specs) == 1 else f"{node.name}:{i}"
                node.outputs.append(t)
            outs.append(t)
        if eager:
            bindings.run_eager(self, inputs, outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self):
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attributes().items())
        return f"{self.type}({attrs})"


def _constant(value, inputs) -> Tensor:
    """Wrap a Python scalar or array as a constant tensor, taking the dtype of the first
    tensor input so that ``x * 2`` stays float32."""
    like = next((x for x in inputs if isinstance(x, Tensor)), None)
    arr = np.asarray(value)
    if like is not None and arr.dtype.kind in "biuf" and like.dtype.kind == "f":
        arr = arr.astype(like.dtype)
    elif like is not None and arr.dtype.kind in "biu" and like.dtype.kind in "iu":
        arr = arr.astype(like.dtype)  # int32 tensor + 1 stays int32
    elif arr.dtype == np.float64 and like is None:
        arr = arr.astype(np.float32)
    return Tensor(data=arr, device=like.device if like is not None else None,
                  requires_grad=False, name=None)


def op_class(type_name: str) -> type:
    """The Operation subclass registered under ``type_name``."""
    try:
        return OPS[type_name]
    except KeyError:
        raise UnsupportedOpError(f"no op named {type_name!r}") from None

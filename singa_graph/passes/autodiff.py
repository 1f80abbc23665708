"""Reverse-mode automatic differentiation, for graph mode and eager mode alike.

:func:`iter_gradients` walks the nodes that produced ``loss`` in reverse creation order and
calls each op's ``gradient`` rule. The rules only call ops, so with symbolic tensors they
append backward nodes to the graph and with concrete tensors they compute at once. A tensor's
gradient is *final* when every node that read it has contributed; at that moment a tensor with
``stores_grad`` is yielded, so a caller can update it and drop the gradient at once (SINGA's
layer-wise backward).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..errors import GraphError
from ..ir import node as _node
from ..ir.op import no_grad
from ..ir.tensor import Tensor


def _reach(loss: Tensor) -> list:
    """Nodes that ``loss`` depends on, in creation order."""
    seen, stack = {}, [loss.creator] if loss.creator is not None else []
    while stack:
        n = stack.pop()
        if n.id not in seen:
            seen[n.id] = n
            stack.extend(x.creator for x in n.inputs if x.creator is not None)
    return [seen[k] for k in sorted(seen)]


def iter_gradients(loss: Tensor, dy: Tensor | None = None) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield ``(tensor, gradient)`` for every ``stores_grad`` tensor that ``loss`` depends on,
    each exactly once, as soon as its gradient is final.

    Only nodes on a path from a ``stores_grad`` tensor to ``loss`` are differentiated, so no
    gradient is built for data inputs. ``dy`` seeds the gradient of ``loss`` (ones by default).
    """
    nodes = _reach(loss)
    # wanted: tensors whose gradient someone needs (a stores_grad leaf, or on a path from one)
    wanted: set[int] = set()
    for n in nodes:
        if n.op.differentiable and any(x.stores_grad or id(x) in wanted for x in n.inputs):
            wanted.update(id(o) for o in n.outputs)
    for n in nodes:
        for x in n.inputs:
            if x.stores_grad:
                wanted.add(id(x))
    if id(loss) not in wanted:
        return
    pending: dict[int, int] = {}
    for n in nodes:
        for x in n.inputs:
            if id(x) in wanted:
                pending[id(x)] = pending.get(id(x), 0) + 1
    if dy is None:
        dy = Tensor(data=np.ones(loss.shape, loss.dtype), device=loss.device,
                    requires_grad=False, name=f"d{loss.name}")
    elif dy.shape != loss.shape:
        raise GraphError(f"seed gradient has shape {dy.shape}, loss has {loss.shape}")
    grads: dict[int, Tensor] = {id(loss): dy}
    if loss.stores_grad and not pending.get(id(loss)):
        yield loss, dy
    for n in reversed(nodes):
        dys = [grads.pop(id(o), None) if not o.stores_grad else grads.get(id(o))
               for o in n.outputs]
        needs = [id(x) in wanted for x in n.inputs]
        dxs = [None] * len(n.inputs)
        if any(d is not None for d in dys) and any(needs) and n.op.differentiable:
            with _node.scope(getattr(n, "scope", None)):  # gradients belong to n's layer
                dxs = list(n.op.gradient(n.inputs, n.outputs, dys, needs))
            if len(dxs) != len(n.inputs):
                raise GraphError(f"gradient of {n.name} returned {len(dxs)} entries for "
                                 f"{len(n.inputs)} inputs")
        for x, dx, need in zip(n.inputs, dxs, needs):
            if not need:
                continue
            if dx is not None:
                if dx.shape != x.shape:
                    raise GraphError(f"gradient of {n.name} for {x.name} has shape {dx.shape}, "
                                     f"expected {x.shape}")
                prev = grads.get(id(x))
                grads[id(x)] = dx if prev is None else prev + dx
            pending[id(x)] -= 1
            if pending[id(x)] == 0 and x.stores_grad and id(x) in grads:
                yield x, grads[id(x)]
                if x.creator is None:
                    del grads[id(x)]


def backward(loss: Tensor, dy: Tensor | None = None) -> Iterator[tuple[Tensor, Tensor]]:
    """Eager backward: a generator of ``(param, grad)`` pairs as in SINGA's
    ``autograd.backward``. The backward ops run without recording nodes."""
    if loss.data is None:
        raise GraphError("backward() needs a concrete loss; in graph mode use "
                         "passes.autodiff.autodiff(graph, loss)")
    it = iter_gradients(loss, dy)
    while True:
        with no_grad():
            try:
                pair = next(it)
            except StopIteration:
                return
        yield pair


def autodiff(graph, loss: Tensor, dy: Tensor | None = None) -> dict[Tensor, Tensor]:
    """Graph mode: append the backward of ``loss`` to ``graph``.

    Returns ``{param: grad}`` for every ``stores_grad`` tensor ``loss`` depends on (insertion
    order = the order in which gradients become final). The gradient nodes are added to
    ``graph.nodes``; the gradients are not made graph outputs (the optimizer pass consumes
    them).
    """
    from ..ir.op import building

    out: dict = {}
    with graph.capture(), building():
        for p, g in iter_gradients(loss, dy):
            out[p] = g
    return out

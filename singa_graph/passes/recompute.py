"""Recompute cheap elementwise results for the backward instead of keeping them.

A training graph keeps every forward result that a backward node reads alive from the
forward to the backward. For ``y = f(x)`` with ``f`` elementwise and one input (or a
LayerNorm), where the backward also reads ``x`` (so ``x`` stays alive anyway), keeping ``y``
as well buys one pass over ``x`` at the price of ``y``'s bytes across the whole backward in
between.
In a transformer: GELU's output (4x the model width) is read by the second projection's
weight gradient, its input by GELU's own gradient; a LayerNorm's output by the next
projections' weight gradients, its input by its own gradient. Recomputing both takes a
quarter of the GPT bench's arena (33.1 -> 24.4 MiB) for about 2% of its step.

The pass gives the backward readers of ``y`` a twin node computing ``y' = f(x)``, placed
right before the first of them in program order. The twin runs the same kernel on the same
bytes, so results are bit for bit those of the plan without it. "Backward" is everything
that no fetched tensor depends on (the fetches are the forward's outputs and its loss).
"""
from __future__ import annotations

from collections import defaultdict

from ..ir import node as _node
from ..ir.node import Node
from ..ir.tensor import Tensor
from ..ops import formulas
from .memory import _ancestors


#: ops besides one-input elementwise formulas that are cheap to run again: one pass over
#: their input (LayerNorm recomputes its statistics too; only its output is replaced)
CHEAP = ("LayerNorm",)


def _cheap(node) -> bool:
    if node.type in CHEAP:
        return True
    return (len(node.inputs) == 1 and len(node.outputs) == 1
            and formulas.formula_of(node.op) is not None)


def recompute_cheap(graph, fetches) -> int:
    """Rewrite ``graph`` so the backward recomputes cheap elementwise results (see the
    module docstring); returns how many twins were added."""
    forward = _ancestors(list(fetches))
    if not forward:
        return 0
    readers = defaultdict(list)
    for n in graph.nodes:
        for x in n.inputs:
            readers[id(x)].append(n)
    outputs = {id(t) for t in graph.outputs}
    position = {n.id: i for i, n in enumerate(graph.nodes)}
    twins = defaultdict(list)  # id of the first backward reader -> twins to run before it

    def late(t):
        return [r for r in readers[id(t)] if r.id not in forward]

    def views(t):  # forward reshapes of t: the backward often reads those, not t
        return [r for r in readers[id(t)] if r.id in forward and r.op.alias == {0: 0}
                and len(r.outputs) == 1 and r.inputs[0] is t]

    for n in graph.nodes:
        if n.id not in forward or not _cheap(n):
            continue
        data = [x for x in n.inputs if x.data is None]  # the rest are parameters, constants
        if not data or not all(late(x) for x in data):
            continue  # an input dies in the forward: recomputing would keep it instead
        group, chain = [], [(n, None)]  # (node making a tensor of y's bytes, its source)
        while chain:
            m, src = chain.pop(0)
            group.append((m, src))
            chain.extend((v, m) for v in views(m.outputs[0]))
        if any(id(m.outputs[0]) in outputs for m, _ in group):
            continue
        needed = [(m, src) for m, src in group if late(m.outputs[0])]
        if not needed:
            continue
        copies = {}  # original node id -> its twin
        for m, src in group:  # program order from y on, sources before their views
            if not any(m is k or _derives(k, m, group) for k, _ in needed):
                continue
            twin = _twin(m, n.inputs if src is None else [copies[src.id].outputs[0]])
            copies[m.id] = twin
        readers_late = []
        for m, _ in needed:
            t, t2 = m.outputs[0], copies[m.id].outputs[0]
            for r in late(t):
                r.inputs = [t2 if u is t else u for u in r.inputs]
                readers_late.append(r)
        first = min(readers_late, key=lambda r: position[r.id])
        twins[first.id].extend(copies.values())
    if twins:
        graph.nodes = [m for n in graph.nodes for m in (*twins.get(n.id, ()), n)]
    return sum(len(t) for t in twins.values())


def _derives(k, m, group) -> bool:
    """Whether ``k`` is a view made (through views) from ``m``'s output."""
    src = dict((id(a), b) for a, b in group)
    while k is not None:
        k = src.get(id(k))
        if k is m:
            return True
    return False


def _twin(node, inputs):
    """A node applying ``node``'s op to ``inputs``, with a fresh output tensor."""
    twin = Node.__new__(Node)
    twin.id, twin.op, twin.scope = next(_node._ids), node.op, node.scope
    twin.name = f"{node.name}_again"
    twin.inputs = list(inputs)
    twin.outputs = []
    for i, y in enumerate(node.outputs):
        out = Tensor.symbolic(y.shape, y.dtype, y.device, creator=twin, requires_grad=False)
        out.name = twin.name if len(node.outputs) == 1 else f"{twin.name}:{i}"
        twin.outputs.append(out)
    return twin

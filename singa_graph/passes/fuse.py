"""Epilogue fusion on a complete training graph: fewer passes over the largest tensors.

Runs after autodiff and the optimizer pass, before scheduling, so every gradient already
exists as a graph op and fusion only rewrites how some of them are computed:

* ``ReLU(Conv2d(...))`` and ``ReLU(BatchNorm2d(...))``: the ReLU moves into the producer's
  kernel (``relu=True``), which applies it while the output is still in cache; the ReLU's
  pass over the activation disappears.
* ``BatchNorm2dGrad(ReLUGrad(dz, z), ...)``: the BatchNorm backward reads ``dz`` and masks
  it with ``z > 0`` itself; the ReLUGrad pass and its buffer disappear.
* ``ReLUGrad(MaxPool2dGrad(dy, z), z)``, a ReLU followed by a max pooling: the pooling's
  backward masks its result with ``z > 0`` at the winners it computes anyway; the ReLUGrad
  pass over the (4x larger) unpooled gradient disappears.

* Chains of elementwise ops (each with a scalar formula, ``op.formula``) become one
  :class:`~singa_graph.ops.fused.FusedElementwise` node: one kernel generated from the
  formulas, one pass, one output buffer (HardSwish, SiLU, GELU's erf form, LayerNorm's
  tail...). See :func:`fuse_elementwise`.

A rewrite applies only when the intermediate tensor has that one consumer and is not a graph
output, so nothing else can observe it. The fused kernels compute the same values in the
same order as the ops they replace (tests/passes/test_fuse.py compares whole training
steps bit for bit, tests/passes/test_fuse_elementwise.py fused chains).
"""
from __future__ import annotations

import copy
from collections import defaultdict

from ..ir.tensor import TensorSpec
from ..ops import formulas
from ..ops.fused import FusedElementwise

RELU_PRODUCERS = ("Conv2d", "BatchNorm2d")


def fuse(graph, elementwise: bool = True) -> int:
    """Apply the rewrites above to ``graph`` in place; returns the number of ops removed.
    Epilogues first (a ReLU after a convolution goes into the convolution, not a chain),
    then elementwise chains when ``elementwise``."""
    removed = _epilogues(graph)
    return removed + (fuse_elementwise(graph) if elementwise else 0)


def _epilogues(graph) -> int:
    """The producer/consumer rewrites. They are independent (the backward ones read the
    ReLU output ``z``, which the fused producer still writes), so one pass over the nodes
    does them all."""
    consumers = _consumers(graph, {id(n.inputs[0]) for n in graph.nodes if _match(n)})
    if not consumers:
        return 0
    outputs = {id(t) for t in graph.outputs}
    drop, replace = set(), {}
    for n in graph.nodes:
        # matched again as the graph stands now: a rewrite re-points its outputs' creator
        m = _match(n)
        if m is None:
            continue
        keep, gone, rewrite = m
        if keep.id not in replace and _sole_use(n.inputs[0], n, consumers, outputs):
            replace[keep.id] = rewrite()
            drop.add(gone.id)
    graph.nodes = [replace.get(n.id, n) for n in graph.nodes if n.id not in drop]
    return len(drop)


def _match(n):
    """When ``n`` reads the tensor a rewrite hides (always its input 0): ``(node replaced,
    node dropped, () -> the replacing node)``; else None."""
    if n.type == "ReLU":
        src = n.inputs[0].creator
        if (src is not None and src.type in RELU_PRODUCERS
                and not getattr(src.op, "relu", False)):
            return src, n, lambda: _with_relu(src, n)
    elif n.type == "BatchNorm2dGrad" and not n.op.relu:
        g = n.inputs[0].creator
        if g is not None and g.type == "ReLUGrad":
            return n, g, lambda: _masked_grad(n, g)
    elif n.type == "ReLUGrad":
        p = _pool_grad_of(n)
        if p is not None:
            return p, n, lambda: _masked_pool_grad(p, n)
    return None


def _pool_grad_of(relu_grad):
    """The MaxPool2dGrad making a ReLUGrad's ``dz`` from the same ReLU output ``z`` (the
    pooling's input), or None."""
    dz, z = relu_grad.inputs
    p = dz.creator
    if p is None or p.type != "MaxPool2dGrad" or p.op.relu or p.inputs[1] is not z:
        return None
    return p


def _consumers(graph, wanted: set[int]) -> dict[int, list]:
    """The nodes reading each tensor in ``wanted`` (not every tensor's: on a deep graph
    without convolutions or batch norms that map would be most of this pass)."""
    out: dict[int, list] = {k: [] for k in wanted}
    if wanted:
        for n in graph.nodes:
            for x in n.inputs:
                if id(x) in wanted:
                    out[id(x)].append(n)
    return out


def _sole_use(t, node, consumers, outputs) -> bool:
    users = consumers.get(id(t), [])
    return (id(t) not in outputs and len(users) == 1 and users[0] is node
            and sum(x is t for x in node.inputs) == 1)


def _adopt(node, op, inputs, outputs):
    """A node like ``node`` (same id, name and layer scope, so program order, hazards and
    pictures are kept) with another op, inputs and outputs; the outputs' ``creator`` is
    moved to it."""
    from ..ir.node import Node

    new = Node.__new__(Node)
    new.id, new.name, new.op, new.scope = node.id, node.name, op, node.scope
    new.inputs, new.outputs = list(inputs), list(outputs)
    for t in new.outputs:
        t.creator = new
    return new


def _with_relu(src, relu):
    op = copy.copy(src.op)
    op.relu = True
    return _adopt(src, op, src.inputs, [relu.outputs[0]] + list(src.outputs[1:]))


def _masked_grad(bn_grad, relu_grad):
    dz, z = relu_grad.inputs
    op = copy.copy(bn_grad.op)
    op.relu = True
    return _adopt(bn_grad, op, [dz] + list(bn_grad.inputs[1:]) + [z], bn_grad.outputs)


def _masked_pool_grad(pool_grad, relu_grad):
    op = copy.copy(pool_grad.op)
    op.relu = True
    return _adopt(pool_grad, op, pool_grad.inputs, relu_grad.outputs)


# ---------------------------------------------------------------------- elementwise chains
def _fusible(n) -> bool:
    name = formulas.formula_of(n.op)
    return (name is not None and name not in formulas.LIBRARY
            and name not in formulas.CPU_FLOAT32 and len(n.outputs) == 1
            and (len(n.inputs) == formulas.arity(name)
                 or (formulas.arity(name) == 2 and len(n.inputs) > 2)))


def fuse_elementwise(graph) -> int:
    """Fuse each maximal chain of elementwise ops into one node; returns the ops removed.

    An op joins the op that consumes its output when that consumer is elementwise too, is
    its only reader (or all its readers join one chain, :func:`_join_shared`), writes the
    same shape and dtype, and the output is no graph output:
    the intermediate is then computed per element inside one kernel and never stored. The
    chain's other operands (inputs from outside, scalars, broadcast parameters) are read
    with numpy broadcasting. Runs after autodiff, so gradients were built from the original
    ops, and backward nodes that read an intermediate keep it unfused."""
    nodes = graph.nodes
    users = defaultdict(list)
    for n in nodes:
        for x in n.inputs:
            users[id(x)].append(n)
    outputs = {id(t) for t in graph.outputs}
    into = {}  # node id -> the node id its output is fused into
    for n in nodes:
        if not _fusible(n):
            continue
        t = n.outputs[0]
        readers = {m.id: m for m in users.get(id(t), [])}
        if id(t) in outputs or len(readers) != 1:
            continue
        (c,) = readers.values()
        if _fusible(c) and c.outputs[0].shape == t.shape and c.outputs[0].dtype == t.dtype:
            into[n.id] = c.id
    _join_shared(nodes, users, outputs, into)
    if not into:
        return 0
    joined = set(into.values())
    groups = defaultdict(list)  # root id -> members in program order (the root last)
    for n in nodes:
        if n.id in into or n.id in joined:
            root = n.id
            while root in into:
                root = into[root]
            groups[root].append(n)
    replace, drop = {}, set()
    for root_id, members in groups.items():
        root = members[-1]
        replace[root_id] = _fused_node(root, members)
        drop.update(m.id for m in members[:-1])
    graph.nodes = [replace.get(n.id, n) for n in nodes if n.id not in drop]
    return len(drop)


def _join_shared(nodes, users, outputs, into) -> None:
    """Let an elementwise op whose output several ops read join their chain when all of
    them end up in the same one: the value is then computed once per element and used in
    registers (the input of an exported GELU, ``x * (erf(x / sqrt 2) + 1) / 2``, read
    twice, is the output of the bias Add before it, which stayed a step of its own:
    ConvNeXt's six unfused bias Adds took 0.23 of its 13 ms). Producers are visited after
    their readers, so a value shared inside a shared chain joins too."""
    def root(i):
        while i in into:
            i = into[i]
        return i

    for n in reversed(nodes):
        if n.id in into or not _fusible(n):
            continue
        t = n.outputs[0]
        readers = list({m.id: m for m in users.get(id(t), [])}.values())
        if id(t) in outputs or len(readers) < 2:
            continue
        if not all(_fusible(c) and c.outputs[0].shape == t.shape
                   and c.outputs[0].dtype == t.dtype for c in readers):
            continue
        roots = {root(c.id) for c in readers}
        if len(roots) == 1:
            into[n.id] = roots.pop()


def _fused_node(root, members):
    """One FusedElementwise node computing ``members`` (in program order, ``root`` last)."""
    inputs, ref, steps, values = [], {}, [], []
    for n in members:
        program, vals = formulas.program_of(n.op, len(n.inputs))
        base = len(steps)
        for name, refs in program:
            new = []
            for r in refs:
                if r < 0:
                    new.append(r - base)
                    continue
                t = n.inputs[r]
                if id(t) not in ref:
                    ref[id(t)] = len(inputs)
                    inputs.append(t)
                new.append(ref[id(t)])
            steps.append((name, tuple(new)))
        values.extend(vals)
        ref[id(n.outputs[0])] = -len(steps)
    out = root.outputs[0]
    inplace = next(({0: i} for i, t in enumerate(inputs)
                    if t.shape == out.shape and t.dtype == out.dtype), {})
    label = "+".join(m.type for m in members)
    op = FusedElementwise(steps, values, label, TensorSpec(out.shape, out.dtype), inplace)
    return _adopt(root, op, inputs, root.outputs)

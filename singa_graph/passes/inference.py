"""Inference-graph passes: fewer nodes and fewer passes over activations in plans that
only run a forward (no gradients, no updates). Each is a pure rewrite of ``graph``:

* :func:`drop_noops`: Identity nodes, Concats of one tensor, and Reshapes, Casts and
  Transposes that change nothing (same shape, same dtype, identity permutation), are
  removed and their readers read the input instead. Same values, bit for bit.
* :func:`fold_batchnorm`: an eval-mode BatchNorm2d reading a Conv2d (whose output nobody
  else reads) is folded into the convolution's weights and bias, computed once at compile
  time in float64 and rounded to the weights' dtype, into *new* constant tensors: the
  model's parameters are left as they are, so a later training step still sees them. The
  folded convolution computes ``conv(x, W*s) + (b - mean)*s + beta`` with ``s = gamma /
  sqrt(var + eps)``, where BatchNorm rounds ``(conv(x, W) + b - mean) * s * gamma + beta``
  step by step: not the same rounding. Documented bound (float32, tested in
  tests/passes/test_inference.py): ``|y_folded - y| <= 1e-4 * max|y| + 1e-5`` per output
  for convolutions of up to a few thousand terms. The fold is recorded in ``graph.folds``
  so that a plan can recompute it when the parameters change (:meth:`Fold.refresh`).
* :func:`fuse_conv_epilogues`: ``Conv2d`` (+ residual ``Add``) (+ ``ReLU`` | ``Max(x, 0)``
  [+ ``Min(., 6)``] | ``Mul(x, HardSigmoid(x))`` | ``Mul(x, Sigmoid(x))``) becomes one
  Conv2d with an epilogue (``residual``, ``act``) that its kernel applies to each finished
  output block: one node, one output buffer. Same operations in the same order and dtype as
  the unfused ops, so bit for bit the same values.

Every rewrite applies only where the tensors it hides have no other reader and are not
graph outputs, so nothing else can observe them.
"""
from __future__ import annotations

import copy

import numpy as np

from .. import host

__all__ = ["Derived", "Fold", "optimize_for_inference", "drop_noops", "fold_batchnorm",
           "fuse_conv_epilogues", "is_inference_graph"]

RESHAPES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def is_inference_graph(graph) -> bool:
    """True when ``graph`` only computes a forward: no node writes state (updates, running
    statistics) and none is a gradient op."""
    return not any(n.op.mutates or "Grad" in n.type for n in graph.nodes)


def optimize_for_inference(graph, device: str = "cpu", weight_copies: bool = True) -> dict:
    """Run the three passes in order on ``graph`` (in place), then on the CPU the
    channels-last layout of depthwise chains (:mod:`.layout`) and the direct convolutions
    and products (:mod:`.direct`); returns how many nodes each removed (the last two: how
    many they converted): ``{'noops': .., 'batchnorms': .., 'epilogue': .., 'channels_last': ..,
    'direct': ..}``.

    ``weight_copies=False``: the last two convert only the nodes whose weights they can
    read without a plan-owned copy in another layout (a folded BatchNorm's weight is
    held in it for free): the plan then holds no second copy of any weight, and the
    others run on the kernels that read the weights as they are (slower, see
    :mod:`.direct`)."""
    from .direct import direct_convs, direct_matmuls
    from .layout import channels_last

    done = {"noops": drop_noops(graph), "batchnorms": fold_batchnorm(graph),
            "epilogue": fuse_conv_epilogues(graph)}
    cpu = device == "cpu"
    done["channels_last"] = channels_last(graph, weight_copies) if cpu else 0
    done["direct"] = (direct_convs(graph, weight_copies) + direct_matmuls(graph, weight_copies)
                      if cpu else 0)
    return done


# ---------------------------------------------------------------------- helpers
class _Uses:
    """Readers of every tensor of a graph, and its outputs (which have an outside reader)."""

    def __init__(self, graph):
        self.readers: dict[int, list] = {}
        for n in graph.nodes:
            for x in n.inputs:
                self.readers.setdefault(id(x), []).append(n)
        self.outputs = {id(t) for t in graph.outputs}

    def only(self, t):
        """The one node reading ``t`` once, when nothing else (a graph output) sees ``t``."""
        r = self.readers.get(id(t), [])
        return r[0] if len(r) == 1 and id(t) not in self.outputs else None

    def exactly(self, t, nodes) -> bool:
        """``t`` is read by exactly ``nodes`` (each once) and is not a graph output."""
        r = self.readers.get(id(t), [])
        return (id(t) not in self.outputs and len(r) == len(nodes)
                and {id(n) for n in r} == {id(n) for n in nodes})


def _node_like(position, named, op, inputs, outputs):
    """A new node computing ``op`` that takes ``position``'s id (so ids still follow the
    node list's order) and ``named``'s name and layer scope; its outputs' ``creator`` is
    moved to it."""
    from ..ir.node import Node

    new = Node.__new__(Node)
    new.id, new.name, new.scope = position.id, named.name, named.scope
    new.op, new.inputs, new.outputs = op, list(inputs), list(outputs)
    for t in new.outputs:
        t.creator = new
    return new


def _is_leaf_with_data(t) -> bool:
    return t.creator is None and t.data is not None


def _is_constant(t, value) -> bool:
    """A 0-d or one-element constant leaf equal to ``value``."""
    if not _is_leaf_with_data(t) or t.size != 1 or t.stores_grad:
        return False
    return bool(np.asarray(t.host_data()).reshape(-1)[0] == value)


# ---------------------------------------------------------------------- no-ops
def _is_noop(n) -> bool:
    if len(n.inputs) != 1 or len(n.outputs) != 1:
        return False
    x, y = n.inputs[0], n.outputs[0]
    if n.type == "Identity":
        return True
    # a Concat of one tensor is a copy (densenet121's torch.cat([x]), 4 of them)
    if n.type in RESHAPES or n.type in ("Cast", "Concat"):
        return x.shape == y.shape and x.dtype == y.dtype
    if n.type == "Transpose":
        return tuple(n.op.perm) == tuple(range(len(x.shape)))
    return False


def drop_noops(graph) -> int:
    """Remove Identity nodes, one-tensor Concats and no-op Reshapes, Casts and Transposes;
    returns how many."""
    outputs = {id(t) for t in graph.outputs}
    source: dict[int, object] = {}  # id(dropped output) -> the tensor read instead
    kept = []
    for n in graph.nodes:
        if any(id(x) in source for x in n.inputs):
            n = _node_like(n, n, n.op, [source.get(id(x), x) for x in n.inputs], n.outputs)
        if _is_noop(n) and id(n.outputs[0]) not in outputs:
            source[id(n.outputs[0])] = n.inputs[0]
            continue
        kept.append(n)
    graph.nodes = kept
    return len(source)


# ---------------------------------------------------------------------- BatchNorm folding
class Derived:
    """Constants a pass computed from parameters (``sources``) when the plan was compiled,
    owned by the plan: :meth:`refresh` recomputes them in place (after training steps, a
    loaded checkpoint...), so the plan's bound views stay valid. Subclasses compute
    ``_compute() -> arrays``, one per tensor of ``outputs``."""

    def __init__(self, sources, names, device):
        from ..ir.tensor import Tensor

        self.sources = tuple(sources)
        self.outputs = [Tensor(data=host.aligned_copy(v), device=device, requires_grad=False,
                               name=name) for v, name in zip(self._compute(), names)]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.outputs)

    #: axes order in which output 0 is held (None: as computed), see :meth:`permute_first`
    perm = None
    #: size of the blocks its first axis is cut into first (None: not cut)
    block = None

    def _values(self):
        raise NotImplementedError

    def _compute(self):
        values = list(self._values())
        if self.perm is not None:
            v = values[0]
            if self.block is not None:
                short = -v.shape[0] % self.block  # the last block, filled up with zeros
                if short:
                    v = np.concatenate([v, np.zeros((short,) + v.shape[1:], v.dtype)])
                v = v.reshape(v.shape[0] // self.block, self.block, *v.shape[1:])
            # a view: the tensors made from it (:func:`host.aligned_copy`, on cache lines,
            # as the kernels load whole vectors of them) and :meth:`refresh` copy it once
            values[0] = np.transpose(v, self.perm)
        return values

    def permute_first(self, perm, block=None):
        """Hold output 0 with its axes permuted by ``perm`` from now on (a new tensor, for
        a layout pass whose kernel reads it so), instead of a second permuted copy;
        returns that tensor. With ``block``, its first axis is first cut into blocks of
        that size (one more axis, right after it; the last block filled up with zeros),
        and ``perm`` orders the axes so made."""
        from ..ir.tensor import Tensor

        old = self.outputs[0]
        self.perm, self.block = tuple(perm), block
        self.outputs[0] = Tensor(data=host.aligned_copy(self._compute()[0]), device=old.device,
                                 requires_grad=False, name=f"{old.name}.permuted")
        return self.outputs[0]

    def refresh(self) -> None:
        """Recompute the constants from the current parameters, in place (when: the
        plan's :meth:`~singa_graph.runtime.plan.ExecutionPlan.refresh_folded` decides, from
        the sources' ``Tensor.writes``)."""
        for t, v in zip(self.outputs, self._compute()):
            t.copy_from_numpy(v)


class Fold(Derived):
    """Folded weight and bias of a Conv2d that absorbed an eval-mode BatchNorm2d."""

    def __init__(self, conv_weight, conv_bias, scale, shift, mean, var, eps):
        self.eps = eps
        name = conv_weight.name
        super().__init__((conv_weight, conv_bias, scale, shift, mean, var),
                         (f"{name}.folded", f"{name}.folded_bias"), conv_weight.device)

    @property
    def weight(self):
        return self.outputs[0]

    @property
    def bias(self):
        return self.outputs[1]

    def _values(self):
        w, b, gamma, beta, mean, var = (None if t is None else
                                        np.asarray(t.host_data(), np.float64)
                                        for t in self.sources)
        s = gamma / np.sqrt(var + self.eps)
        dt = self.sources[0].dtype
        b = np.zeros_like(s) if b is None else b
        return ((w * s.reshape(-1, 1, 1, 1)).astype(dt),
                ((b - mean) * s + beta).astype(dt))


def fold_batchnorm(graph) -> int:
    """Fold eval-mode BatchNorm2d nodes into the Conv2d before them; returns how many.
    The folds are appended to ``graph.folds``."""
    uses = _Uses(graph)
    folds = graph.__dict__.setdefault("folds", [])
    drop, replace = set(), {}
    for n in graph.nodes:
        if n.type != "BatchNorm2d" or n.op.training or n.op.relu:
            continue
        x = n.inputs[0]
        c = x.creator
        if (c is None or c.type != "Conv2d" or c.op.fused or uses.only(x) is not n
                or c.id in replace):
            continue
        params = list(c.inputs[1:3]) + list(n.inputs[1:5])
        if not all(_is_leaf_with_data(t) and t.dtype == x.dtype for t in params):
            continue
        fold = Fold(c.inputs[1], c.inputs[2] if len(c.inputs) == 3 else None,
                    *n.inputs[1:5], n.op.eps)
        folds.append(fold)
        op = copy.copy(c.op)
        op.folded = "BatchNorm"
        replace[c.id] = _node_like(c, c, op, [c.inputs[0], fold.weight, fold.bias],
                                   [n.outputs[0]])
        drop.add(n.id)
    graph.nodes = [replace.get(n.id, n) for n in graph.nodes if n.id not in drop]
    return len(drop)


# ---------------------------------------------------------------------- conv epilogues
def _activation(t, uses):
    """The activation applied to ``t`` by the nodes reading it: ``(act, act_args, nodes
    removed, output tensor)`` or None."""
    u = uses.only(t)
    if u is not None and u.type == "ReLU":
        return "relu", None, [u], u.outputs[0]
    if u is not None and u.type == "Sigmoid":  # a squeeze-and-excitation gate
        return "sigmoid", None, [u], u.outputs[0]
    if u is not None and u.type == "HardSigmoid":
        return "hardsigmoid", (u.op.alpha, u.op.beta), [u], u.outputs[0]
    if (u is not None and u.type == "Max" and len(u.inputs) == 2 and u.inputs[0] is t
            and u.inputs[1].dtype == t.dtype and _is_constant(u.inputs[1], 0)):
        # np.maximum(t, 0) is the ReLU kernel; a following Min(., 6) makes a ReLU6
        m = uses.only(u.outputs[0])
        if (m is not None and m.type == "Min" and len(m.inputs) == 2
                and m.inputs[0] is u.outputs[0] and m.inputs[1].dtype == t.dtype
                and _is_constant(m.inputs[1], 6)):
            return "relu6", None, [u, m], m.outputs[0]
        return "relu", None, [u], u.outputs[0]
    readers = uses.readers.get(id(t), [])
    if len(readers) != 2:
        return None
    gate = next((r for r in readers if r.type in ("HardSigmoid", "Sigmoid")), None)
    mul = next((r for r in readers if r.type == "Mul"), None)
    if gate is None or mul is None or gate.inputs[0] is not t:
        return None
    g = gate.outputs[0]
    if not (uses.exactly(t, [gate, mul]) and uses.only(g) is mul
            and {id(x) for x in mul.inputs} == {id(t), id(g)}):
        return None
    if gate.type == "Sigmoid":
        return "silu", None, [gate, mul], mul.outputs[0]
    return "hardswish", (gate.op.alpha, gate.op.beta), [gate, mul], mul.outputs[0]


def _residual(t, uses):
    """``(Add node, the other addend)`` when ``t`` is only read by an Add of a tensor of
    its own shape and dtype (no broadcasting), else None."""
    u = uses.only(t)
    if u is None or u.type != "Add" or len(u.inputs) != 2:
        return None
    other = u.inputs[1] if u.inputs[0] is t else u.inputs[0]
    if other is t or other.shape != t.shape or other.dtype != t.dtype:
        return None
    return u, other


def fuse_conv_epilogues(graph) -> int:
    """Give each Conv2d the residual Add and activation that follow it as an epilogue;
    returns the number of nodes removed."""
    uses = _Uses(graph)
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    drop, replace = set(), {}
    for c in graph.nodes:
        if c.type != "Conv2d" or c.op.act or c.op.residual or c.id in drop:
            continue
        tail, gone, inputs = c.outputs[0], [], list(c.inputs)
        op = copy.copy(c.op)
        res = _residual(tail, uses)
        if res is not None:
            add, other = res
            op.residual = True
            inputs.append(other)
            gone.append(add)
            tail = add.outputs[0]
        act = _activation(tail, uses)
        if act is not None:
            op.act, args, nodes, tail = act
            if args is not None:
                op.act_args = tuple(float(a) for a in args)
            gone.extend(nodes)
        if not gone or any(n.id in drop or n.id in replace for n in gone):
            continue  # nothing to fuse, or an Add another convolution has taken already
        # the fused node takes the place of the chain's last node: every input (a residual
        # computed after the convolution included) is ready there
        last = max(gone, key=lambda n: pos[n.id])
        fused = _node_like(last, c, op, inputs, [tail])
        drop.add(c.id)
        drop.update(n.id for n in gone if n is not last)
        replace[last.id] = fused
    graph.nodes = [replace.get(n.id, n) for n in graph.nodes if n.id not in drop]
    return len(drop)

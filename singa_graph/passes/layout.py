"""Channels-last layout for the depthwise chains of CPU inference plans.

A mobile net (MobileNet, MnasNet, EfficientNet) is a chain of pointwise and depthwise
convolutions. In NCHW a depthwise conv on a small plane (8x8 down to 2x2, hundreds of
channels) has too few pixels per plane for a vector loop, so its CPU kernel transposes
its input to channels-innermost and its output back (depthwise_channels_last.py): most of
its time. :func:`channels_last` keeps such chains channels-last (NHWC) instead, as
onnxruntime keeps them channel-blocked:

* every depthwise and pointwise ``Conv2d`` of a chain becomes a ``Conv2dNHWC`` whose
  weight is held in ``(kh, kw, C/groups, O)`` order: a BatchNorm fold computes it so
  (:meth:`~.inference.Derived.permute_first`), any other weight gets a plan-owned copy
  (:class:`Permuted`, refreshed like the folds, counted in ``memory_report()``'s
  ``folded_bytes``). A depthwise conv then reads each tap as a run of channels in place,
  a pointwise conv is one ``(N*H*W x C) @ (C x O)`` product (over at most
  :data:`FEW_PIXELS` pixels it keeps the ``(O, C)`` weight for dot products instead);
* elementwise ops between them (activations, residual adds, squeeze-and-excitation gates:
  operands shaped like the activation, per-channel ``(N, C, 1, 1)`` or one value) run on
  the channels-last tensors as they are; global average pools become a mean over axes 1
  and 2;
* a ``Transpose`` enters the chain where an NCHW activation comes in and leaves it where
  an NCHW reader (or a graph output) needs one; a per-channel ``(N, C, 1, 1)`` tensor has
  the same bytes either way and passes as a ``Reshape`` (a view).

Stride-1 depthwise convs on large planes with few channels (:data:`PLANE_PIXELS`,
:data:`PLANE_MAX_CHANNELS`) stay NCHW on AVX-512 processors: the plane-by-plane kernel is
faster there, and where such a conv comes first (after a stem) the chain simply starts
behind it.

A chain is converted only when it holds both a depthwise and a pointwise conv, so the
transposes at its ends replace the ones its depthwise kernels would pay anyway. Pointwise
GEMMs block their sums another way than the NCHW kernel, so results match the NCHW plan
within float32 rounding (tests/passes/test_layout.py), not bit for bit. Only float32
chains convert (:func:`~singa_graph.ops._util.tiled`): a float64 plan keeps NCHW.
"""
from __future__ import annotations

import copy

from .. import host
from ..ir import node as _node
from ..ir.tensor import Tensor
from ..ops import formulas
from ..ops._util import tiled
from ..ops.conv import Conv2dNHWC, pointwise_nhwc
from ..ops.reduce import Mean
from ..ops.shape import Reshape, Transpose
from .inference import Derived, _node_like, _Uses

__all__ = ["Permuted", "PermutedWeights", "channels_last"]

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
HWIO = (2, 3, 1, 0)  # OIHW -> HWIO


class Permuted(Derived):
    """A plan-owned copy of ``source`` with its axes permuted by ``perm`` (its first axis
    cut into blocks of ``block`` first, see :meth:`Derived.permute_first`)."""

    def __init__(self, source, perm, block=None):
        self.perm, self.block = tuple(perm), block
        super().__init__((source,), (f"{source.name}.permuted",), source.device)

    @property
    def weight(self):
        return self.outputs[0]

    def _values(self):
        return (self.sources[0].host_data(),)


class PermutedWeights:
    """Weights held in another layout (``perm``, ``block``: see
    :meth:`Derived.permute_first`), made by calling it with the weight: a folded
    BatchNorm's weight (read by its conv alone) is held so from now on, for free; any
    other gets one plan-owned :class:`Permuted` copy, shared by the nodes that read it.
    With ``copy`` (a callable ``weight -> Permuted``), every weight gets the copy it makes,
    for layouts that are more than a permutation. :meth:`commit` records the copies in
    ``graph.folds``."""

    def __init__(self, graph, perm=None, block=None, copy=None):
        self.graph, self.block, self.copy = graph, block, copy
        self.perm = None if perm is None else tuple(perm)
        self.permuted: dict[int, Permuted] = {}
        self.folded = {} if copy is not None else {
            id(f.outputs[0]): f for f in getattr(graph, "folds", ()) if f.perm is None}

    def __call__(self, w):
        fold = self.folded.get(id(w))
        if fold is not None:
            return fold.permute_first(self.perm, self.block)
        if id(w) not in self.permuted:
            self.permuted[id(w)] = (self.copy(w) if self.copy is not None
                                    else Permuted(w, self.perm, self.block))
        return self.permuted[id(w)].weight

    def free(self, w) -> bool:
        """Whether ``w`` is held in the new layout at no cost (a folded BatchNorm's)."""
        return id(w) in self.folded

    def commit(self) -> None:
        self.graph.__dict__.setdefault("folds", []).extend(self.permuted.values())


# ---------------------------------------------------------------------- what can go NHWC
def _activation(t) -> bool:
    return len(t.shape) == 4 and tiled(t.dtype)


def _kind(n) -> str | None:
    """``'depthwise'``, ``'pointwise'``, ``'pool'`` or ``'elementwise'`` for a node that
    has a channels-last form, else None."""
    if not n.outputs or not _activation(n.outputs[0]) or len(n.outputs) != 1:
        return None
    y = n.outputs[0]
    if n.type == "Conv2d":
        x, w = n.inputs[0], n.inputs[1]
        if not (_activation(x) and w.creator is None and w.data is not None
                and Conv2dNHWC.supports(n.op, w.shape)):
            return None
        if pointwise_nhwc(n.op, w.shape):
            return "pointwise"
        return None if _planes_win(n.op, x.shape) else "depthwise"
    if n.type == "GlobalAveragePool" or (n.type == "Mean" and n.op.keepdims
                                         and tuple(n.op.axes or ()) == (2, 3)):
        return "pool" if _activation(n.inputs[0]) else None
    if formulas.formula_of(n.op) is None:
        return None
    per_channel = (y.shape[0], y.shape[1], 1, 1)
    for x in n.inputs:
        if x.dtype != y.dtype and x.size != 1:
            return None
        if not (x.shape == y.shape or x.size == 1
                or (len(x.shape) == 4 and x.shape in (per_channel, (1,) + per_channel[1:]))):
            return None
    return "elementwise"


#: stride-1 depthwise convs on planes of at least this many pixels with fewer channels
#: than this stay NCHW on processors with 64-byte vectors: the plane-by-plane kernel
#: vectorises along their long rows, where the channels-last one has a short vector of
#: channels per pixel and tap. Batch 2, two threads, Intel Xeon with AVX-512 (2026-11-27),
#: NCHW against NHWC: 16 channels at 32x32 15 against 46 us, 32 at 32x32 27 against 31, 24
#: at 16x16 8 against 17; 48 at 16x16 11 against 15 and 96 at 16x16 19 against 23 gain
#: less than the two transposes they would add inside a chain. With 32-byte vectors (AVX2)
#: the planes lost: on the AMD EPYC (Zen 3, 2026-11-28, the step alone, hot) 16 channels
#: at 32x32 40-45 us against 26-29 (mnasnet0_5), 32 at 32x32 76-78 against 42-46
#: (mobilenet_v2), the transpose the chain then starts with costing the same as the one it
#: saved; there every depthwise conv joins its chain.
PLANE_PIXELS, PLANE_MAX_CHANNELS = 256, 48


def _planes_win(op, x_shape) -> bool:
    return (op.stride == (1, 1) and x_shape[2] * x_shape[3] >= PLANE_PIXELS
            and x_shape[1] < PLANE_MAX_CHANNELS and host.vector_bytes() >= 64)


def _spatial(t) -> bool:
    """A 4-d tensor whose NCHW and NHWC bytes differ (more than one pixel)."""
    return len(t.shape) == 4 and t.shape[2] * t.shape[3] > 1


def _chains(graph, kinds, uses) -> set:
    """Ids of the nodes to convert: connected groups of convertible nodes (joined by the
    4-d tensors they pass each other) that hold a depthwise and a pointwise conv, and at
    least as many depthwise convs (each of which would transpose its operands in NCHW) as
    transposes at the group's ends (shufflenet's branches, one depthwise conv between two
    channel shuffles, ran 5% slower converted)."""
    parent = {i: i for i in kinds}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for n in graph.nodes:
        if n.id not in kinds:
            continue
        for x in n.inputs:
            c = x.creator
            if c is not None and c.id in kinds and len(x.shape) == 4:
                parent[find(c.id)] = find(n.id)
    members: dict[int, set] = {}
    depthwise: dict[int, int] = {}
    for i, k in kinds.items():
        members.setdefault(find(i), set()).add(k)
        depthwise[find(i)] = depthwise.get(find(i), 0) + (k == "depthwise")
    ends: dict[int, set] = {}  # group -> the spatial tensors crossing its boundary
    for n in graph.nodes:
        inside = n.id in kinds
        for x in n.inputs:
            c = x.creator
            if (not _spatial(x) or (c is None and x.data is not None)  # weights
                    or (c is not None and c.id in kinds) == inside):
                continue
            ends.setdefault(find(n.id if inside else c.id), set()).add(id(x))
        if inside:
            for t in n.outputs:
                if id(t) in uses.outputs and _spatial(t):
                    ends.setdefault(find(n.id), set()).add(id(t))
    return {i for i in kinds
            if {"depthwise", "pointwise"} <= members[find(i)]
            and depthwise[find(i)] >= len(ends.get(find(i), ()))}


#: pointwise convs over at most this many pixels (batch included) whose weight is not a
#: BatchNorm fold keep it as ``(O, C, 1, 1)`` rather than hold a copy: their kernel
#: multiplies its rows with the pixels (as the NCHW kernel does over few columns), where a
#: GEMM over so few rows ran 2-3x slower (mobilenet_v2 at 2x2, batch 2: 960 -> 320
#: channels 140 us against 41). A fold is held ``(C, O)`` for free, and the register tiles
#: (conv_channels_last.TILE_ROWS) beat the dot products on it: mnasnet0_5's 160 -> 1280 at 2x2
#: 25 -> 20 us, 96 -> 576 11 -> 8
FEW_PIXELS = 16


def _few_pixels(x_shape) -> bool:
    n, _, h, w = x_shape
    return n * h * w <= FEW_PIXELS


def _weight_as_is(n, kind, held) -> bool:
    """Whether conv ``n`` of ``kind`` reads its OIHW weight as it is in the channels-last
    chain: a pointwise conv over few pixels (its rows are the dot products' operand),
    unless its weight is a folded BatchNorm's, held in HWIO for free (``held.free``)."""
    return kind == "pointwise" and _few_pixels(n.inputs[0].shape) and \
        not held.free(n.inputs[1])


# ---------------------------------------------------------------------- rewriting
class _Rewriter:
    def __init__(self, graph, chosen, uses):
        self.graph, self.chosen, self.uses = graph, chosen, uses
        self.nodes = []
        self.nhwc: dict[int, Tensor] = {}  # id(NCHW tensor) -> its channels-last twin
        self.weight = PermutedWeights(graph, HWIO)

    def _add(self, op, inputs, like, name, outputs=None):
        """A new node computing ``op``: new output tensors unless ``outputs`` are given."""
        new = _node.Node.__new__(_node.Node)
        new.id, new.name, new.scope = next(_node._ids), name, like.scope
        new.op, new.inputs = op, list(inputs)
        if outputs is None:
            outputs = [Tensor.symbolic(s.shape, s.dtype, inputs[0].device, name=name)
                       for s in op.infer(*inputs)]
        new.outputs = list(outputs)
        for t in new.outputs:
            t.creator = new
        self.nodes.append(new)
        return new

    def entering(self, x, n):
        """``x`` channels-last, for node ``n``: its twin, or a Transpose (Reshape for a
        per-channel tensor, one value as it is) made now, once per tensor."""
        if id(x) in self.nhwc:
            return self.nhwc[id(x)]
        if len(x.shape) != 4:
            return x
        nn, c, h, w = x.shape
        op = Reshape((nn, 1, 1, c)) if h == w == 1 else Transpose(TO_NHWC)
        t = self._add(op, [x], n, f"{x.name}.nhwc").outputs[0]
        self.nhwc[id(x)] = t
        return t

    def leaving(self, t, t_nhwc, n):
        """Give the NCHW tensor ``t`` (read outside the chain, or a graph output) a creator
        that makes it from its twin."""
        outside = [r for r in self.uses.readers.get(id(t), []) if r.id not in self.chosen]
        if not outside and id(t) not in self.uses.outputs:
            return
        nn, h, w, c = t_nhwc.shape
        op = Reshape(t.shape) if h == w == 1 else Transpose(TO_NCHW)
        self._add(op, [t_nhwc], n, f"{t.name}.nchw", outputs=[t])

    def convert(self, n, kind):
        conv = kind in ("depthwise", "pointwise")
        ins = [x if conv and i == 1 else self.entering(x, n) for i, x in enumerate(n.inputs)]
        if conv:
            op = Conv2dNHWC.__new__(Conv2dNHWC)
            op.__dict__.update(n.op.__dict__)
            if _weight_as_is(n, kind, self.weight):
                op.weight_layout = "OIHW"
            else:
                ins[1] = self.weight(n.inputs[1])
        elif kind == "pool":
            op = Mean((1, 2), True)
        else:
            op = copy.copy(n.op)
        (t,) = n.outputs
        spec = op.infer(*ins)[0]
        t_nhwc = Tensor.symbolic(spec.shape, spec.dtype, t.device, name=f"{t.name}.nhwc")
        self.nodes.append(_node_like(n, n, op, ins, [t_nhwc]))
        t.creator = None
        self.nhwc[id(t)] = t_nhwc
        self.leaving(t, t_nhwc, n)

    def run(self, kinds):
        for n in self.graph.nodes:
            if n.id in self.chosen:
                self.convert(n, kinds[n.id])
            else:
                self.nodes.append(n)
        self.graph.nodes = self.nodes
        self.weight.commit()


def channels_last(graph, weight_copies: bool = True) -> int:
    """Convert the depthwise chains of the inference graph ``graph`` (in place) to
    channels-last; returns how many nodes now run channels-last. Without
    ``weight_copies``, only convs whose weight needs no plan-owned HWIO copy join a chain
    (a folded BatchNorm's, or a pointwise conv's over few pixels, read as it is)."""
    kinds = {n.id: k for n in graph.nodes if (k := _kind(n)) is not None}
    if not weight_copies:
        held = PermutedWeights(graph, HWIO)
        for n in graph.nodes:
            k = kinds.get(n.id)
            if k in ("depthwise", "pointwise") and not (held.free(n.inputs[1])
                                                       or _weight_as_is(n, k, held)):
                del kinds[n.id]
    uses = _Uses(graph)
    chosen = _chains(graph, kinds, uses)
    if chosen:
        _Rewriter(graph, chosen, uses).run(kinds)
    return len(chosen)

"""Channels-last layout for the conv chains of CPU inference plans.

A mobile net (MobileNet, MnasNet, EfficientNet) is a chain of pointwise and depthwise
convolutions. In NCHW a depthwise conv on a small plane (8x8 down to 2x2, hundreds of
channels) has too few pixels per plane for a vector loop, so its CPU kernel transposes
its input to channels-innermost and its output back (depthwise_channels_last.py): most of
its time. :func:`channels_last` keeps such chains channels-last (NHWC) instead, as
onnxruntime keeps them channel-blocked:

* every depthwise and pointwise ``Conv2d`` of a chain becomes a ``Conv2dNHWC`` whose
  weight is held in ``(kh, kw, C/groups, O)`` order: a BatchNorm fold computes it so
  (:meth:`~.inference.Derived.permute_first`), any other weight gets a plan-owned copy
  (:class:`~.held_weights.Permuted`, refreshed like the folds, counted in
  ``memory_report()``'s ``folded_bytes``). A depthwise conv then reads each tap as a run
  of channels in place, a pointwise conv is one ``(N*H*W x C) @ (C x O)`` product (over
  at most :data:`FEW_PIXELS` pixels it keeps the ``(O, C)`` weight for dot products);
* every other conv that the register tiles can run (ResNet's, RegNet's grouped ones,
  GoogLeNet's and SqueezeNet's 3x3 convs; an image's stem only where it has Conv2dDirect's
  tiles, :func:`~singa_graph.ops.conv_tiles.stem_on_tiles`: ResNet's 7x7) becomes a
  ``Conv2dDirectNHWC`` on Conv2dDirect's blocked weight
  (:class:`~.held_weights.BlockedWeights`), as do pointwise convs that stream a large
  weight over few pixels (:data:`~.held_weights.STREAM_ROWS`): the tiles store their sums
  in place, where the NCHW kernel transposes them into planes;
* max pools become ``MaxPool2dNHWC`` (but one whose input comes from outside the chain:
  the chain then starts after it, on the smaller tensor), and Concats of channels join
  along the last axis;
* elementwise ops between them (activations, residual adds, squeeze-and-excitation gates:
  operands shaped like the activation, per-channel ``(N, C, 1, 1)`` or one value) run on
  the channels-last tensors as they are; global average pools, and means over the planes
  (MnasNet's), become a mean over axes 1 and 2;
* a ``Transpose`` enters the chain where an NCHW activation comes in and leaves it where
  an NCHW reader (or a graph output) needs one; a per-channel ``(N, C, 1, 1)`` tensor has
  the same bytes either way and passes as a ``Reshape`` (a view), as does a ``(C, 1, 1)``
  operand (a layer scale), as ``(C,)``;
* the graph's own permutes at a chain's edges go: where a chain tensor is permuted to
  channels-last, the permute's output becomes the chain's tensor, and where a permute back
  to NCHW feeds the chain, the chain reads the permute's input. ConvNeXt does its blocks'
  LayerNorms and MLPs channels-last between two such permutes, and converted it keeps
  its whole trunk channels-last: convnext_tiny, batch 2 at 64x64, two threads, both plans
  in one process, alternating bursts (Intel Xeon, 2026-12-02): 46 Transposes -> 2, 16.25
  -> 15.71 ms (the 7x7 depthwise convs at 16x16 71-81 -> 60-66 us), the same bits.

The rules of what converts live in layout_kinds.py. Stride-1 depthwise convs on large
planes with few channels (:data:`~.layout_kinds.PLANE_PIXELS`,
:data:`~.layout_kinds.PLANE_MAX_CHANNELS`) stay NCHW on AVX-512 processors: the
plane-by-plane kernel is faster there, and where such a conv comes first (after a stem)
the chain simply starts behind it. So do pointwise convs on large planes with few input
and output channels (:data:`~.layout_kinds.NARROW_PIXELS`,
:data:`~.layout_kinds.NARROW_TERMS`).

A chain is converted only when it holds a dense conv, or both a depthwise and a
pointwise conv, and at least as many depthwise and dense convs as transposes at its ends:
those replace the ones its convs would pay anyway. Paired bursts against the NCHW plan
(this module without dense convs), batch 2 at 64x64, 2-vCPU AMD EPYC: resnet18 1.15-1.19x
faster, regnet_y_400mf 1.02-1.03x, squeezenet1_1, googlenet, densenet121 and mobilenet_v2
0.99-1.03x (this host's noise). Pointwise GEMMs block their sums another way than the
NCHW kernel, so results match the NCHW plan within float32 rounding
(tests/passes/test_layout.py), not bit for bit; the dense tiles and max pools give the NCHW
kernels' values bit for bit (tests/passes/test_layout_dense.py). Only float32 chains
convert (:func:`~singa_graph.ops._util.tiled`): a float64 plan keeps NCHW.
"""
from __future__ import annotations

import copy

from ..ir import node as _node
from ..ir.tensor import Tensor
from ..ops.conv_tiles import Conv2dDirectNHWC, Conv2dNHWC
from ..ops.pool import MaxPool2dNHWC
from ..ops.reduce import Mean
from ..ops.shape import Reshape, Transpose
from .held_weights import BlockedWeights, PermutedWeights
from .inference import _node_like, _Uses
from .layout_kinds import (TO_NCHW, TO_NHWC, _cancelled_entry, _cancelled_exit, _kind,
                           _pixels, _spatial, _transpose)

__all__ = ["channels_last"]

HWIO = (2, 3, 1, 0)  # OIHW -> HWIO


def _chains(graph, kinds, uses) -> set:
    """Ids of the nodes to convert: connected groups of convertible nodes (joined by the
    4-d tensors they pass each other) that hold a depthwise and a pointwise conv (or a
    dense one, or a depthwise one and a permute of the graph's own at an end), and at
    least as many depthwise convs (each of which would transpose its operands in NCHW) and
    such permutes (which the group removes) as transposes at the group's ends
    (shufflenet's branches, one depthwise conv between two channel shuffles, ran 5% slower
    converted)."""
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
    transposing: dict[int, int] = {}  # convs that transpose their operands in NCHW
    for i, k in kinds.items():
        members.setdefault(find(i), set()).add(k)
        transposing[find(i)] = transposing.get(find(i), 0) + (k in ("depthwise", "dense"))
    ends: dict[int, set] = {}  # group -> the spatial tensors crossing its boundary
    # group -> the graph's own Transposes at its boundary, which the chain removes
    cancelled: dict[int, set] = {}
    for n in graph.nodes:
        inside = n.id in kinds
        for x in n.inputs:
            c = x.creator
            if (not _spatial(x) or (c is None and x.data is not None)  # weights
                    or (c is not None and c.id in kinds) == inside):
                continue
            group = find(n.id if inside else c.id)
            if (_cancelled_entry(x) if inside else _transpose(n, TO_NHWC)):
                cancelled.setdefault(group, set()).add(id(x))
            else:
                ends.setdefault(group, set()).add(id(x))
        if inside:
            for t in n.outputs:
                if id(t) in uses.outputs and _spatial(t):
                    ends.setdefault(find(n.id), set()).add(id(t))

    def worth(g) -> bool:
        gone = len(cancelled.get(g, ()))
        return (({"depthwise", "pointwise"} <= members[g] or "dense" in members[g]
                 or (gone and "depthwise" in members[g]))
                and transposing[g] + gone >= len(ends.get(g, ())))
    return {i for i in kinds if worth(find(i))}


#: pointwise convs over at most this many pixels (batch included) whose weight is not a
#: BatchNorm fold and that do not widen their channels keep it as ``(O, C, 1, 1)`` rather
#: than hold a copy: their kernel multiplies its rows with the pixels (as the NCHW kernel
#: does over few columns), where a GEMM over so few rows ran 2-3x slower (mobilenet_v2 at
#: 2x2, batch 2: 960 -> 320 channels 140 us against 41). A fold is held ``(C, O)`` for
#: free, and the register tiles (conv_channels_last.TILE_ROWS) beat the dot products on
#: it: mnasnet0_5's 160 -> 1280 at 2x2 25 -> 20 us, 96 -> 576 11 -> 8. A widening conv
#: holds a ``(C, O)`` copy for the tiles: its dot products are shorter than its outputs are
#: many, and each output's sum ends in a reduction across a vector that costs as much as
#: the products; the tiles have none. One thread, AMD EPYC (AVX2), 2026-11-29, dots
#: against tiles: 2 x 144 -> 576 20.6 against 11.2 us, narrowing 2 x 576 -> 144 6.1 /
#: 10.7. Two threads, AMD EPYC with AVX-512, the same day, widening over 4 to 16 pixels
#: (the last stages of ONNX-exported mobile nets, whose weights come with their BatchNorms
#: folded, so no fold holds them for free): 8 x 96 -> 576 10.6 against 8.2 us, 8 x 160 ->
#: 1280 26.2 / 20.8, 16 x 160 -> 1280 59.7 / 34.7, 8 x 320 -> 1280 66.0 / 37.4; narrowing
#: ones even (8 x 576 -> 96 8.1 / 7.5)
FEW_PIXELS = 16


def _weight_as_is(n, kind, held) -> bool:
    """Whether conv ``n`` of ``kind`` reads its OIHW weight as it is in the channels-last
    chain: a pointwise conv over few pixels (its rows are the dot products' operand),
    unless its weight is a folded BatchNorm's, held in HWIO for free (``held.free``), or it
    widens its channels (:data:`FEW_PIXELS`)."""
    pixels, w = _pixels(n.inputs[0].shape), n.inputs[1]
    if kind != "pointwise" or pixels > FEW_PIXELS or held.free(w):
        return False
    return w.shape[1] >= w.shape[0]


# ---------------------------------------------------------------------- rewriting
class _Rewriter:
    def __init__(self, graph, chosen, uses):
        self.graph, self.chosen, self.uses = graph, chosen, uses
        self.nodes = []
        self.nhwc: dict[int, Tensor] = {}  # id(NCHW tensor) -> its channels-last twin
        self.weight = PermutedWeights(graph, HWIO)
        self.blocked = BlockedWeights(graph)
        self.dropped: set[int] = set()  # ids of the graph's Transposes the chains replace

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
        if _cancelled_entry(x):  # x = Transpose(TO_NCHW)(y): y is its twin
            self.nhwc[id(x)] = x.creator.inputs[0]
            return self.nhwc[id(x)]
        if len(x.shape) == 3:  # a per-channel (C, 1, 1) operand (_per_channel)
            t = self._add(Reshape((x.shape[0],)), [x], n, f"{x.name}.nhwc").outputs[0]
            self.nhwc[id(x)] = t
            return t
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
        outside = [r for r in self.uses.readers.get(id(t), [])
                   if r.id not in self.chosen and r.id not in self.dropped]
        if not outside and id(t) not in self.uses.outputs:
            return
        nn, h, w, c = t_nhwc.shape
        op = Reshape(t.shape) if h == w == 1 else Transpose(TO_NCHW)
        self._add(op, [t_nhwc], n, f"{t.name}.nchw", outputs=[t])

    def convert(self, n, kind):
        if kind == "mean":  # its (N, C) output is the same in both layouts: no twin
            ins = [self.entering(n.inputs[0], n)]
            self.nodes.append(_node_like(n, n, Mean((1, 2), False), ins, n.outputs))
            return
        conv = kind in ("depthwise", "pointwise", "dense")
        ins = [x if conv and i == 1 else self.entering(x, n) for i, x in enumerate(n.inputs)]
        if kind == "dense":
            w = n.inputs[1]
            op = Conv2dDirectNHWC.of(n.op, w.shape[0])
            ins[1] = self.blocked(w, n.op.groups)
        elif conv:
            op = Conv2dNHWC.__new__(Conv2dNHWC)
            op.__dict__.update(n.op.__dict__)
            if _weight_as_is(n, kind, self.weight):
                op.weight_layout = "OIHW"
            else:
                ins[1] = self.weight(n.inputs[1])
        elif kind == "pool":
            op = Mean((1, 2), True)
        elif kind == "maxpool":
            op = MaxPool2dNHWC.__new__(MaxPool2dNHWC)
            op.__dict__.update(n.op.__dict__)
        else:
            op = copy.copy(n.op)
            if kind == "concat":
                op.axis = 3
        (t,) = n.outputs
        spec = op.infer(*ins)[0]
        exit_ = _cancelled_exit(t, self.uses)
        if exit_ is not None and exit_.outputs[0].shape == spec.shape:
            # the graph's Transpose to channels-last of t: its output is t's twin
            t_nhwc = exit_.outputs[0]
            self.dropped.add(exit_.id)
        else:
            t_nhwc = Tensor.symbolic(spec.shape, spec.dtype, t.device, name=f"{t.name}.nhwc")
        self.nodes.append(_node_like(n, n, op, ins, [t_nhwc]))
        t.creator = None
        self.nhwc[id(t)] = t_nhwc
        self.leaving(t, t_nhwc, n)

    def run(self, kinds):
        for n in self.graph.nodes:
            if n.id in self.chosen:
                self.convert(n, kinds[n.id])
            elif n.id not in self.dropped:
                self.nodes.append(n)
        self.nodes = _without_unread_transposes(self.nodes, self.uses.outputs)
        self.graph.nodes = self.nodes
        self.weight.commit()
        self.blocked.commit()


def _without_unread_transposes(nodes, outputs) -> list:
    """``nodes`` without the Transposes out of channels-last whose output nothing reads any
    more (the chains read their inputs instead, :func:`_cancelled_entry`)."""
    read = {id(x) for n in nodes for x in n.inputs} | outputs
    return [n for n in nodes if not (_transpose(n, TO_NCHW) and id(n.outputs[0]) not in read)]


def channels_last(graph, weight_copies: bool = True) -> int:
    """Convert the conv chains of the inference graph ``graph`` (in place) to
    channels-last; returns how many nodes now run channels-last. Without
    ``weight_copies``, only convs whose weight needs no plan-owned copy in another layout
    join a chain (a folded BatchNorm's, or a pointwise conv's over few pixels, read as it
    is)."""
    kinds = {n.id: k for n in graph.nodes if (k := _kind(n)) is not None}
    if not weight_copies:
        held, blocked = PermutedWeights(graph, HWIO), BlockedWeights(graph)
        for n in graph.nodes:
            k = kinds.get(n.id)
            if k in ("depthwise", "pointwise") and not (held.free(n.inputs[1])
                                                       or _weight_as_is(n, k, held)):
                del kinds[n.id]
            elif k == "dense" and not blocked.free(n.inputs[1], n.op.groups):
                del kinds[n.id]
    for n in graph.nodes:
        # a max pool whose input comes from outside stays NCHW, so that the chain's
        # Transpose moves its smaller output: resnet18's after its stem, 64 channels,
        # Transpose at 32x32 85 us + channels-last pool 40, against NCHW pool 62 +
        # Transpose at 16x16 12; squeezenet1_1's even (29 + 19 against 41 + 6; AMD EPYC,
        # 2026-11-29, with the pools' windows in registers)
        if kinds.get(n.id) != "maxpool":
            continue
        c = n.inputs[0].creator
        if c is None or c.id not in kinds:
            del kinds[n.id]
    uses = _Uses(graph)
    chosen = _chains(graph, kinds, uses)
    if chosen:
        _Rewriter(graph, chosen, uses).run(kinds)
    return len(chosen)

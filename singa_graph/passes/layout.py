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
  the same bytes either way and passes as a ``Reshape`` (a view).

Stride-1 depthwise convs on large planes with few channels (:data:`PLANE_PIXELS`,
:data:`PLANE_MAX_CHANNELS`) stay NCHW on AVX-512 processors: the plane-by-plane kernel is
faster there, and where such a conv comes first (after a stem) the chain simply starts
behind it. So do pointwise convs on large planes with few input and output channels
(:data:`NARROW_PIXELS`, :data:`NARROW_TERMS`).

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

import numpy as np

from .. import host
from ..ir import node as _node
from ..ir.tensor import Tensor
from ..ops import formulas
from ..ops._util import tiled
from ..ops.conv_tiles import (DIRECT_MAX_PIXELS, DIRECT_MIN_TERMS, PLANES_MAX_CHANNELS,
                              Conv2dDirect, Conv2dDirectNHWC, Conv2dNHWC, on_planes,
                              pointwise_nhwc, stem_on_tiles)
from ..ops.pool import MaxPool2dNHWC
from ..ops.reduce import Mean
from ..ops.shape import Reshape, Transpose
from .held_weights import STREAM_ROWS, STREAM_WEIGHT_BYTES, BlockedWeights, PermutedWeights
from .inference import _node_like, _Uses

__all__ = ["channels_last"]

TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
HWIO = (2, 3, 1, 0)  # OIHW -> HWIO


# ---------------------------------------------------------------------- what can go NHWC
def _activation(t) -> bool:
    return len(t.shape) == 4 and tiled(t.dtype)


def _kind(n) -> str | None:
    """``'depthwise'``, ``'pointwise'``, ``'dense'`` (a conv), ``'pool'`` (global average),
    ``'maxpool'``, ``'concat'`` or ``'elementwise'`` for a node that has a channels-last
    form, else None."""
    if _spatial_mean(n):
        return "mean"
    if not n.outputs or not _activation(n.outputs[0]) or len(n.outputs) != 1:
        return None
    y = n.outputs[0]
    if n.type == "Conv2d":
        x, w = n.inputs[0], n.inputs[1]
        if not (_activation(x) and w.creator is None and w.data is not None):
            return None
        if not Conv2dNHWC.supports(n.op, w.shape):
            return "dense" if _dense(n.op, w.shape, y.shape) else None
        if pointwise_nhwc(n.op, w.shape):
            streamed = (x.shape[0] * x.shape[2] * x.shape[3] <= STREAM_ROWS
                        and w.nbytes >= STREAM_WEIGHT_BYTES)
            if streamed:
                return "dense"
            return None if _narrow_on_planes(x.shape, w.shape) else "pointwise"
        return None if _planes_win(n.op, x.shape) else "depthwise"
    if n.type == "GlobalAveragePool" or (n.type == "Mean" and n.op.keepdims
                                         and tuple(n.op.axes or ()) == (2, 3)):
        return "pool" if _activation(n.inputs[0]) else None
    if n.type == "MaxPool2d":
        return "maxpool" if _activation(n.inputs[0]) else None
    if n.type == "Concat":
        return "concat" if n.op.axis == 1 and all(map(_activation, n.inputs)) else None
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


def _spatial_mean(n) -> bool:
    """A mean over the planes that keeps no axes for them (MnasNet's ``x.mean([2, 3])``):
    its ``(N, C)`` result has the same bytes in either layout, so in a chain it reads the
    channels-last tensor as a mean over axes 1 and 2, and the chain pays no transpose at
    its end. mnasnet0_5's, over 1280 channels at 2x2, batch 2 (AMD EPYC, 2026-11-29):
    Transpose 3-5 us and NCHW mean 5 us, against about 1 us."""
    if n.type != "Mean" or n.op.keepdims or len(n.inputs) != 1 or len(n.outputs) != 1:
        return False
    x = n.inputs[0]
    return _activation(x) and tuple(sorted(a % 4 for a in (n.op.axes or ()))) == (2, 3)


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


#: pointwise convs over at least this many pixels (batch included) with at most
#: NARROW_TERMS input times output channels stay NCHW on processors with 64-byte vectors,
#: and a chain starts behind them. Channels-last, such a conv gives each pixel a part of one
#: vector of outputs and a handful of terms, so the register tiles spend their time
#: starting and storing tiles; in NCHW its pixels fill the vectors. mnasnet0_5's first
#: pointwise convs, batch 2 at 32x32, AMD EPYC with AVX-512 (2026-11-29), one thread: 16 ->
#: 8 27.8 against 9.8 us, 8 -> 24 32.1 / 19.4, the transpose into the chain then on 24
#: channels 11.6 against 5.4 on 16 (65 -> 41 us in all; two threads 38 -> 31). 32 -> 16
#: (mobilenet_v2, 512 terms) was even, so it joins its chain.
NARROW_PIXELS, NARROW_TERMS = 1024, 256


def _narrow_on_planes(x_shape, w_shape) -> bool:
    return (_pixels(x_shape) >= NARROW_PIXELS and w_shape[0] * w_shape[1] <= NARROW_TERMS
            and host.vector_bytes() >= 64)


def _dense(op, w_shape, y_shape) -> bool:
    """Whether a conv that is neither pointwise nor depthwise runs channels-last, on the
    register tiles (Conv2dDirectNHWC): the convs that Conv2dDirect can take but an image's
    stem (which keeps its own tiles, conv_planes.py, or, with too few terms for any tile,
    the im2col GEMM: squeezenet1_1's 3 -> 64 3x3 stride 2 stem took 247 us on the
    channels-last tiles against 150 as a GEMM), over planes up to its limit. A stem that
    runs on Conv2dDirect's tiles anyway (a 7x7 one, ``stem_on_tiles``) joins the chain:
    the chain then transposes the 3-channel image rather than the pool's 64 channels, the
    pool after the stem runs channels-last, and the tiles take a kernel row's taps and
    channels as one run (conv_direct_last.py). resnet18, batch 2, two threads, both plans
    in one process (2026-12-02, Intel Xeon): stem, pool and transpose 347 -> 311 and 303
    -> 268 us. Unlike
    the NCHW pass (direct.py) it also takes convs of few terms (ResNet's strided 1x1
    shortcuts): their only other kernel would cost two transposes in the chain."""
    o, c, kh, kw = w_shape
    return (Conv2dDirect.supports(op, w_shape, np.float32)
            and (not on_planes(op, w_shape) or stem_on_tiles(op, w_shape, y_shape))
            and y_shape[2] * y_shape[3] <= DIRECT_MAX_PIXELS
            and not (c <= PLANES_MAX_CHANNELS and c * kh * kw < DIRECT_MIN_TERMS))


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
    transposing: dict[int, int] = {}  # convs that transpose their operands in NCHW
    for i, k in kinds.items():
        members.setdefault(find(i), set()).add(k)
        transposing[find(i)] = transposing.get(find(i), 0) + (k in ("depthwise", "dense"))
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
            if ({"depthwise", "pointwise"} <= members[find(i)] or "dense" in members[find(i)])
            and transposing[find(i)] >= len(ends.get(find(i), ()))}


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


def _pixels(x_shape) -> int:
    n, _, h, w = x_shape
    return n * h * w


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
        self.blocked.commit()


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

"""Weights that inference plans hold in another layout than their parameters': the
copies are plan-owned derived tensors (:class:`~.inference.Derived`), refreshed when the
parameters change and counted in ``memory_report()``'s ``folded_bytes``; a folded
BatchNorm's weight is computed in the new layout for free. Used by the channels-last pass
(layout.py) and the direct convs and products (direct.py)."""
from __future__ import annotations

import numpy as np

from ..ops.conv_tiles import Conv2dDirect
from .inference import Derived

__all__ = ["BLOCKED", "STREAM_ROWS", "STREAM_WEIGHT_BYTES", "BlockedWeights", "Permuted",
           "PermutedWeights", "Spread"]

#: OIHW cut into blocks of output channels, (O/B, B, C, kh, kw) -> (O/B, kh, kw, C, B)
BLOCKED = (0, 3, 4, 2, 1)
#: a product over at most this many rows by a weight of at least this many bytes streams
#: the weight from memory, and reads it from a plan-owned copy in blocks of output
#: columns (MatMulDirect's, direct.py; a pointwise conv in a chain runs as a dense one on
#: Conv2dDirect's blocks): in place, ``(K, N)``, each tile read 128 bytes from every row,
#: a new page each, and ConvNeXt's last stage (8 rows by 768 x 3072, 9.4 MB) took 1.2 ms
#: in the model; squeezenet1_1's 512 -> 1000 classifier conv at 3x3, batch 2: 316 us on
#: the ``(C, O)`` weight in place, 218 on the blocks
STREAM_ROWS, STREAM_WEIGHT_BYTES = 64, 1 << 20


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


class Spread(Permuted):
    """A plan-owned copy of a grouped conv's OIHW weight in Conv2dDirect's layout: each
    output channel's weights spread over the input channels its block reads
    (:meth:`Conv2dDirect.spread_groups`), then cut into blocks and permuted."""

    def __init__(self, source, groups):
        self.groups = groups
        super().__init__(source, BLOCKED, Conv2dDirect.block(source.dtype))

    def _values(self):
        return (Conv2dDirect.spread_groups(self.sources[0].host_data(), self.groups),)


class BlockedWeights:
    """Conv weights in Conv2dDirect's blocked layout (read by Conv2dDirect and
    Conv2dDirectNHWC): ``self(w, groups)`` is ``w``'s, a :class:`PermutedWeights` per dtype
    (or a :class:`Spread` copy per weight of a grouped conv)."""

    def __init__(self, graph):
        self.graph, self.made = graph, {}

    def _of(self, w, groups) -> PermutedWeights:
        key = ("groups", groups) if groups > 1 else np.dtype(w.dtype)
        if key not in self.made:
            self.made[key] = (
                PermutedWeights(self.graph, copy=lambda w, g=groups: Spread(w, g))
                if groups > 1 else PermutedWeights(self.graph, BLOCKED,
                                                   Conv2dDirect.block(w.dtype)))
        return self.made[key]

    def __call__(self, w, groups):
        return self._of(w, groups)(w)

    def free(self, w, groups) -> bool:
        return self._of(w, groups).free(w)

    def commit(self) -> None:
        for made in self.made.values():
            made.commit()

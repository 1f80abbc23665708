"""Buffers and their lifetimes under an execution order.

Tensors that share bytes form a *storage group*: an alias output (reshape) joins its input's
group, and an in-place output joins the group of the input it overwrites. A group is
*persistent* when it holds a leaf (graph input, parameter, constant, optimizer state), a graph
output or a tensor some node mutates; persistent groups live outside the arena. Every other
group lives from the step of its first write to the step of its last read, inclusive.
"""
from __future__ import annotations


class StorageGroups:
    """Union-find over the graph's tensors, plus the in-place merges decided for an order.

    Args:
        graph: the Graph.
        order: the execution order; needed only when ``inplace`` is True.
        inplace: merge an elementwise op's output into the input it may overwrite when that
            input's group dies at the op (same byte size, neither group persistent).
    """

    def __init__(self, graph, order=None, inplace: bool = False, base=None):
        self.graph = graph
        self.inplace_pairs: list[tuple] = []  # (node, output tensor, input tensor)
        if base is not None:  # the order-independent part, computed once for many orders
            assert base.graph is graph and not base.inplace_pairs
            self.tensors, self._writer = base.tensors, base._writer
            self._parent = dict(base._parent)
            self._persistent = base._persistent
        else:
            self._init_base(graph)
        if inplace and order is not None:
            self._merge_inplace(order)

    def _init_base(self, graph) -> None:
        self.tensors = {id(t): t for t in graph.tensors()}
        self._parent = {k: k for k in self.tensors}
        self._writer = {id(o): n for n in graph.nodes for o in n.outputs}
        persist = {id(t) for t in graph.leaves()} | {id(t) for t in graph.outputs}
        for n in graph.nodes:
            for k in n.op.mutates:
                persist.add(id(n.inputs[k]))
            for o, i in n.op.alias.items():
                self._union(id(n.inputs[i]), id(n.outputs[o]))
        for k in self._parent:  # flatten, so later look-ups take one step
            self._parent[k] = self._find(k)
        self._persistent = frozenset(self._find(k) for k in persist)

    # union-find ---------------------------------------------------------------------------
    def _find(self, k):
        while self._parent[k] != k:
            self._parent[k] = self._parent[self._parent[k]]
            k = self._parent[k]
        return k

    def _union(self, keep, other):
        a, b = self._find(keep), self._find(other)
        if a != b:
            self._parent[b] = a

    # queries ------------------------------------------------------------------------------
    def root(self, t) -> int:
        return self._find(id(t))

    def persistent(self, g) -> bool:
        return g in self._persistent

    def size(self, g) -> int:
        return self.tensors[g].nbytes

    def first_writer(self, g):
        return self._writer.get(g)

    def groups(self) -> dict[int, list]:
        out: dict[int, list] = {}
        for k, t in self.tensors.items():
            out.setdefault(self._find(k), []).append(t)
        return out

    # in-place -----------------------------------------------------------------------------
    def _merge_inplace(self, order) -> None:
        last = self._last_reads(order)
        for step, n in enumerate(order):
            for o, i in n.op.inplace.items():
                x, y = n.inputs[i], n.outputs[o]
                gx, gy = self.root(x), self.root(y)
                if (gx == gy or self.persistent(gx) or self.persistent(gy)
                        or self._writer.get(gy) is not n or last.get(gx) != step
                        or self.size(gx) != y.nbytes or self.size(gy) != y.nbytes):
                    continue
                self._union(gx, gy)
                last[gx] = max(last.get(gx, step), last.get(gy, step))
                self.inplace_pairs.append((n, y, x))

    def _last_reads(self, order) -> dict[int, int]:
        last: dict[int, int] = {}
        for step, n in enumerate(order):
            for x in n.inputs:
                last[self.root(x)] = step
        return last

    def intervals(self, order) -> dict[int, tuple[int, int]]:
        """``group -> (first write step, last read step)`` for every non-persistent group."""
        span: dict[int, list[int]] = {}
        for step, n in enumerate(order):
            for t in list(n.outputs) + list(n.inputs):
                g = self.root(t)
                if g in self._persistent:
                    continue
                s = span.get(g)
                if s is None:
                    span[g] = [step, step]
                else:
                    s[0] = min(s[0], step)
                    s[1] = max(s[1], step)
        return {g: (a, b) for g, (a, b) in span.items()}


def live_profile(sizes: dict, intervals: dict, steps: int) -> list[int]:
    """Live bytes at each step: the sum of the sizes of groups whose interval covers it."""
    delta = [0] * (steps + 1)
    for g, (a, b) in intervals.items():
        delta[a] += sizes[g]
        delta[b + 1] -= sizes[g]
    out, cur = [], 0
    for d in delta[:steps]:
        cur += d
        out.append(cur)
    return out


def live_bytes_peak(graph, order, inplace: bool = True, base=None) -> int:
    """The live-bytes lower bound of ``order``: no placement can use a smaller arena.
    ``base``: a ``StorageGroups(graph)`` to start from (saves recomputing it per order)."""
    groups = StorageGroups(graph, order, inplace=inplace, base=base)
    iv = groups.intervals(order)
    prof = live_profile({g: groups.size(g) for g in iv}, iv, len(order))
    return max(prof, default=0)

"""Buffers and their lifetimes under an execution order.

Tensors that share bytes form a *storage group*: an alias output (reshape) joins its input's
group, and an in-place output joins the group of the input it overwrites. A group is
*persistent* when it holds a leaf (graph input, parameter, constant, optimizer state), a graph
output or a tensor some node mutates; persistent groups live outside the arena. Every other
group lives from the step of its first write to the step of its last read, inclusive.

Groups are keyed by the ``id`` of their root tensor. Internally every tensor gets a dense
index (node outputs in node order, then leaves) and every node its position in
``graph.nodes``: the order-dependent work (in-place merges, lifetimes, the live-bytes peak)
runs on lists of small integers and never touches a Tensor. On graphs of tens of thousands
of nodes, walks over the tensor objects and dictionaries keyed by their ids cost more per
node the larger the graph gets (cache misses), and the memory schedule evaluates several
orders, so this keeps compile time near-linear.
"""
from __future__ import annotations

from itertools import compress


class _Tables:
    """The order-independent facts about a graph's tensors and nodes, computed in three
    walks over the nodes and shared (read-only) by every :class:`StorageGroups` of that
    graph."""

    def __init__(self, graph):
        nodes = self.nodes = list(graph.nodes)
        self.position = {id(n): p for p, n in enumerate(nodes)}
        index: dict[int, int] = {}  # id(tensor) -> dense index
        objs: list = []
        producer: list[int] = []  # tensor index -> position of the node writing it, -1 if none
        outputs: list[list[int]] = []  # per node: its outputs' tensor indices
        for p, n in enumerate(nodes):
            outs = []
            for o in n.outputs:
                k = index.get(id(o))
                if k is None:
                    k = index[id(o)] = len(objs)
                    objs.append(o)
                    producer.append(p)
                else:
                    producer[k] = p
                outs.append(k)
            outputs.append(outs)
        n_out = len(objs)
        # every output is indexed now, so an input not found is a leaf (Graph.leaves order)
        leaves: list[int] = []
        inputs: list[list[int]] = []  # per node: its inputs' tensor indices
        mutated: list[tuple] = []  # per node: tensor indices of the inputs it mutates
        aliases: list[tuple[int, int]] = []  # (input, output) of every view, in node order
        may_inplace: list[int] = []  # positions of nodes whose op may write in place
        for p, n in enumerate(nodes):
            ins = []
            for x in n.inputs:
                k = index.get(id(x))
                if k is None:
                    k = index[id(x)] = len(objs)
                    objs.append(x)
                    leaves.append(k)
                ins.append(k)
            inputs.append(ins)
            op = n.op
            m = op.mutates
            mutated.append(tuple([ins[k] for k in m]) if m else ())
            if op.alias:
                aliases.extend((ins[i], outputs[p][o]) for o, i in op.alias.items())
            if op.inplace:
                may_inplace.append(p)
        for t in graph.outputs:
            if id(t) not in index:
                index[id(t)] = len(objs)
                leaves.append(len(objs))
                objs.append(t)
        producer.extend([-1] * (len(objs) - n_out))
        self.index, self.objs, self.producer = index, objs, producer
        self.inputs, self.mutated = inputs, mutated
        self.ids = list(map(id, objs))
        # the order of graph.tensors(): leaves first, then outputs in node order
        self.canonical = leaves + list(range(n_out))

        root = list(range(len(objs)))
        view = [False] * len(objs)
        for i, o in aliases:  # the output joins its input's group
            a, b = _find(root, i), _find(root, o)
            if a != b:
                root[b] = a
            view[o] = True
        for k in range(len(root)):  # flatten, so every tensor points at its group's root
            root[k] = _find(root, k)
        persistent = [False] * len(objs)
        for k in leaves:
            persistent[root[k]] = True
        for t in graph.outputs:
            persistent[root[index[id(t)]]] = True
        for ks in mutated:
            for k in ks:
                persistent[root[k]] = True
        self.root, self.view, self.persistent = root, view, persistent
        self.persistent_ids = frozenset(self.ids[g] for g in range(len(objs))
                                        if persistent[g] and root[g] == g)
        size = self.size = [t.nbytes for t in objs]

        # per node: the base groups it reads, the transient ones it touches (outputs
        # first), and its in-place candidates (input, output, their groups, output bytes);
        # built with map/compress, as these run once per node of a possibly huge graph
        group = root.__getitem__
        transient = [not x for x in persistent].__getitem__
        self.reads = [tuple(map(group, ins)) for ins in inputs]
        writes = [tuple(map(group, outs)) for outs in outputs]
        self.touches = [tuple(compress(w + r, map(transient, w + r)))
                        for w, r in zip(writes, self.reads)]
        self.inplace = [()] * len(nodes)
        for p in may_inplace:
            n, ins, outs = nodes[p], inputs[p], outputs[p]
            self.inplace[p] = tuple((n.inputs[i], n.outputs[o], root[ins[i]], root[outs[o]],
                                     size[outs[o]]) for o, i in n.op.inplace.items())


def _find(root: list, k: int) -> int:
    while root[k] != k:
        root[k] = root[root[k]]  # path halving
        k = root[k]
    return k


class StorageGroups:
    """Union-find over the graph's tensors, plus the in-place merges decided for an order.

    Args:
        graph: the Graph.
        order: the execution order; needed only when ``inplace`` is True.
        inplace: merge an elementwise op's output into the input it may overwrite when that
            input's group dies at the op (same byte size, neither group persistent).
        base: a ``StorageGroups(graph)`` whose order-independent part (aliases, persistence,
            per-node groups) is shared instead of recomputed: the memory schedule evaluates
            several orders and the memory plan one more.
    """

    def __init__(self, graph, order=None, inplace: bool = False, base=None):
        self.graph = graph
        self.inplace_pairs: list[tuple] = []  # (node, output tensor, input tensor)
        if base is not None:
            assert base.graph is graph and not base.inplace_pairs
            self._t = base._t
        else:
            self._t = _Tables(graph)
        self._root = list(self._t.root)  # in-place merges link roots of base groups
        self._tensors = None
        if inplace and order is not None:
            self._merge_inplace(self.positions(order))

    # queries ------------------------------------------------------------------------------
    @property
    def tensors(self) -> dict:
        """``id(tensor) -> tensor`` for every tensor, in the order of ``graph.tensors()``."""
        if self._tensors is None:
            t = self._t
            self._tensors = {t.ids[k]: t.objs[k] for k in t.canonical}
        return self._tensors

    @property
    def tables(self) -> _Tables:
        """The order-independent tables (read-only; shared with every StorageGroups made
        from this one as ``base``)."""
        return self._t

    def _group(self, k: int) -> int:
        root = self._root
        g = root[k]
        return g if root[g] == g else _find(root, g)

    def root(self, t) -> int:
        return self._t.ids[self._group(self._t.index[id(t)])]

    def persistent(self, g) -> bool:
        return g in self._t.persistent_ids

    def persistent_groups(self) -> frozenset:
        """The persistent groups (they live outside the arena)."""
        return self._t.persistent_ids

    def size(self, g) -> int:
        return self._t.size[self._t.index[g]]

    def first_writer(self, g):
        p = self._t.producer[self._t.index[g]]
        return self._t.nodes[p] if p >= 0 else None

    def groups(self) -> dict[int, list]:
        """``group -> its tensors``, groups and tensors in the order of ``graph.tensors()``."""
        return {g: members for g, _, members in self.members()}

    def members(self) -> list[tuple[int, object, list]]:
        """``(group, its root tensor, its tensors)`` for every group, in the order of
        :meth:`groups` (what binding a plan needs, without a look-up per group)."""
        t = self._t
        slot: dict[int, list] = {}  # root index -> its tensors
        out = []
        for k in t.canonical:
            r = self._group(k)
            lst = slot.get(r)
            if lst is None:
                lst = slot[r] = []
                out.append((t.ids[r], t.objs[r], lst))
            lst.append(t.objs[k])
        return out

    def no_reuse_bytes(self, align) -> int:
        """The sum of ``align(max(bytes, 1))`` over the transient tensors that are no view:
        the arena if no two buffers shared memory. (In-place merges never change which
        groups are persistent, so the base groups tell.)"""
        t = self._t
        root, persistent, size, view = t.root, t.persistent, t.size, t.view
        return sum(align(max(size[k], 1)) for k in range(len(size))
                   if not view[k] and not persistent[root[k]])

    # orders as node positions ---------------------------------------------------------------
    def positions(self, order) -> list[int]:
        """The positions in ``graph.nodes`` of the nodes of ``order``."""
        position = self._t.position
        return [position[id(n)] for n in order]

    # in-place -----------------------------------------------------------------------------
    def _merge_inplace(self, steps: list[int]) -> None:
        """Decide the in-place writes of the order given as node positions (see the class
        docstring); each merge joins the output's group into the input's."""
        t = self._t
        root, persistent, size, producer = self._root, t.persistent, t.size, t.producer
        last = [-1] * len(root)  # base group -> last step reading it, before any merge
        for step, p in enumerate(steps):
            for g in t.reads[p]:
                last[g] = step
        inplace, nodes = t.inplace, t.nodes
        for step, p in enumerate(steps):
            for x, y, bx, by, nbytes in inplace[p]:
                gx = bx if root[bx] == bx else _find(root, bx)
                gy = by if root[by] == by else _find(root, by)
                if (gx == gy or persistent[gx] or persistent[gy] or producer[gy] != p
                        or last[gx] != step or size[gx] != nbytes or size[gy] != nbytes):
                    continue
                root[gy] = gx  # both are roots: the union of the two groups
                last[gx] = max(step, last[gy])
                self.inplace_pairs.append((nodes[p], y, x))

    def _spans(self, steps: list[int]):
        """``(groups in first-use order, first step, last step)`` of the transient groups
        (index lists); persistent base groups are never merged, so filtering them on the
        base groups (``touches``) is the same as filtering the merged ones."""
        touches, root = self._t.touches, self._root
        first = [-1] * len(root)
        last = [-1] * len(root)
        used = []
        for step, p in enumerate(steps):
            for g in touches[p]:
                if root[g] != g:
                    g = _find(root, g)
                if first[g] < 0:
                    first[g] = step
                    used.append(g)
                last[g] = step
        return used, first, last

    def intervals(self, order) -> dict[int, tuple[int, int]]:
        """``group -> (first write step, last read step)`` for every non-persistent group,
        in the order the groups are first used (outputs before inputs within a step)."""
        return self.lifetimes(order)[0]

    def lifetimes(self, order) -> tuple[dict, dict]:
        """``(intervals(order), group -> bytes for those groups)``, in one pass."""
        used, first, last = self._spans(self.positions(order))
        ids, size = self._t.ids, self._t.size
        return ({ids[g]: (first[g], last[g]) for g in used}, {ids[g]: size[g] for g in used})

    def peak(self, steps: list[int]) -> int:
        """The live-bytes peak of the order given as node positions (see
        :func:`live_bytes_peak`)."""
        used, first, last = self._spans(steps)
        size = self._t.size
        delta = [0] * (len(steps) + 1)
        for g in used:
            delta[first[g]] += size[g]
            delta[last[g] + 1] -= size[g]
        best = cur = 0
        for d in delta:
            cur += d
            if cur > best:
                best = cur
        return best


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
    if base is None:
        base = StorageGroups(graph)
    return steps_peak(base, base.positions(order), inplace)


def steps_peak(base, steps: list[int], inplace: bool = True) -> int:
    """:func:`live_bytes_peak` of the order given as positions in ``graph.nodes``."""
    groups = StorageGroups(base.graph, base=base)
    if inplace:
        groups._merge_inplace(steps)
    return groups.peak(steps)

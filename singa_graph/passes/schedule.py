"""Execution orders. Every policy returns a list of the graph's nodes that respects data
dependencies and the write-after-read hazards of ops that mutate an input in place.

- ``sequential``: program (creation) order, SINGA's serial mode.
- ``topological``: Kahn's algorithm with a FIFO queue (breadth first), SINGA's BFS mode.

Except in ``sequential``, an optimizer update runs as soon as its gradient is final (ops with
``run_asap``), so gradient buffers die at once: the graph form of SINGA's layer-wise
backward-and-update. Ops with ``run_late`` (the wait of an all-reduce) run only when nothing
else is ready, so communication started earlier overlaps the rest of the backward.
- ``memory``: tries several topological orders (program order, BFS, DFS and a greedy
  smallest-live-bytes-first order) and keeps the one whose live-bytes peak is lowest, as XLA
  and PyTorch Inductor pick among candidate orders.
"""
from __future__ import annotations

import heapq
from collections import deque
from itertools import filterfalse

from ..errors import GraphError

POLICIES = ("sequential", "topological", "memory")


def dependencies(graph, base=None) -> dict[int, set[int]]:
    """``node index -> indices of nodes that must run before it``.

    Data edges, plus mutation hazards: a node that writes input T in place runs after every
    earlier-created reader of T, and before every later-created reader of T. Readers of an
    alias of T (a reshape view, an update's output) read T's bytes and count as readers of T:
    they are the readers of T's storage group before in-place merges.

    ``base``: the graph's ``StorageGroups`` (its tables say who writes and reads what).
    """
    from .liveness import StorageGroups

    t = (base if base is not None else StorageGroups(graph)).tables
    producer, root, reads = t.producer, t.root, t.reads
    # readers are needed only for the groups some node mutates: a list of every group's
    # readers would be the largest structure of the pass
    mutated = {root[k] for ks in t.mutated for k in ks}
    deps: dict[int, set[int]] = {}
    readers: dict[int, list[int]] = {}
    for i, ins in enumerate(t.inputs):
        ds = deps[i] = set()
        for k in ins:
            p = producer[k]
            if p >= 0:
                ds.add(p)
        if mutated:
            for g in reads[i]:
                if g in mutated:
                    readers.setdefault(g, []).append(i)
    for i, ks in enumerate(t.mutated):
        for k in ks:
            for r in readers.get(root[k], ()):
                if r < i:
                    deps[i].add(r)
                elif r > i:
                    deps[r].add(i)
    for i in deps:
        deps[i].discard(i)
    return deps


def _successors(deps) -> list[list[int]]:
    succ: list[list[int]] = [[] for _ in range(len(deps))]
    for i, ds in deps.items():
        for d in ds:
            succ[d].append(i)
    return succ


def _op_flags(graph) -> list[tuple[bool, bool, bool]]:
    """``(run_asap, run_late, starts communication)`` of each node's op: read once per
    schedule, not once per candidate order (each read touches every node and op)."""
    return [(op.run_asap, op.run_late, _starts_comm(op))
            for op in (nd.op for nd in graph.nodes)]


def _kahn(graph, deps, pick, asap: bool = True, succ=None, flags=None) -> list[int]:
    """Kahn's algorithm, as node indices; ``pick`` chooses among ready nodes. With ``asap``,
    nodes whose op sets ``run_asap`` (optimizer updates) jump the queue the moment they become
    ready, and nodes whose op sets ``run_late`` wait (first ready, first run) until nothing
    else is. ``succ``, ``flags``: :func:`_successors` of ``deps`` and :func:`_op_flags`, when
    the caller already has them."""
    n = len(graph.nodes)
    indeg = [len(deps[i]) for i in range(n)]
    if succ is None:
        succ = _successors(deps)
    order = []
    urgent: list[int] = []
    late: deque = deque()
    if asap:  # the op's scheduling class, looked up once per node, not at every push
        kinds = [("urgent" if a else "late" if z else "")
                 for a, z, _ in (flags if flags is not None else _op_flags(graph))]
    else:
        kinds = [""] * n

    first = [i for i in range(n) if indeg[i] == 0]
    urgent += [i for i in first if kinds[i] == "urgent"]
    late += [i for i in first if kinds[i] == "late"]
    state = pick.start([i for i in first if not kinds[i]])
    push = pick.push

    while len(order) < n:
        if urgent:
            i = urgent.pop()
        elif pick.nonempty(state):
            i = pick.pop(state)
        elif late:
            i = late.popleft()
        else:
            raise GraphError("graph has a cycle (through data or in-place hazards)")
        order.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                k = kinds[s]
                if not k:
                    push(state, s)
                elif k == "urgent":
                    urgent.append(s)
                else:
                    late.append(s)
    return order


class _Fifo:
    start = staticmethod(lambda r: deque(r))
    nonempty = staticmethod(bool)
    pop = staticmethod(lambda q: q.popleft())
    push = staticmethod(lambda q, i: q.append(i))


class _Lifo:
    start = staticmethod(lambda r: list(reversed(r)))
    nonempty = staticmethod(bool)
    pop = staticmethod(lambda q: q.pop())
    push = staticmethod(lambda q, i: q.append(i))


class _Program:
    start = staticmethod(lambda r: list(r))
    nonempty = staticmethod(bool)
    pop = staticmethod(lambda q: heapq.heappop(q))
    push = staticmethod(lambda q, i: heapq.heappush(q, i))


def _greedy(graph, deps, groups, succ=None, flags=None) -> list[int]:
    """As node indices: at each step run the ready node that adds the fewest live bytes
    (outputs it allocates minus inputs it frees), ties broken by program order; ``run_late``
    nodes only when nothing else is ready, the all-reduce starts that they wait for as soon as
    they are ready.

    A node's gain only changes when one of its input groups gets down to its last reader, so
    ready nodes sit in a heap and are re-pushed then; stale entries are skipped when popped
    (O(n log n) instead of scanning every ready node at every step)."""
    n = len(graph.nodes)
    t = groups.tables
    persistent, size, producer, root = t.persistent, t.size, t.producer, t.root
    # per node: the transient groups it reads (each once); plain lists indexed by group
    # below, as this runs once per node and per ready push on graphs of any size
    ins = [list(filterfalse(persistent.__getitem__, set(gs))) for gs in t.reads]
    alloc = [0] * n  # bytes of the transient groups each node writes first
    for g, p in enumerate(producer):
        if p >= 0 and root[g] == g and not persistent[g]:
            alloc[p] += size[g]
    readers: list = [None] * len(root)
    for i, gs in enumerate(ins):
        for g in gs:
            if readers[g] is None:
                readers[g] = [i]
            else:
                readers[g].append(i)
    readers_left = [0 if rs is None else len(rs) for rs in readers]
    if succ is None:
        succ = _successors(deps)
    indeg = [len(deps[i]) for i in range(n)]
    rank = [(z, -c) for _, z, c in (flags if flags is not None else _op_flags(graph))]

    def key(i):
        gain = 0
        for g in ins[i]:
            if readers_left[g] == 1:
                gain += size[g]
        return (*rank[i], alloc[i] - gain, i)

    ready = [indeg[i] == 0 for i in range(n)]
    heap = [key(i) for i in range(n) if ready[i]]
    heapq.heapify(heap)
    order = []
    while heap:
        k = heapq.heappop(heap)
        i = k[-1]
        if not ready[i] or k != key(i):
            continue
        ready[i] = False
        order.append(i)
        for g in ins[i]:
            readers_left[g] -= 1
            if readers_left[g] == 1:  # its last reader now frees it: that gain grows
                for r in readers[g]:
                    if ready[r]:
                        heapq.heappush(heap, key(r))
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready[s] = True
                heapq.heappush(heap, key(s))
    if len(order) < n:
        raise GraphError("graph has a cycle (through data or in-place hazards)")
    return order


def _starts_comm(op) -> bool:
    """An op that starts communication which a ``run_late`` op finishes."""
    return bool(getattr(op, "starts_comm", False))


def _candidates(graph, deps, base) -> list[list[int]]:
    """The distinct orders the memory policy chooses from, as node indices: program order,
    BFS, DFS, greedy smallest-live-bytes-first (orders often coincide on chains)."""
    succ, flags = _successors(deps), _op_flags(graph)
    found = [_kahn(graph, deps, pick, succ=succ, flags=flags)
             for pick in (_Program, _Fifo, _Lifo)]
    found.append(_greedy(graph, deps, base, succ=succ, flags=flags))
    out, seen = [], set()
    for steps in found:
        if tuple(steps) not in seen:
            seen.add(tuple(steps))
            out.append(steps)
    return out


def candidate_orders(graph, base=None) -> list[list]:
    """The distinct candidate orders of the ``memory`` policy, as node lists (the
    rematerialisation search tries them all: the order with the lowest peak is not always
    the one that recomputation brings lowest)."""
    from .liveness import StorageGroups

    if base is None:
        base = StorageGroups(graph)
    nodes = graph.nodes
    return [[nodes[i] for i in steps]
            for steps in _candidates(graph, dependencies(graph, base), base)]


def schedule(graph, policy: str = "memory", base=None) -> list:
    """An execution order of ``graph.nodes`` under ``policy`` (see the module docstring).
    ``base``: a ``StorageGroups(graph)`` to reuse (the memory plan needs one too)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown schedule {policy!r}; choose one of {POLICIES}")
    from .liveness import StorageGroups

    if base is None:
        base = StorageGroups(graph)
    deps = dependencies(graph, base)
    nodes = graph.nodes
    if policy == "sequential":  # creation order whenever legal
        return [nodes[i] for i in _kahn(graph, deps, _Program, asap=False)]
    if policy == "topological":
        return [nodes[i] for i in _kahn(graph, deps, _Fifo)]
    from .liveness import steps_peak

    best, best_peak = None, None
    for steps in _candidates(graph, deps, base):
        p = steps_peak(base, steps)
        if best is None or p < best_peak:
            best, best_peak = steps, p
    return [nodes[i] for i in best]

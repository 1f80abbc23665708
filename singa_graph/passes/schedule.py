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

from ..errors import GraphError

POLICIES = ("sequential", "topological", "memory")


def dependencies(graph) -> dict[int, set[int]]:
    """``node index -> indices of nodes that must run before it``.

    Data edges, plus mutation hazards: a node that writes input T in place runs after every
    earlier-created reader of T, and before every later-created reader of T. Readers of an
    alias of T (a reshape view, an update's output) read T's bytes and count as readers of T.
    """
    nodes = graph.nodes
    index = {n.id: i for i, n in enumerate(nodes)}
    prod = {id(o): index[n.id] for n in nodes for o in n.outputs}
    deps: dict[int, set[int]] = {i: set() for i in range(len(nodes))}
    base: dict[int, int] = {}  # id(alias output) -> id of the tensor owning its bytes
    for n in nodes:
        for o, i in n.op.alias.items():
            x = id(n.inputs[i])
            base[id(n.outputs[o])] = base.get(x, x)
    readers: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in n.inputs:
            if id(x) in prod:
                deps[i].add(prod[id(x)])
            readers.setdefault(base.get(id(x), id(x)), []).append(i)
    for i, n in enumerate(nodes):
        for k in n.op.mutates:
            t = id(n.inputs[k])
            for r in readers.get(base.get(t, t), ()):
                if r < i:
                    deps[i].add(r)
                elif r > i:
                    deps[r].add(i)
    for i in deps:
        deps[i].discard(i)
    return deps


def _kahn(graph, deps, pick, asap: bool = True) -> list:
    """Kahn's algorithm; ``pick`` chooses among ready nodes. With ``asap``, nodes whose op
    sets ``run_asap`` (optimizer updates) jump the queue the moment they become ready, and
    nodes whose op sets ``run_late`` wait (first ready, first run) until nothing else is."""
    n = len(graph.nodes)
    indeg = [len(deps[i]) for i in range(n)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for i, ds in deps.items():
        for d in ds:
            succ[d].append(i)
    order = []
    urgent: list[int] = []
    late: deque = deque()

    def kind(i):
        op = graph.nodes[i].op
        return "urgent" if asap and op.run_asap else "late" if asap and op.run_late else ""

    first = [i for i in range(n) if indeg[i] == 0]
    urgent += [i for i in first if kind(i) == "urgent"]
    late += [i for i in first if kind(i) == "late"]
    state = pick.start([i for i in first if not kind(i)])

    def ready(i):
        k = kind(i)
        if k == "urgent":
            urgent.append(i)
        elif k == "late":
            late.append(i)
        else:
            pick.push(state, i)

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
                ready(s)
    return [graph.nodes[i] for i in order]


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


def _greedy(graph, deps, groups) -> list:
    """At each step run the ready node that adds the fewest live bytes (outputs it allocates
    minus inputs it frees), ties broken by program order; ``run_late`` nodes only when nothing
    else is ready, the all-reduce starts that they wait for as soon as they are ready.

    A node's gain only changes when one of its input groups gets down to its last reader, so
    ready nodes sit in a heap and are re-pushed then; stale entries are skipped when popped
    (O(n log n) instead of scanning every ready node at every step)."""
    nodes = graph.nodes
    n = len(nodes)
    ins = [[g for g in {groups.root(x) for x in nd.inputs} if not groups.persistent(g)]
           for nd in nodes]
    alloc = [sum(groups.size(g) for g in {groups.root(o) for o in nd.outputs}
                 if not groups.persistent(g) and groups.first_writer(g) is nd)
             for nd in nodes]
    readers: dict[int, list[int]] = {}
    for i, gs in enumerate(ins):
        for g in gs:
            readers.setdefault(g, []).append(i)
    readers_left = {g: len(rs) for g, rs in readers.items()}
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(deps[i]) for i in range(n)]
    for i, ds in deps.items():
        for d in ds:
            succ[d].append(i)

    def delta(i):
        return alloc[i] - sum(groups.size(g) for g in ins[i] if readers_left[g] == 1)

    def key(i):
        op = nodes[i].op
        return (op.run_late, -_starts_comm(op), delta(i), i)

    ready = {i for i in range(n) if indeg[i] == 0}
    heap = [key(i) for i in ready]
    heapq.heapify(heap)
    order = []
    while heap:
        k = heapq.heappop(heap)
        i = k[-1]
        if i not in ready or k != key(i):
            continue
        ready.discard(i)
        order.append(i)
        for g in ins[i]:
            readers_left[g] -= 1
            if readers_left[g] == 1:  # its last reader now frees it: that gain grows
                for r in readers[g]:
                    if r in ready:
                        heapq.heappush(heap, key(r))
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.add(s)
                heapq.heappush(heap, key(s))
    if len(order) < n:
        raise GraphError("graph has a cycle (through data or in-place hazards)")
    return [nodes[i] for i in order]


def _starts_comm(op) -> bool:
    """An op that starts communication which a ``run_late`` op finishes."""
    return bool(getattr(op, "starts_comm", False))


def schedule(graph, policy: str = "memory") -> list:
    """An execution order of ``graph.nodes`` under ``policy`` (see the module docstring)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown schedule {policy!r}; choose one of {POLICIES}")
    deps = dependencies(graph)
    if policy == "sequential":
        return _kahn(graph, deps, _Program, asap=False)  # creation order whenever legal
    if policy == "topological":
        return _kahn(graph, deps, _Fifo)
    from .liveness import StorageGroups, live_bytes_peak

    base = StorageGroups(graph)
    candidates = [_kahn(graph, deps, _Program), _kahn(graph, deps, _Fifo),
                  _kahn(graph, deps, _Lifo), _greedy(graph, deps, base)]
    best, best_peak, seen = None, None, set()
    for order in candidates:
        key = tuple(n.id for n in order)
        if key in seen:  # orders often coincide on chains: evaluate each once
            continue
        seen.add(key)
        p = live_bytes_peak(graph, order, base=base)
        if best is None or p < best_peak:
            best, best_peak = order, p
    return best

"""Checks that a memory plan is safe to run. Tests call :func:`verify` on every plan."""
from __future__ import annotations

import bisect
import heapq

from ..errors import PlanError
from .schedule import dependencies


def verify(plan) -> None:
    """Raise :class:`PlanError` unless ``plan`` (a MemoryPlan or an ExecutionPlan) is sound:

    - the order holds every node once and respects data and in-place-hazard dependencies;
    - every tensor is read after it is written (or is persistent);
    - every transient buffer's recorded lifetime covers its first write and last read;
    - no two transient buffers (kernel workspace included) whose lifetimes overlap share a
      byte, and all fit the arena;
    - every in-place write overwrites an input that nothing reads afterwards, and every
      alias is declared by its op and has the input's size.
    """
    mp = getattr(plan, "memory", plan)
    groups, order = mp.groups, mp.order
    graph = groups.graph
    step = {n.id: s for s, n in enumerate(order)}
    if len(step) != len(order) or set(step) != {n.id for n in graph.nodes}:
        raise PlanError("the order does not hold every node of the graph exactly once")
    for i, ds in dependencies(graph).items():
        for d in ds:
            if step[graph.nodes[d].id] >= step[graph.nodes[i].id]:
                raise PlanError(f"{graph.nodes[i].name} runs before {graph.nodes[d].name}, "
                                "which it depends on")
    written = {id(t) for t in graph.leaves()}
    for n in order:
        for x in n.inputs:
            if id(x) not in written:
                raise PlanError(f"{n.name} reads {x.name} before it is written")
        written.update(id(o) for o in n.outputs)
    for g, (a, b) in groups.intervals(order).items():  # recorded lifetimes cover real uses
        rec = mp.intervals.get(g)
        if rec is None or rec[0] > a or rec[1] < b:
            raise PlanError(f"buffer {groups.tensors[g].name} is used in steps [{a}, {b}] "
                            f"but the plan keeps it alive only for {rec}")
    _check_overlaps(mp)
    _check_inplace(groups, order, step)
    for n in graph.nodes:
        for o, i in n.op.alias.items():
            if n.outputs[o].nbytes != n.inputs[i].nbytes:
                raise PlanError(f"{n.name} aliases buffers of different sizes")
            if groups.root(n.outputs[o]) != groups.root(n.inputs[i]):
                raise PlanError(f"{n.name}: alias output not in its input's storage")


def _check_overlaps(mp) -> None:
    """A sweep over the buffers in start order. The live ones are kept sorted by offset
    (they are pairwise disjoint, or an error was raised), so a new buffer overlaps one of
    them exactly when it overlaps its neighbour below or above: O(n log n), where testing
    every live buffer was quadratic on deep graphs, whose activations all live at once."""
    from .memory import _align

    for g in mp.intervals:
        if g not in mp.offsets:
            raise PlanError(f"transient buffer {g} has no offset")
    events = sorted(mp.buffers(), key=lambda b: b[3])
    by_offset: list[tuple[int, int, int]] = []  # (lo, hi, seq) of the live buffers
    ends: list[tuple[int, int, int, int]] = []  # heap of (last step, seq, lo, hi)
    live: dict[int, tuple[int, int, object]] = {}  # seq -> (lo, hi, key), oldest first
    for seq, (key, lo, size, a, b) in enumerate(events):
        hi = lo + _align(max(size, 1))
        if lo < 0 or hi > mp.arena_bytes:
            raise PlanError(f"buffer [{lo}, {hi}) lies outside the arena of {mp.arena_bytes}")
        while ends and ends[0][0] < a:  # buffers dead before this one starts
            _, old, lo2, hi2 = heapq.heappop(ends)
            del by_offset[bisect.bisect_left(by_offset, (lo2, hi2, old))]
            del live[old]
        i = bisect.bisect_left(by_offset, (lo, hi, seq))
        if (i > 0 and by_offset[i - 1][1] > lo) or (i < len(by_offset)
                                                     and by_offset[i][0] < hi):
            key2 = next(k for lo2, hi2, k in live.values() if lo < hi2 and lo2 < hi)
            raise PlanError(f"live buffers {_label(mp, key)} and {_label(mp, key2)} "
                            "overlap in the arena")
        by_offset.insert(i, (lo, hi, seq))
        heapq.heappush(ends, (b, seq, lo, hi))
        live[seq] = (lo, hi, key)


def _label(mp, key) -> str:
    if isinstance(key, tuple):
        return f"workspace of {mp.order[key[1]].name}"
    return mp.groups.tensors[key].name


def _check_inplace(groups, order, step) -> None:
    members = groups.groups()
    reads: dict[int, list[int]] = {}  # id(tensor) -> the steps that read it, ascending
    for s, n in enumerate(order):
        for x in n.inputs:
            reads.setdefault(id(x), []).append(s)
    for n, y, x in groups.inplace_pairs:
        if not any(n.outputs[o] is y and n.inputs[i] is x for o, i in n.op.inplace.items()):
            raise PlanError(f"{n.name} writes {y.name} over {x.name} without declaring it")
        s = step[n.id]
        g = groups.root(x)
        old = {id(t) for t in members[g]
               if t.creator is None or step.get(t.creator.id, -1) < s}
        # the first step after s reading an overwritten tensor (a look-up per tensor, not
        # a walk over every later step per in-place write)
        later = [r[bisect.bisect_right(r, s)] for r in map(reads.get, old)
                 if r and r[-1] > s]
        if later:
            raise PlanError(f"{order[min(later)].name} reads a buffer that {n.name} "
                            "overwrote in place")

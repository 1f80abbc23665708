"""Checks that a memory plan is safe to run. Tests call :func:`verify` on every plan."""
from __future__ import annotations

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
    from .memory import _align

    for g in mp.intervals:
        if g not in mp.offsets:
            raise PlanError(f"transient buffer {g} has no offset")
    events = sorted(mp.buffers(), key=lambda b: b[3])
    active: list[tuple[int, int, int, object]] = []  # (end, lo, hi, key)
    for key, lo, size, a, b in events:
        hi = lo + _align(max(size, 1))
        if lo < 0 or hi > mp.arena_bytes:
            raise PlanError(f"buffer [{lo}, {hi}) lies outside the arena of {mp.arena_bytes}")
        active = [t for t in active if t[0] >= a]
        for end, lo2, hi2, key2 in active:
            if lo < hi2 and lo2 < hi:
                raise PlanError(f"live buffers {_label(mp, key)} and {_label(mp, key2)} "
                                "overlap in the arena")
        active.append((b, lo, hi, key))


def _label(mp, key) -> str:
    if isinstance(key, tuple):
        return f"workspace of {mp.order[key[1]].name}"
    return mp.groups.tensors[key].name


def _check_inplace(groups, order, step) -> None:
    members = groups.groups()
    for n, y, x in groups.inplace_pairs:
        if not any(n.outputs[o] is y and n.inputs[i] is x for o, i in n.op.inplace.items()):
            raise PlanError(f"{n.name} writes {y.name} over {x.name} without declaring it")
        s = step[n.id]
        g = groups.root(x)
        old = {id(t) for t in members[g]
               if t.creator is None or step.get(t.creator.id, -1) < s}
        for later in order[s + 1:]:
            if any(id(t) in old for t in later.inputs):
                raise PlanError(f"{later.name} reads a buffer that {n.name} overwrote in place")
